"""``codex-presence notify test URL``: one test notification, to check a target's URL before
the broker relies on it. Says whether it was delivered; never prints the URL itself, only
apprise's rendering of it with its secrets masked."""

from __future__ import annotations

import argparse

HELP = "check a notification target (an apprise URL) by sending it one test notification"


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    test = actions.add_parser("test", help="send one test notification to URL")
    test.add_argument("url", metavar="URL", help="the target, as in broker --notify")
    test.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="(default: 10)"
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from codex_presence.cli.main import UsageError

    try:
        from codex_presence.broker.notify_apprise import AppriseSender
    except ImportError:
        raise UsageError(
            "notifications need the notify extra: pip install 'codex-presence[notify]'"
        ) from None
    if not args.timeout > 0:
        raise UsageError("--timeout must be positive")
    sender = AppriseSender()
    try:
        label = sender.masked(args.url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    problem = sender.send(
        args.url,
        "codex-presence: test",
        "A test notification from codex-presence: this target works.",
        "info",
        args.timeout,
    )
    if problem is not None:
        sys.stderr.write(f"codex-presence notify: {label}: not delivered: {problem}\n")
        return 1
    sys.stderr.write(f"codex-presence notify: {label}: delivered\n")
    return 0
