"""``codex-presence demo``: the whole pipeline on one machine, from a bundled session."""

from __future__ import annotations

import argparse

HELP = "run an embedded broker and play a real recorded codex session through the pipeline"

_EPILOG = """\
Starts a broker on a free loopback port, plays a recorded codex 0.169.0 session through
the codex mapping, the activity reporter and the broker in real time, and shows the live
roster as it changes: a spinner while the agent works, "needs input" while it waits on a
human. It ends with the final roster and the session's timeline. No codex binary, no
network, no setup.
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


def run(args: argparse.Namespace) -> int:
    import sys

    import anyio

    from ._cli import UsageError, setup_logging
    from ._demo import DEFAULT_FIXTURE, bundled_fixtures, run_demo, summary

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
    result = anyio.run(lambda: run_demo(fixture=fixtures[name], speed=args.speed, out=sys.stdout))
    sys.stdout.write(summary(result) + "\n")
    return 0
