"""The wrap daemon's broker side: connection presence and the activity reporter.

:class:`BrokerLink` plugs into the relay as one observer (every transition, synchronously,
never blocking) and one companion (a context that lives exactly as long as the wrapped
session): inside it, one task holds the member's SSE subscription and another reports
activity. On the way out — the child exited, or we were told to stop — a member the broker
holds as working or blocked is reported idle, bounded to about a second, and only then does
the subscription end: the broker hears the session's last word while the session is bound
to it. (Idle after the subscription's end reached a broker that had already given the
session its grace, taken it for dying; and where several brokers share a store, the one
that held the subscription does not see a report made through another, so the session's
clean end read there as a lapse: told as a death.)

The two talk through the link: the broker's ``GET /whoami`` (asked first, and again after
each reconnect) says its activity TTL, which sets the reporter's heartbeat; and each time
the subscription comes back online the broker may have restarted empty, so the reporter
re-sends a non-idle state at once rather than at its next heartbeat.

Each run is one session of the member (:attr:`BrokerLink.session_id`, 16 random URL-safe
characters, picked here): every report and the subscription carry it, so that the broker
holds this run's activity apart from the member's other sessions, and lets it lapse seconds
after the subscription drops (the runner was killed) rather than at the TTL.

Each report may carry the session's agent record (issue 32: the client, its version, the
host, the project, and while blocked what the agent waits on), built at the share level
the person chose (:class:`~codex_presence.core.agent_record.Share`, ``--share``) from what
the mapping says (a transition's :class:`~codex_presence.core.activity.Waits` and
:class:`~codex_presence.core.activity.AgentFacts`) and what is known here: the host, and
the directory the runner started in until the agent says where it works. The project is
that directory's git top-level's name (found by looking for ``.git`` upwards, no process
run), else the directory's own; all of it is looked up after the child started.

With ``trace=False`` (``--no-trace``) there is no activity reporter at all: the member's
activity (and background count) stays absent for the whole session, while connection
presence works as usual.
The demo plays its recorded session through this same link.
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
from anyio.abc import ObjectReceiveStream

from codex_presence._wire import Whoami, masked, printable
from codex_presence.client.api import BrokerError, NotABroker, TokenRefused, fetch_whoami
from codex_presence.client.auth import make_async_client
from codex_presence.client.reporter import ActivityReporter
from codex_presence.client.subscription import ConnectionPresence, ConnectionState, Outage
from codex_presence.core.activity import AgentFacts, Transition, Waits
from codex_presence.core.agent_record import Share, record
from codex_presence.core.backoff import Backoff, reconnect_backoff
from codex_presence.core.report_policy import ReportPolicy

__all__ = ["BrokerLink", "BrokerSettings", "project_of"]

logger = logging.getLogger("codex_presence.daemon")


@dataclass(frozen=True, kw_only=True)
class BrokerSettings:
    url: str
    token: str
    name: str | None = None
    """The member name; asked of the broker (``GET /whoami``) when not given."""
    trace: bool = True
    exit_grace: float = 1.0
    client: str = "custom"
    """The agent client the runner runs (``codex-app-server``, ``codex-tui``, ``claude``)."""
    share: Share = Share.DEFAULT
    version: str | None = None
    """The agent's version as installed (read beside its program), for a session whose
    own words never say it (a resumed codex thread, Gemini CLI); what they say wins."""
    """How much of the agent record leaves the machine (``--share``)."""


class BrokerLink:
    """Tells one broker about one wrapped session."""

    def __init__(
        self,
        settings: BrokerSettings,
        *,
        policy: ReportPolicy | None = None,
        presence_backoff: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self._policy = policy
        self._presence_backoff = presence_backoff
        self.reporter: ActivityReporter | None = None
        self.presence: ConnectionPresence | None = None
        self.session_id = secrets.token_urlsafe(12)
        """This run's session: its reports and its subscription carry it."""
        self._facts = AgentFacts()
        self._waits: Waits | None = None
        self._host: str | None = None
        self._started_in: str | None = None
        self._projects: dict[str, str | None] = {}

    def agent_record(self) -> dict[str, object] | None:
        """The agent record at the settings' share level, from what is known now."""
        settings = self.settings
        if settings.share is Share.NONE:
            return None
        if self._host is None:
            self._host = socket.gethostname()
        cwd = self._facts.cwd or self._started_in
        if cwd is not None and cwd not in self._projects:
            self._projects = {cwd: project_of(cwd)}  # one: a session changes place rarely
        return record(
            share=settings.share,
            client=settings.client,
            version=self._facts.version or settings.version,
            host=self._host,
            project=None if cwd is None else self._projects[cwd],
            waits=self._waits,
        )

    def observe(self, transition: Transition) -> None:
        """The relay's observer: hand the new state, the background count and the agent
        record to the reporter (never blocks). A transition of the count or the record
        alone is no news for the state, but is reported: the roster shows them apart."""
        if self.reporter is None:
            return
        if transition.changes_agent or transition.changes_state:
            if transition.facts != _NO_FACTS:  # a transition the mapping did not make has none
                self._facts = transition.facts
            self._waits = transition.waits
            self.reporter.observe_agent(self.agent_record())
        if transition.changes_background:
            self.reporter.observe_background(transition.background)
        if transition.changes_state:
            self.reporter.observe(transition.state, passing=transition.passing)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """The relay's companion: presence and reporting for the session's lifetime."""
        settings = self.settings
        async with make_async_client(settings.url, settings.token) as client:
            if settings.trace:
                self.reporter = ActivityReporter(
                    client=client, policy=self._policy, session=self.session_id
                )
                with suppress(OSError):  # a directory gone: the agent will say where it is
                    self._started_in = str(Path.cwd())
                self.reporter.observe_agent(self.agent_record())
            else:
                logger.info("--no-trace: activity is not reported; connection presence only")
            async with anyio.create_task_group() as tg:
                # The relayed session runs inside this task group: a task that raised
                # would cancel it, so neither task may (see _never_fatal).
                tg.start_soon(_never_fatal, "connection presence", self._hold_presence, client)
                reporting, reported = anyio.CancelScope(), anyio.Event()
                if self.reporter is not None:
                    tg.start_soon(_report, self.reporter, reporting, reported)
                try:
                    yield
                finally:
                    if self.reporter is not None:  # the last word, then the subscription's end
                        reporting.cancel()
                        with anyio.CancelScope(shield=True):
                            await reported.wait()
                            await self.reporter.finish(grace=settings.exit_grace)
                    tg.cancel_scope.cancel()

    async def _hold_presence(self, client: httpx.AsyncClient) -> None:
        me = await self._whoami(client)
        if me is None:
            return
        self._learn(me)
        reconnected, reconnects = anyio.create_memory_object_stream[None](1)

        def on_change(state: ConnectionState) -> None:
            if state is not ConnectionState.ONLINE:
                return
            if self.reporter is not None:
                self.reporter.resend()  # the broker may have restarted and forgotten
            if presence.connects > 1:
                with suppress(anyio.WouldBlock):  # one refresh pending is enough
                    reconnected.send_nowait(None)

        presence = self.presence = ConnectionPresence(
            client=client,
            name=self.settings.name or me.name,
            backoff=self._presence_backoff,
            on_change=on_change,
            session=self.session_id,
        )
        async with reconnected, reconnects, anyio.create_task_group() as tg:
            tg.start_soon(self._relearn, client, reconnects)
            await presence.run()
            tg.cancel_scope.cancel()

    def _learn(self, me: Whoami) -> None:
        if self.reporter is not None and me.activity_ttl is not None:
            self.reporter.use_broker_ttl(me.activity_ttl)

    async def _relearn(
        self, client: httpx.AsyncClient, reconnects: ObjectReceiveStream[None]
    ) -> None:
        """After each reconnect, ask the broker its TTL again: it may have restarted with
        another one."""
        async for _ in reconnects:
            with suppress(BrokerError):
                self._learn(await fetch_whoami(client))

    async def _whoami(self, client: httpx.AsyncClient) -> Whoami | None:
        """The member the token belongs to, retried with backoff while the broker is away
        (said once, then counted)."""
        backoff = reconnect_backoff()
        outage = Outage(logger, "cannot ask the broker whose token this is")
        while True:
            try:
                me = await fetch_whoami(client)
            except TokenRefused as exc:
                logger.error(
                    "offline: %s: no member of its team has it (check --token-file or "
                    "$CODEX_PRESENCE_TOKEN, and --broker); not retrying",
                    exc,
                )
                return None
            except NotABroker as exc:
                # A proxy's page, a dev server's fallback: not (yet) our broker.
                logger.log(
                    logging.WARNING if backoff.attempts == 0 else logging.DEBUG,
                    "GET %s/whoami answered 200 without a member name (%s); retrying",
                    masked(self.settings.url),
                    exc.content_type,
                )
            except BrokerError as exc:
                outage.failed(f"{exc}; retrying")
            else:
                logger.info("the token is %s's%s", printable(me.name), outage.over())
                return me
            await anyio.sleep(backoff.next_delay())


_NO_FACTS = AgentFacts()


def project_of(directory: str) -> str | None:
    """The name of the project ``directory`` is in: its git top-level's (the nearest
    directory upwards that holds ``.git``, a work tree's file included), else its own."""
    path = Path(directory).absolute()
    for here in [path, *path.parents][:64]:
        if (here / ".git").exists():
            return here.name or None
    return path.name or None


async def _report(reporter: ActivityReporter, scope: anyio.CancelScope, done: anyio.Event) -> None:
    """The reporter's run, until ``scope`` is cancelled; ``done`` is set once it has ended."""
    try:
        with scope:
            await _never_fatal("activity reporting", reporter.run)
    finally:
        done.set()


async def _never_fatal(what: str, task: Callable[..., Awaitable[object]], *args: object) -> None:
    """Run a background task of the session; a bug in it is logged, and the wrapped
    session goes on without it instead of being cancelled with it."""
    try:
        await task(*args)
    except Exception:
        logger.exception("%s failed; the session goes on without it", what)
