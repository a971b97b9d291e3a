"""``codex-presence notify``: the broker's notification targets.

* ``notify test URL``: one test notification, to check a target's URL before the broker
  relies on it. Says whether it was delivered; never prints the URL itself, only apprise's
  rendering of it with its secrets masked.
* ``notify list``: the targets a broker has, as an admin sees them (``GET /notify``): each
  one's label (its URL with the secrets masked), what it is told of, and how it fares.
"""

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
    listing = actions.add_parser("list", help="the targets a broker notifies (admins only)")
    from codex_presence.client.auth import add_client_options

    add_client_options(listing, check_url=True)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(args)
    import sys

    from codex_presence.cli.main import UsageError, install_hint

    try:
        from codex_presence.broker.notify.apprise_sender import AppriseSender
    except ImportError:
        raise UsageError(f"notifications need the notify extra: {install_hint('notify')}") from None
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


def _list(args: argparse.Namespace) -> int:
    """One line per target: its label, the events it is told of, its delay, its members,
    and its counts; a target that keeps failing says so."""
    import sys

    import anyio

    from codex_presence._wire import printable
    from codex_presence.cli.main import UsageError
    from codex_presence.client.api import BrokerError, fetch_notify_targets
    from codex_presence.client.auth import TokenError, make_async_client, read_token

    try:
        token = read_token(token_file=args.token_file)
    except TokenError as exc:
        raise UsageError(str(exc)) from None

    async def fetch() -> list[dict[str, object]]:
        async with make_async_client(args.broker, token) as client:
            return await fetch_notify_targets(client)

    try:
        targets = anyio.run(fetch)
    except BrokerError as exc:
        sys.stderr.write(f"codex-presence notify: {exc}\n")
        return 1
    if not targets:
        sys.stdout.write("no notification targets\n")
    for target in targets:
        members = target.get("members")
        who = "everyone" if members is None else ", ".join(map(str, members))  # type: ignore[call-overload]
        on = ", ".join(map(str, target.get("on") or []))  # type: ignore[call-overload]
        line = (
            f"{target.get('label')}: {on} after {target.get('after')} s, for {who}; "
            f"sent {target.get('sent')}, given up {target.get('givenUp')}"
        )
        if target.get("failing"):
            line += f"; failing: {target.get('lastError')}"
        sys.stdout.write(printable(line) + "\n")
    return 0
