"""The MCP server: berth's tools for AI agents (``tools``), mounted at /mcp in the HTTP
app (``mount.MountedMcp``, served by ``mounted``) and over stdio (``stdio``, what
``berth mcp`` runs, through the typed client). This package imports neither Litestar nor
the HTTP app, so that ``berth mcp`` loads only what it uses.
"""

__all__ = ["MCP_PATH"]

MCP_PATH = "/mcp"
