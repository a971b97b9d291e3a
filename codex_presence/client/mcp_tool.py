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

Activity stays out of that text, as the design says, unless the call asks for it with the
optional boolean argument ``include_activity``: then each working or blocked member's line
ends with the state and how long it has held (``- builder [engineer] connected=1 working
3m``), and, when two or more of their sessions are busy, how many are working and blocked
(``working 3m (sessions: 2 working, 1 blocked)``).

The "calling member" is whoever the token belongs to; ``name``, if given, must match it,
so that a token copied into the wrong agent's config is noticed instead of answering for
someone else. A broker that is down or refuses the token makes the call fail with a
one-line reason (``isError``), never the server: the agent can retry later.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from codex_presence._wire import printable
from codex_presence.client.api import BrokerError, fetch_roster, fetch_whoami
from codex_presence.client.auth import make_async_client
from codex_presence.client.roster_text import roster_text

__all__ = ["RosterSource", "build_server"]

logger = logging.getLogger("codex_presence.mcp")

TOOL_DESCRIPTION = """\
Your team's roster from the presence broker: one line per teammate with their role, \
privilege bucket, and whether they are reachable right now (connected=N live \
subscriptions, or offline). Your own line is marked (you). With include_activity, each \
teammate who is working (a turn in progress) or blocked (waiting on a human) has that \
state and how long it has held at the end of their line, e.g. "working 3m", and how many \
of their sessions are working and blocked when they run several, e.g. "(sessions: 2 \
working, 1 blocked)"; any teammate whose sessions left commands running (even while \
idle) has "(background: 1 command, 4m)"; and under a teammate's line, one line per agent \
session they run, with its client, project and state, and what a blocked one waits on, \
e.g. "  - claude in api-server: blocked 1m, approve `make`"."""


_IncludeActivity = Annotated[
    bool,
    Field(
        description="Also say who is working or blocked, and for how long, what each "
        "teammate left running in the background, and each of their agents: client, "
        "project, state, what it waits on (default: false)."
    ),
]


class RosterSource:
    """Fetches the roster text for the member whose token this is."""

    def __init__(
        self, *, broker: str, token: str, name: str | None = None, timeout: float = 5.0
    ) -> None:
        self.broker = broker
        self.name = name
        self._token = token
        self._timeout = timeout

    async def text(self, *, activity: bool = False) -> str:
        """The roster text (``activity``: with each member's activity), or
        :class:`ToolError` with a one-line reason."""
        async with make_async_client(self.broker, self._token, timeout=self._timeout) as client:
            try:
                me = await fetch_whoami(client)
                if self.name and me.name != self.name:
                    raise ToolError(
                        f"the configured token is {printable(me.name)}'s, "
                        f"not {printable(self.name)}'s"
                    )
                roster = await fetch_roster(client)
            except BrokerError as exc:
                raise ToolError(str(exc)) from None
        now_ms = int(time.time() * 1000)
        return roster_text(me.team, roster, you=me.name, activity=activity, now_ms=now_ms)


def build_server(source: RosterSource) -> MCPServer[Any]:
    """An MCP server with the one ``roster`` tool, answering from ``source``."""
    from codex_presence import __version__

    server: MCPServer[Any] = MCPServer(
        "codex-presence",
        version=__version__,
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
    async def roster(include_activity: _IncludeActivity = False) -> str:
        text = await source.text(activity=include_activity)
        logger.debug("roster tool answered %d lines", text.count("\n") + 1)
        return text

    return server
