"""``codex-presence roster``: the team roster from a broker, once or live."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import httpx

    from codex_presence._wire import Whoami
    from codex_presence.client.stream import RosterView

HELP = "print the team roster from a broker (--watch: live)"

_EPILOG = """\
The token comes from --token-file FILE or $CODEX_PRESENCE_TOKEN. Without options it
prints the roster agents see (the design's text, activity left out); --activity adds, for
each member who is working or blocked, the state and how long it has held:
  - builder [engineer] connected=1 working 3m
--watch holds a subscription (so you count as connected) and redraws on every change: a
spinner for a member who is working, "needs input" for one who is blocked, each with how
long it has held. When the stream is lost (the broker restarted, the network dropped) it
says so under the last roster and reconnects with backoff; only a refused token, or
Ctrl-C, ends it. While the broker says it lost its shared store (--redis), the roster is
marked stale, its durations stopped, until the broker is current again.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from codex_presence.client.auth import add_client_options

    parser.epilog = _EPILOG
    add_client_options(parser, check_url=True)
    parser.add_argument("--json", action="store_true", help="print the raw roster JSON")
    parser.add_argument(
        "--activity",
        action="store_true",
        help="add each working or blocked member's state and how long it has held",
    )
    parser.add_argument("--watch", action="store_true", help="redraw live from the SSE stream")
    parser.add_argument(
        "--history",
        nargs="?",
        const="",
        metavar="MEMBER",
        help="where each member (or MEMBER) waited, and for how long, over the hours the "
        "broker keeps (--since-hours: fewer)",
    )
    parser.add_argument(
        "--since-hours",
        type=float,
        metavar="H",
        help="with --history: the last H hours only",
    )


def run(args: argparse.Namespace) -> int:
    import sys

    import anyio

    from codex_presence.cli.main import UsageError, setup_logging
    from codex_presence.client.api import BrokerError
    from codex_presence.client.auth import TokenError, read_token

    setup_logging(quiet=True)
    try:
        token = read_token(token_file=args.token_file)
    except TokenError as exc:
        raise UsageError(str(exc)) from None
    if not args.broker:
        raise UsageError("no broker: pass --broker URL or set CODEX_PRESENCE_BROKER")
    if args.history is not None and (args.watch or args.activity):
        raise UsageError("--history says the hours kept: not with --watch or --activity")
    if args.since_hours is not None and args.history is None:
        raise UsageError("--since-hours goes with --history")
    try:
        anyio.run(_roster, args, token)
    except BrokerError as exc:
        sys.stderr.write(f"codex-presence roster: {exc}\n")
        return 1
    return 0


async def _roster(args: argparse.Namespace, token: str) -> None:
    import sys
    import time

    import orjson

    from codex_presence._wire import printable
    from codex_presence.cli.main import UsageError
    from codex_presence.client.api import fetch_roster, fetch_store_trouble, fetch_whoami
    from codex_presence.client.auth import make_async_client
    from codex_presence.client.roster_text import roster_text

    async with make_async_client(args.broker, token) as client:
        me = await _whoami_until_answered(client, sys.stdout) if args.watch else None
        me = me or await fetch_whoami(client)
        if args.name and args.name != me.name:
            raise UsageError(
                f"the token is {printable(me.name)}'s, not {printable(args.name)}'s (--name)"
            )
        if args.watch:
            await watch(client, me, sys.stdout)
        roster = await fetch_roster(client)
        if args.history is not None:
            await _history(client, args, me.team, [p.get("name") for p in roster])
            return
        trouble = await fetch_store_trouble(client)
    if trouble is not None:  # stdout stays the roster: the words go to stderr
        sys.stderr.write(
            "codex-presence roster: the broker lost its shared store (Redis: "
            f"{trouble}): this roster may be out of date\n"
        )
    if args.json:
        sys.stdout.write(orjson.dumps(roster).decode() + "\n")
    else:
        now_ms = int(time.time() * 1000)
        text = roster_text(me.team, roster, you=me.name, activity=args.activity, now_ms=now_ms)
        sys.stdout.write(text + "\n")


async def _history(
    client: httpx.AsyncClient, args: argparse.Namespace, team: str, names: Sequence[object]
) -> None:
    """``--history [MEMBER]``: each member's waits and totals (``GET /history``)."""
    import math
    import sys
    import time

    import orjson

    from codex_presence.cli.main import UsageError
    from codex_presence.client.api import fetch_history
    from codex_presence.client.history_text import history_text

    since_ms = None
    if args.since_hours is not None:
        if not (math.isfinite(args.since_hours) and args.since_hours > 0):
            raise UsageError("--since-hours must be a positive number of hours")
        since_ms = int((time.time() - args.since_hours * 3600) * 1000)
    wanted = [args.history] if args.history else [n for n in names if isinstance(n, str)]
    answers = [await fetch_history(client, name, since_ms) for name in wanted]
    if args.json:
        sys.stdout.write(orjson.dumps(answers).decode() + "\n")
    else:
        sys.stdout.write(history_text(team, answers, hours=args.since_hours) + "\n")


async def _whoami_until_answered(client: httpx.AsyncClient, out: TextIO) -> Whoami:
    """``--watch`` before the first roster: who the token is, asked again with backoff
    until the broker answers (it may not be up yet), each failure said as a lost stream
    is; only a refused token ends it (:class:`~codex_presence.client.api.TokenRefused`)."""
    import anyio

    from codex_presence.client.api import BrokerError, TokenRefused, fetch_whoami
    from codex_presence.core.backoff import reconnect_backoff

    backoff = reconnect_backoff()
    clear = "\x1b[H\x1b[J" if out.isatty() else ""
    while True:
        try:
            return await fetch_whoami(client)
        except TokenRefused:
            raise
        except BrokerError as exc:
            delay = backoff.next_delay()
            out.write(f"{clear}({exc}; retrying in {delay:.1f} s)\n\n")
            out.flush()
            await anyio.sleep(delay)


async def watch(
    client: httpx.AsyncClient,
    me: Whoami,
    out: TextIO,
    *,
    heading: Callable[[], str] | None = None,
    on_draw: Callable[[str], object] | None = None,
    on_view: Callable[[RosterView], object] | None = None,
) -> None:
    """Draw the roster on ``out``, then redraw on every event; on a terminal, animate the
    spinner and advance the "since" durations while anyone works or waits. ``heading``
    gives text to draw above the roster (on a terminal, redrawn when it changes);
    ``on_draw`` is told each frame drawn, ``on_view`` each roster drawn (what it shows).

    A lost stream (the broker restarted, the network dropped) is retried with backoff, the
    last roster staying on screen under a line that says so; a broker that lost its shared
    store (its ``stale`` event) is said the same way, with the durations stopped, until
    its next roster. Only a refused token ends it,
    with :class:`~codex_presence.client.api.TokenRefused`.
    """
    import time

    import anyio

    from codex_presence.client.api import token_refused
    from codex_presence.client.roster_text import watch_text
    from codex_presence.client.stream import ConnectionState, RosterStream, RosterView

    tty = out.isatty()
    status = ""
    """Empty while the stream is live; otherwise why it is not, shown under the roster."""
    frame = 0
    last = ""
    view = RosterView(team=me.team)
    stale_since: float | None = None
    """When the broker said the roster may be out of date (durations stop there)."""

    def draw() -> None:
        nonlocal last
        now_ms = int((stale_since or time.time()) * 1000)
        members = view.members.values()
        text = watch_text(view.team, members, you=me.name, frame=frame, now_ms=now_ms)
        if heading is not None:
            text = heading() + text
        if status:
            text += f"\n({status})"
        elif stale_since is not None:
            as_of = time.strftime("%H:%M:%S", time.localtime(stale_since))
            text += f"\n(stale as of {as_of}: the broker lost its shared store: {view.stale})"
        if text == last:
            return
        last = text
        out.write("\x1b[H\x1b[J" + text + "\n" if tty else text + "\n\n")
        out.flush()
        if on_draw is not None:
            on_draw(text)

    def on_roster(new: RosterView) -> None:
        nonlocal view, stale_since
        view = new
        if view.stale is None:
            stale_since = None
        elif stale_since is None:
            stale_since = time.time()
        draw()
        if on_view is not None:
            on_view(new)

    def on_change(state: ConnectionState) -> None:
        nonlocal status
        if state is ConnectionState.ONLINE:
            status = ""
        elif state is ConnectionState.OFFLINE and stream.retry_in is not None:
            status = f"{stream.reason}; reconnecting in {stream.retry_in:.1f} s"
            draw()

    async def spin() -> None:
        nonlocal frame
        while True:
            await anyio.sleep(0.1)
            busy = {p.get("activity") for p in view.members.values()}
            if "working" in busy:
                frame += 1
            if heading is not None or busy & {"working", "blocked"}:
                draw()  # the spinner's next frame, a duration or a heading that moved on

    stream = RosterStream(client, me.name, on_change=on_change, on_roster=on_roster)
    async with anyio.create_task_group() as tg:
        if tty:
            tg.start_soon(spin)
        await stream.run()
        tg.cancel_scope.cancel()
    assert stream.refused is not None  # run() returns only then
    raise token_refused(client, stream.refused)
