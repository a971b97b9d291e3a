"""The demo: the whole system on one machine, from a bundled real codex session.

An embedded broker on a free loopback port; a member ``codex-agent`` whose daemon side is
wrap's own — the recorded session is played through the codex mapping in real time (scaled
by ``speed``) and every transition goes to the same broker link that ``wrap`` uses
(:class:`~codex_presence.client.link.BrokerLink`: the activity reporter and the
agent's SSE subscription); and a watcher (``alice``) that draws the live roster from the
broker's own SSE stream with ``roster --watch``'s code. No codex binary, no network.

The broker's address and alice's token stay on screen, so that the roster page can be
opened meanwhile; what the session does is told in words as it plays
(:class:`~codex_presence.core.codex.words.Narrator`), and the timeline at the end names each
cause as an event a person knows. Ctrl-C ends everything at once: the embedded broker
does not stop first (its clients would say it went away).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from codex_presence._wire import ActivityState
    from codex_presence.broker.team import Team
    from codex_presence.core.activity import Transition
    from codex_presence.core.recording import Entry
    from codex_presence.core.timeline import TimelineRow

__all__ = [
    "DEFAULT_FIXTURE",
    "HELP",
    "DemoResult",
    "bundled_fixtures",
    "configure",
    "run",
    "run_demo",
]

HELP = "run an embedded broker and play a real recorded codex session through the pipeline"

_EPILOG = """\
Starts a broker on a free loopback port, plays a recorded codex 0.169.0 session through
the codex mapping, the activity reporter and the broker in real time, and shows the live
roster as it changes: a spinner while the agent works, "needs input" while it waits on a
human, and what the session is doing, in words. The broker's address and a member token
stay on screen: open the address in a browser and sign in with the token to watch the
roster page too (--loop gives you time). It ends with the final roster and the session's
timeline. No codex binary, no network, no setup.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.add_argument(
        "--session",
        metavar="NAME",
        default=None,
        help="which bundled session to play (default: demo_session); --list shows them",
    )
    parser.add_argument("--list", action="store_true", help="list the bundled sessions")
    parser.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="play X times faster (default: 1)"
    )
    parser.add_argument(
        "--loop",
        action="store_true",
        help="play the session again and again until Ctrl-C (time to open the roster page)",
    )


def run(args: argparse.Namespace) -> int:
    import sys

    import anyio

    from codex_presence.cli.main import UsageError, setup_logging

    setup_logging(quiet=True)
    fixtures = bundled_fixtures()
    if args.list:
        sys.stdout.write("".join(f"{name}\n" for name in fixtures))
        return 0
    if not args.speed > 0:
        raise UsageError("--speed must be a positive number")
    name = args.session or (DEFAULT_FIXTURE if DEFAULT_FIXTURE in fixtures else None)
    if name is None and fixtures:
        name = next(iter(fixtures))
    if name not in fixtures:
        raise UsageError(f"no bundled session {name!r}; try --list")
    fixture = fixtures[name]
    result = anyio.run(
        lambda: run_demo(fixture=fixture, speed=args.speed, out=sys.stdout, loop=args.loop)
    )
    if result.interrupted:
        return 130
    sys.stdout.write(summary(result) + "\n")
    return 0


DEFAULT_FIXTURE = "demo_session"
AGENT = "codex-agent"
WATCHER = "alice"
FIXTURE_DIR = "codex-0.169.0"


def bundled_fixtures() -> dict[str, Path]:
    """Recorded sessions shipped with the package (or beside it, in a source checkout)."""
    candidates = [
        Path(str(resources.files("codex_presence"))) / "_fixtures" / FIXTURE_DIR,
        Path(__file__).resolve().parents[2] / "fixtures" / FIXTURE_DIR,
    ]
    for directory in candidates:
        if directory.is_dir():
            return {p.stem: p for p in sorted(directory.glob("*.jsonl"))}
    return {}


@dataclass
class DemoResult:
    timeline: list[TimelineRow] = field(default_factory=list)
    roster: list[dict[str, Any]] = field(default_factory=list)
    team: str = ""
    reports: int = 0
    interrupted: bool = False
    """Ctrl-C (or SIGTERM) ended it."""
    shown: str = ""
    """The live roster's last frame, as drawn."""


