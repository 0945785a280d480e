"""The MCP server: berth's tools for AI agents, mounted at /mcp and over stdio."""
