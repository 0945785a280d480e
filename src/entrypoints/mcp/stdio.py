"""``berth mcp``: berth's MCP tools over stdio, for a desktop agent, backed by a berth's
HTTP API (``BERTH_URL``, ``BERTH_TOKEN``) as the CLI's client commands are.

The tools are ``tools.py``'s, the same as the ones mounted at ``/mcp``; their backend is
``berth.client.AsyncClient`` itself: one API request per call, its answer the API's
body, its errors ``ApiError``s whose invalid fields are named as the tools name their
arguments (``body.healthPath`` → ``health_path``).
"""

from __future__ import annotations

from berth.client import AsyncClient
from mcp.server import MCPServer

from .tools import build_server

__all__ = ["run_stdio", "stdio_server"]


def stdio_server(client: AsyncClient) -> MCPServer:
    """The tools, every call made with ``client``."""
    return build_server(lambda ctx: client)


async def run_stdio(url: str, token: str) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""
    async with AsyncClient(url, token) as client:
        await stdio_server(client).run_stdio_async()
