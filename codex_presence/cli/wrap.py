"""``codex-presence wrap [options] -- CMD [ARGS...]``: the byte-exact stdio proxy.

Spawn first (issue 13): :func:`run` starts the child, and copies its bytes, before it loads
anything beyond the standard library; the mapping, anyio and the broker link load once the
child has started up, and the analysis catches up then (see
:mod:`codex_presence.agent.wrap.pump`). So this module, and everything :func:`run` needs before
the child runs, is import-light, and ``typing`` is not loaded either.
"""

from __future__ import annotations

import argparse

from codex_presence.cli import runner
from codex_presence.cli.main import UsageError, check_log_file, setup_logging

TYPE_CHECKING = False  # typing is not loaded before the child runs
if TYPE_CHECKING:
    from codex_presence.agent.child import Launched

HELP = "run CMD (e.g. `codex app-server`) behind a byte-exact stdio proxy that derives its state"

_EPILOG = """\
Everything CMD writes reaches our stdout unchanged, and everything on our stdin reaches
CMD; CMD's stderr is ours. wrap exits with CMD's status (128+N if a signal killed it) and
forwards SIGINT, SIGTERM and SIGHUP (a second Ctrl-C kills). CMD and every process it
starts end with wrap, however wrap ends. Transitions and warnings go to stderr (or
--log-file, created 0600), never to stdout; --record's file is created 0600 too.

With --broker (or $CODEX_PRESENCE_BROKER) and a token (--token-file FILE or
$CODEX_PRESENCE_TOKEN), wrap holds the member's subscription for the whole session and
reports every transition, with a heartbeat while working or blocked (every 10 s, a third
of the broker's activity TTL, which it states). A broker that is down, slow or refuses us
never disturbs the session. --name must be the token's owner (the broker refuses to count
us as anyone else); without it the broker says whose token it is. --no-trace reports no
activity at all, and still counts us as connected.

example: codex-presence wrap --record session.jsonl -- codex app-server
"""

_USAGE_HINT = "usage: codex-presence wrap [options] -- CMD [ARGS...]"

START_GRACE = 1.0
"""Seconds the analysis waits at most for the child's first output before it loads."""
SETTLE = 0.05
"""Seconds more it waits after that output: a child that says one thing and ends (``codex
--version``) is done by then, and its session needs no analysis at all."""


def configure(parser: argparse.ArgumentParser) -> None:
    runner.configure(parser, epilog=_EPILOG)


def run(args: argparse.Namespace) -> int:
    command = runner.given_command(args)
    if not command:
        raise UsageError(f"no command to wrap; {_USAGE_HINT}")

    import os

    from codex_presence._env import TOKEN_ENV
    from codex_presence.agent.child import forget_env, launch
    from codex_presence.agent.signals import cannot_run

    check_log_file(args.log_file)  # a bad --log-file is a usage error: before anything runs
    for fd in (0, 1, 2):  # a closed standard descriptor must not be reused by our pipes
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
    # The token is ours, not the child's: codex and every command its agent runs would
    # inherit it, or read it from our original environment (/proc/<pid>/environ).
    token = forget_env(TOKEN_ENV)
    # Spawn first: the child starts before anything beyond the standard library is
    # loaded (logging, the mapping, anyio, the broker client); the bytes it exchanges
    # meanwhile are copied at once, and analysed once the analysis has loaded.
    launched: Launched | OSError
    try:
        launched = launch(command)
    except OSError as exc:
        launched = exc
    from codex_presence.agent.wrap.pump import Pump

    if isinstance(launched, OSError):
        setup_logging(verbose=args.verbose, quiet=args.quiet, log_file=args.log_file)
        return cannot_run(command, launched)
    pump = Pump(record=args.record)
    pump.adopt(launched)  # the bytes flow; kept for the analysis and the recording
    # The rest (logging, the analysis and the recording, then anyio, the codex mapping
    # with jsonrpcserver and the broker client) is a few hundred milliseconds of CPU: it
    # loads once the child has started up (its first output and a moment more, its end,
    # or a second), so that it does not slow the child's start down.
    pump.first_output.wait(START_GRACE)
    pump.server_done.wait(SETTLE)
    setup_logging(verbose=args.verbose, quiet=args.quiet, log_file=args.log_file)
    link = None if args.broker else runner.broker_link(args)  # said at once, and cheap
    from codex_presence.core.codex.prefilter import ChunkAnalyzer

    analyzer = ChunkAnalyzer(deferred=True)
    pump.equip(analyzer)
    if pump.server_done.is_set() and analyzer.nothing_to_analyse:
        # Over before the analysis loaded, and nothing in it could change the state (a
        # `codex --version`, a `yes | head`): no need to load it at all.
        returncode = launched.child.wait(timeout=0.2)
        if returncode is not None and analyzer.nothing_to_analyse:
            import logging

            logging.getLogger("codex_presence.wrap").debug(
                "the child ended before the analysis loaded, with nothing to analyse"
            )
            pump.close()
            from codex_presence.agent.signals import exit_status

            return exit_status(returncode)
    import anyio

    from codex_presence.agent.wrap.session import WrapSession

    if args.broker:
        link = runner.broker_link(args, environ={} if token is None else {TOKEN_ENV: token})
    observers, companions = runner.session_parts(link)
    session = WrapSession(pump=pump, observers=observers, companions=companions)
    return anyio.run(session.run)