def _team() -> tuple[Team, dict[str, str]]:
    from codex_presence._wire import ADMIN_PERMISSION, OPERATOR_PERMISSION
    from codex_presence.broker.team import Member, Role, Team, hash_token, new_token

    tokens = {name: new_token() for name in (AGENT, WATCHER, "scout")}
    roles = {
        WATCHER: Role("director", (ADMIN_PERMISSION, OPERATOR_PERMISSION)),
        AGENT: Role("engineer"),
        "scout": Role("scout", (OPERATOR_PERMISSION,)),
    }
    members = tuple(Member(n, roles[n], hash_token(t)) for n, t in tokens.items())
    return Team(name="demo", members=members), tokens


FIRST_FRAME_WITHIN = 10.0
"""Seconds the session waits at most for the live view's first frame before it plays."""
SHOWN_WITHIN = 5.0
"""Seconds the session waits at most, after a change of state, for the live view to show
it, before it plays on (a machine that cannot keep up slows the show down instead of
hiding states from it)."""


async def run_demo(
    *, fixture: Path, speed: float = 1.0, out: TextIO, loop: bool = False
) -> DemoResult:
    """Play ``fixture`` through mapping → broker link (wrap's reporter and subscription)
    → broker, with ``roster --watch``'s live view of it on ``out``, under the broker's
    address, a member token and what the session is doing; ``loop``: again and again,
    until cancelled."""
    import signal

    import anyio
    import uvicorn

    from codex_presence._wire import ActivityState, Whoami
    from codex_presence.broker.config import BrokerConfig, build_broker
    from codex_presence.broker.hosts import allowed_hosts
    from codex_presence.broker.server import BrokerServer, listen_socket
    from codex_presence.broker.web import WebRoster
    from codex_presence.cli.roster import watch
    from codex_presence.client.api import fetch_roster
    from codex_presence.client.auth import make_async_client
    from codex_presence.client.link import BrokerLink, BrokerSettings
    from codex_presence.client.stream import RosterView
    from codex_presence.core.recording import read_entries

    team, tokens = _team()
    web = WebRoster(team=team)  # the page the address leads to, and its sign-in
    built = build_broker(
        team,
        BrokerConfig(fanout_interval=0.02),
        web=web,
        allowed_hosts=allowed_hosts("127.0.0.1"),  # no DNS rebinding
    )
    broker, app = built.broker, built.app
    sock = listen_socket("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on")
    server = BrokerServer(config, broker=broker, signals=False)
    entries = list(read_entries((await anyio.Path(fixture).read_bytes()).splitlines()))
    result = DemoResult(team=team.name)
    settings = BrokerSettings(url=url, token=tokens[AGENT], name=AGENT, client="codex-app-server")
    link = BrokerLink(settings)  # the recording is an app-server session

    async with (
        make_async_client(url, tokens[WATCHER]) as watcher,
        anyio.create_task_group() as tg,
    ):
        started = anyio.Event()
        server.on_started = started.set
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        with anyio.fail_after(10):
            await started.wait()
        about = (
            f"broker {url} — open it in a browser and sign in as {WATCHER} with the token "
            f"{tokens[WATCHER]}"
        )
        story = _Story(out, about)
        out.write(f"demo: playing {fixture.name} at {speed:g}x; {about}\n")
        out.flush()
        watching = anyio.CancelScope()
        first_frame = anyio.Event()
        live: dict[str, str | None] = {AGENT: None}
        """What the live view shows of the agent: its activity (None: idle)."""
        viewed = anyio.Event()
        """Set (and made anew) each time the live view draws a roster."""

        async def watch_roster() -> None:
            with watching:
                me = Whoami(team=team.name, name=WATCHER)
                heading = story.heading if story.tty else None

                def drawn(text: str) -> None:
                    result.shown = text
                    first_frame.set()

                def view(roster: RosterView) -> None:
                    nonlocal viewed
                    live[AGENT] = roster.members.get(AGENT, {}).get("activity")
                    viewed.set()
                    viewed = anyio.Event()

                await watch(watcher, me, out, heading=heading, on_draw=drawn, on_view=view)

        tg.start_soon(watch_roster)
        # The session plays once the live view shows the roster (its stream is open): the
        # person sees it from its first state. Before, a loaded machine drew the first
        # frame after the first states had passed, and the view never showed them.
        with anyio.move_on_after(FIRST_FRAME_WITHIN):
            await first_frame.wait()
        playing = anyio.CancelScope()
        signal_scope = anyio.CancelScope()

        async def stop_on_ctrl_c() -> None:
            """Ctrl-C (or SIGTERM): the session and the watcher end first, then the broker,
            so that nobody says the broker went away."""
            with signal_scope, anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as got:
                async for _ in got:
                    result.interrupted = True
                    watching.cancel()
                    playing.cancel()
                    return

        tg.start_soon(stop_on_ctrl_c)

        async def shown(state: ActivityState) -> None:
            """Until the live view shows the state just played (at most
            :data:`SHOWN_WITHIN`): on a loaded machine, half a second of a state could be
            over before the reporter's post, and the view never showed it."""
            want = None if state is ActivityState.IDLE else state.value
            with anyio.move_on_after(SHOWN_WITHIN):
                while live[AGENT] != want:
                    await viewed.wait()

        with playing:
            async with link.session():
                while True:
                    await _play(entries, speed, link.observe, result, story.tell, shown)
                    await anyio.sleep(0.5)  # let the last state show
                    if not loop:
                        break
                    story.tell("(again, from the start)")
        if link.reporter is not None:
            result.reports = link.reporter.posts
        if not result.interrupted:
            await anyio.sleep(0.2)
            result.roster = await fetch_roster(watcher)
        watching.cancel()
        signal_scope.cancel()
        server.should_exit = True  # a graceful stop: the broker ends its streams first
    sock.close()
    return result


