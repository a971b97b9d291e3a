"""``codex-presence wrap [options] -- CMD [ARGS...]``: the byte-exact stdio proxy.

Import-light on purpose: the relay and everything under it load inside :func:`run`.
"""

from __future__ import annotations

import argparse

from ._cli import UsageError, setup_logging

HELP = "run CMD (e.g. `codex app-server`) behind a byte-exact stdio proxy that derives its state"

_USAGE_HINT = "usage: codex-presence wrap [options] -- CMD [ARGS...]"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="write the session (both directions, timestamped) to FILE in the recording format",
    )
    parser.add_argument("--log-file", metavar="FILE", help="log to FILE instead of stderr")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log debug details")
    # Reporting (issue 5) adds its options here: --broker, --name, --token-file, --no-trace.
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

    from ._relay import Relay

    relay = Relay(record=args.record)
    return anyio.run(relay.run, command)
