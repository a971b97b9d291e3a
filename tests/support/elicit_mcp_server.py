"""A tiny stdio MCP server whose one tool asks the client for an elicitation.

Codex runs it from ``[mcp_servers.elicit]`` in config.toml; when the fake model calls the
tool, the tool's ``ctx.elicit`` becomes an ``mcpServer/elicitation/request`` to the
app-server client — the human-blocking request the scenario records.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("elicit")


# Written by hand: codex 0.169.0 rejects the "title" keys a pydantic-made schema carries
# ("failed to parse typed MCP elicitation schema: unknown field `title`").
SCHEMA = {
    "type": "object",
    "properties": {"confirmed": {"type": "boolean", "description": "Go ahead?"}},
    "required": ["confirmed"],
}


@server.tool()
async def confirm_action(action: str, ctx: Context) -> str:
    """Ask the user to confirm an action before doing it."""
    result = await ctx.request_context.session.elicit_form(
        message=f"Really {action}?", requested_schema=SCHEMA, related_request_id=ctx.request_id
    )
    return f"{action}: {result.action} {result.content}"


if __name__ == "__main__":
    server.run("stdio")
