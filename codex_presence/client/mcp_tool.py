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

import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from codex_presence.client.auth import make_async_client, parse_whoami
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
            me = parse_whoami((await self._get(client, "/whoami")).content)
            if me is None:
                raise ToolError(f"GET /whoami: {self.broker} is not a codex-presence broker")
            if self.name and me.name != self.name:
                raise ToolError(f"the configured token is {me.name!r}'s, not {self.name!r}'s")
            response = await self._get(client, "/roster")
            try:
                roster = response.json()
            except ValueError:
                raise ToolError("GET /roster: the broker did not answer JSON") from None
        return roster_text(me.team, roster, you=me.name)

    async def _get(self, client: httpx.AsyncClient, path: str) -> httpx.Response:
        try:
            response = await client.get(path)
        except httpx.HTTPError as exc:
            raise ToolError(f"cannot reach the presence broker at {self.broker}: {exc}") from None
        if response.status_code == 401:
            raise ToolError(f"the presence broker at {self.broker} refused the token (401)")
        if response.status_code != 200:
            raise ToolError(f"GET {path}: HTTP {response.status_code} from {self.broker}")
        return response


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
