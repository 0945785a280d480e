"""The MCP tools berth offers, as the unit and integration tests expect them."""

from __future__ import annotations

__all__ = ["READ_TOOLS"]

#: The tools a read-scoped token is offered, in the order ``tools/list`` gives them:
#: the tools annotated read-only.
READ_TOOLS = [
    "whoami",
    "list_servers",
    "list_installations",
    "list_containers",
    "get_deployment",
    "list_revisions",
    "logs",
    "get_stats",
    "get_disk_usage",
]
