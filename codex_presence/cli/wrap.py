"""``codex-presence wrap [options] -- CMD [ARGS...]``: the byte-exact stdio proxy.

Import-light on purpose: the relay and everything under it load inside :func:`run`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from codex_presence.cli.main import UsageError, setup_logging

if TYPE_CHECKING:
    from codex_presence.agent.broker_link import BrokerLink

HELP = "run CMD (e.g. `codex app-server`) behind a byte-exact stdio proxy that derives its state"

_EPILOG = """\
Everything CMD writes reaches our stdout unchanged, and everything on our stdin reaches
CMD; CMD's stderr is ours. wrap exits with CMD's status (128+N if a signal killed it) and
forwards SIGINT, SIGTERM and SIGHUP (a second Ctrl-C kills). Transitions and warnings go
to stderr (or --log-file), never to stdout.

With --broker (or $CODEX_PRESENCE_BROKER) and a token (--token-file FILE or
$CODEX_PRESENCE_TOKEN), wrap holds the member's subscription for the whole session and
reports every transition, with a heartbeat every 10 s while working or blocked. A broker
that is down, slow or refuses us never disturbs the session. --name must be the token's
owner (the broker refuses to count us as anyone else); without it the broker says whose
token it is. --no-trace reports no activity at all, and still counts us as connected.

example: codex-presence wrap --record session.jsonl -- codex app-server
"""

_USAGE_HINT = "usage: codex-presence wrap [options] -- CMD [ARGS...]"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="write the session (timestamped) to FILE in the recording format, for `replay`",
    )
    parser.add_argument("--log-file", metavar="FILE", help="log to FILE instead of stderr")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log debug details")
    from codex_presence.client.auth import add_client_options

    add_client_options(parser, broker_default=None)
    parser.add_argument(
        "--no-trace",
        action="store_true",
        help="report no activity at all (the roster shows you idle); connection presence stays",
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def run(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(f"no command to wrap; {_USAGE_HINT}")
    try:
        setup_logging(verbose=args.verbose, quiet=args.quiet, log_file=args.log_file)
    except OSError as exc:
        raise UsageError(f"--log-file {args.log_file}: {exc.strerror or exc}") from exc

    import os

    for fd in (0, 1, 2):  # a closed standard descriptor must not be reused by our pipes
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)

    import anyio

    from codex_presence._wire import TOKEN_ENV
    from codex_presence.agent.relay import Relay, log_transition

    link = broker_link(args)
    # The token is ours, not the child's: codex and every command its agent runs would
    # inherit it. (Read above, if at all; the child is spawned below.)
    os.environ.pop(TOKEN_ENV, None)
    if link is None:
        relay = Relay(record=args.record)
    else:
        relay = Relay(
            record=args.record,
            observers=[log_transition, link.observe],
            companions=[link.session],
        )
    return anyio.run(relay.run, command)


def broker_link(args: argparse.Namespace) -> BrokerLink | None:
    """The broker side of the session, or None (said once on stderr) when there is none.
    A missing token is not fatal: the relay must work whatever the reporting does."""
    import logging

    logger = logging.getLogger(f"codex_presence.{getattr(args, 'command', 'wrap')}")
    if not args.broker:
        logger.info("not reporting to a broker (set --broker or CODEX_PRESENCE_BROKER)")
        return None
    from codex_presence.agent.broker_link import BrokerLink, BrokerSettings
    from codex_presence.client.auth import TokenError, read_token

    try:
        token = read_token(token_file=args.token_file)
    except TokenError as exc:
        logger.error("not reporting to %s: %s", args.broker, exc)
        return None
    settings = BrokerSettings(url=args.broker, token=token, name=args.name, trace=not args.no_trace)
    return BrokerLink(settings)
