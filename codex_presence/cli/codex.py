"""``codex-presence codex [options] [-- codex [ARGS...]]``: the codex TUI, through the relay.

Import-light on purpose: the session and everything under it load inside :func:`run`.
"""

from __future__ import annotations

import argparse

from codex_presence.cli import runner
from codex_presence.cli.main import check_log_file, setup_logging

TYPE_CHECKING = False  # import-light: typing loads ~ms before the TUI's spawn otherwise
if TYPE_CHECKING:
    from codex_presence.agent.tui.session import TuiSession

HELP = "run the codex TUI in your terminal, its app-server traffic read for your presence"

_EPILOG = """\
Runs `codex --remote unix://SOCKET ARGS...` with your terminal, and behind it
`codex app-server --listen unix://…` (the same executable, your working directory and
environment), with codex-presence relaying the websocket traffic between the two and
deriving your state from it, exactly as `wrap` does for clients of `codex app-server`.
Without `-- CMD`, CMD is `codex` from your PATH.

The TUI's exit status is ours (128+N if signal N ended it); SIGINT, SIGTERM and SIGHUP are
forwarded to it, and the terminal is put back if a signal ended it. When the TUI exits you
are idle at once, even if a turn or a background terminal was still running: the
app-server gets SIGTERM, and a second later it and everything it started are killed. So
the TUI's parting words ("Any running work continues", and a `codex --remote … resume`
hint naming our socket) do not hold under codex-presence: resume with
`codex-presence codex -- codex resume ID`. When you /exit (or the TUI otherwise closes its
connection) you are idle at once too. If the app-server dies, the session ends (status 1)
and its last words are printed.

While the TUI runs, nothing is written to the terminal: warnings and errors (-v: also
the transitions, -vv: debug) are printed when it exits, or go to --log-file as they
happen.

Broker options are wrap's: with --broker (or $CODEX_PRESENCE_BROKER) and a token
(--token-file FILE or $CODEX_PRESENCE_TOKEN) the member's subscription is held for the
session and every transition reported, with a heartbeat while working or blocked.
--record FILE writes the session (connections marked) for `codex-presence replay`.

example: codex-presence codex --broker http://127.0.0.1:8765 --name alice -- codex
"""


def configure(parser: argparse.ArgumentParser) -> None:
    runner.configure(parser, epilog=_EPILOG)


def run(args: argparse.Namespace) -> int:
    command = runner.given_command(args) or ["codex"]
    import os

    from codex_presence._env import TOKEN_ENV
    from codex_presence.agent.child import forget_env
    from codex_presence.agent.tui.launch import launch_tui, load_behind_the_tui

    check_log_file(args.log_file)  # a bad --log-file is a usage error: before anything runs
    # Spawn first (issue 27): the TUI and its app-server start before anything beyond the
    # standard library loads (logging, anyio, the mapping, the broker link's HTTP client,
    # the websocket parsers), so all of that overlaps with the TUI's own start. The token
    # is ours, not the children's: codex, and every command its agent runs, would inherit
    # it, or read it from our original environment (/proc/<pid>/environ).
    token = forget_env(TOKEN_ENV)
    launch = launch_tui(command, dict(os.environ))
    load_behind_the_tui(
        [
            "anyio",
            "anyio._backends._asyncio",  # what anyio.run loads first: 25 ms of CPU more
            "codex_presence.agent.tui.session",
            "codex_presence.agent.tui.ws_relay",
            *(["codex_presence.client.link"] if args.broker else []),
        ]
    )
    import sys

    from codex_presence.cli.held_log import hold_logging

    held = None
    if args.log_file:
        setup_logging(verbose=args.verbose, quiet=args.quiet, log_file=args.log_file)
    elif sys.stderr.isatty():
        held = hold_logging(verbose=args.verbose, quiet=args.quiet)
    else:
        setup_logging(verbose=args.verbose, quiet=args.quiet)
    try:
        from codex_presence.agent.tui.session import TuiSession

        session = TuiSession(launch, record=args.record)
        if launch.error is None:
            link = runner.broker_link(args, environ={} if token is None else {TOKEN_ENV: token})
            session.observers[:], session.companions[:] = runner.session_parts(link)

        import anyio

        status: int = anyio.run(session.run)
    finally:
        if held is not None:
            held.let_go()
    _say_how_to_resume(session, command)
    return status


def _say_how_to_resume(session: TuiSession, command: list[str]) -> None:
    """The TUI's parting hint (``codex --remote unix://…/tui.sock resume ID``) names the
    session's socket, gone with it: say the command that resumes, with the thread the TUI
    left (its unsubscribe on /exit); codex's own words, its other arguments left out (a
    resumed session's were ``resume ID`` already)."""
    import shlex
    import sys

    thread = session.relay.unsubscribed if session.relay is not None else None
    if thread is None or not thread.isprintable():
        return
    again = shlex.join(["codex-presence", "codex", "--", command[0], "resume", thread])
    sys.stderr.write(
        "codex-presence: the session ended, its running work with it, and the socket in"
        f" codex's hint is gone; resume with:\n  {again}\n"
    )