class _Story:
    """What the session is doing, in words: on a terminal, the last few sentences under the
    broker's address, redrawn with the roster (:meth:`heading`); elsewhere, a line each."""

    KEEP = 6

    def __init__(self, out: TextIO, about: str) -> None:
        from collections import deque

        self.out = out
        self.tty = out.isatty()
        self.about = about
        self.said: deque[str] = deque(maxlen=self.KEEP)

    def tell(self, sentence: str) -> None:
        self.said.append(sentence)
        if not self.tty:
            self.out.write(f"  > {sentence}\n")
            self.out.flush()

    def heading(self) -> str:
        told = "".join(f"  > {sentence}\n" for sentence in self.said)
        return f"codex-presence demo: {self.about}\n\n{told}\n"


async def _play(
    entries: list[Entry],
    speed: float,
    observe: Callable[[Transition], object],
    result: DemoResult,
    tell: Callable[[str], object],
    shown: Callable[[ActivityState], Awaitable[None]] | None = None,
) -> None:
    """Feed the session to the mapping at its pace; each transition goes to ``observe``,
    as the relay hands wrap's transitions to the broker link, and each step that matters
    to ``tell``, in words. After each transition, ``shown`` is awaited (until the live
    view has it): the pace resumes from there, the time it took left out."""
    import anyio

    from codex_presence.cli.replay import paced
    from codex_presence.core.activity import ActivityState, Transition
    from codex_presence.core.codex.words import Narrator
    from codex_presence.core.timeline import TimelineBuilder

    builder = TimelineBuilder()
    narrator = Narrator()
    state = ActivityState.IDLE

    paused = 0.0
    """Seconds spent in ``shown``: the session's clock stands still meanwhile."""

    async def note(row: TimelineRow | None) -> None:
        nonlocal state, paused
        if row is not None:
            result.timeline.append(row)
            new = ActivityState(row.state)
            observe(Transition(previous=state, state=new, cause=row.cause))
            state = new
            if shown is not None:
                began = anyio.current_time()
                await shown(new)
                paused += anyio.current_time() - began

    async for entry in paced(entries, speed, clock=lambda: anyio.current_time() - paused):
        sentence = narrator.feed(entry.direction, entry.message)
        if sentence is not None:
            tell(sentence)
        for row in builder.feed(entry):
            await note(row)
    await note(builder.finish())


def summary(result: DemoResult) -> str:
    """The final roster (unless the live view's last frame showed it already, word for
    word) and the session's timeline, as the demo ends with them."""
    from codex_presence.client.roster_text import roster_text

    final = roster_text(result.team, result.roster, you=WATCHER)
    lines = (
        ["", "final roster: as last shown above."]
        if final in result.shown
        else ["", "final roster:", final]
    )
    lines += [
        "",
        "timeline (seconds into the session, new state, what happened):",
    ]
    for row in result.timeline:
        when = "-" if row.t is None else f"{row.t:7.3f}"
        lines.append(f"  {when}  {row.state:<8} {row.event}")
    lines.append(f"\n{result.reports} activity reports sent to the broker.")
    return "\n".join(lines)
