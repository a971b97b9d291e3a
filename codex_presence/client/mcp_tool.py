"""The ``roster`` MCP tool: who is on the team, and who is reachable right now.

``codex-presence mcp`` runs :func:`build_server` over stdio; codex (or any MCP client)
starts it as a server from its config. Each call asks the broker afresh — ``GET /whoami``
and ``GET /roster`` with the calling member's token — and answers the design's exact
agent-facing roster text, rendered by :func:`~.roster_text.roster_text` (the one renderer the
CLI uses too)::

    team acme roster:
    - alice (you) [director] [admin] connected=2
    - builder [engineer] connected=1
    - scout [scout] [operator] offline

The "calling member" is whoever the token belongs to; ``name``, if given, must match it,
so that a token copied into the wrong agent's config is noticed instead of answering for
someone else. A broker that is down or refuses the token makes the call fail with a
one-line reason (``isError``), never the server: the agent can retry later.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from codex_presence.client.api import BrokerError, fetch_roster, fetch_whoami
from codex_presence.client.auth import make_async_client
from codex_presence.client.roster_text import roster_text

__all__ = ["RosterSource", "build_server"]

logger = logging.getLogger("codex_presence.mcp")

TOOL_DESCRIPTION = """\
Your team's roster from the presence broker: one line per teammate with their role, \
privilege bucket, and whether they are reachable right now (connected=N live \
subscriptions, or offline). Your own line is marked (you)."""


class RosterSource:
    """Fetches the roster text for the member whose token this is."""

    def __init__(
        self, *, broker: str, token: str, name: str | None = None, timeout: float = 5.0
    ) -> None:
        self.broker = broker
        self.name = name
        self._token = token
        self._timeout = timeout

    async def text(self) -> str:
        """The roster text, or :class:`ToolError` with a one-line reason."""
        async with make_async_client(self.broker, self._token, timeout=self._timeout) as client:
            try:
                me = await fetch_whoami(client)
                if self.name and me.name != self.name:
                    raise ToolError(f"the configured token is {me.name!r}'s, not {self.name!r}'s")
                roster = await fetch_roster(client)
            except BrokerError as exc:
                raise ToolError(str(exc)) from None
        return roster_text(me.team, roster, you=me.name)


def build_server(source: RosterSource) -> MCPServer[Any]:
    """An MCP server with the one ``roster`` tool, answering from ``source``."""
    server: MCPServer[Any] = MCPServer(
        "codex-presence",
        instructions="Call roster to see which teammates are reachable right now.",
        log_level="WARNING",
    )

    # Plain text, not structured output: the roster *is* text, and every client shows it.
    @server.tool(
        name="roster",
        title="Team roster",
        description=TOOL_DESCRIPTION,
        annotations=ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
        structured_output=False,
    )
    async def roster() -> str:
        text = await source.text()
        logger.debug("roster tool answered %d lines", text.count("\n") + 1)
        return text

    return server
