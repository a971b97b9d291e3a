"""What the runner commands share: each (``wrap``, ``codex`` and every client's) takes the
same options (the recording, the log, the broker and the token, ``--no-trace``, ``--share``,
the command after ``--``) and tells the broker through the same link.

Import-light, like the commands (``wrap`` reads its options before its child runs): the
client and the session skeleton load inside the functions that need them, and ``typing``
is not loaded either.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing is not loaded before the child runs
if TYPE_CHECKING:
    from collections.abc import Mapping

    from codex_presence.agent.session import Companion, Observer
    from codex_presence.client.link import BrokerLink


def configure(parser: argparse.ArgumentParser, *, epilog: str) -> None:
    """The options every runner command takes, and its own ``epilog``."""
    parser.epilog = epilog
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
    parser.add_argument(
        "--share",
        metavar="LEVEL",
        type=share_level,
        default="default",
        help="what the broker is told about the agent besides its state: 'none' (nothing),"
        " 'default' (the client, its version, the host, the project, and while blocked what"
        " it waits on by kind and program name, e.g. approve `make`), 'detail' (also the"
        " command itself, cut to one short line)",
    )
    parser.add_argument(
        "--passing-hold",
        metavar="SECONDS",
        type=passing_hold,
        default=None,
        help="hold back a state the agent is only passing through (the working between a"
        " cancelled approval and its turn's end) this long before reporting it"
        " (default: 0.3)",
    )
    parser.add_argument(
        "--exit-grace",
        metavar="SECONDS",
        type=exit_grace,
        default=None,
        help="at the end, wait this long at most for the last report (idle) to reach the"
        " broker (default: 1; past it, the session's grace on the broker ends it)",
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def _seconds(text: str, most: float) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= seconds <= most:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and {most:g} seconds")
    return seconds


def passing_hold(text: str) -> float:
    """``--passing-hold``: seconds, from 0 (report every state at once) to an hour."""
    return _seconds(text, 3600)


def exit_grace(text: str) -> float:
    """``--exit-grace``: seconds, from 0 (exit at once) to a minute."""
    return _seconds(text, 60)


SHARE_LEVELS = ("none", "default", "detail")
RUNNER_CLIENTS = {"wrap": "codex-app-server", "codex": "codex-tui", "claude": "claude"}
"""The agent record's ``client`` each runner command reports."""


def share_level(text: str) -> str:
    """``--share``: one of :data:`SHARE_LEVELS`."""
    level = text.strip().lower()
    if level not in SHARE_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a share level (one of: {', '.join(SHARE_LEVELS)})"
        )
    return level


def given_command(args: argparse.Namespace) -> list[str]:
    """The command after our options, without the ``--`` that may separate them (argparse's
    remainder keeps it); empty when none was given."""
    command = list(args.cmd)
    return command[1:] if command[:1] == ["--"] else command


def installed_version(command: str, *, runner_command: list[str]) -> str | None:
    """The version of the client that runner ``command`` (``wrap``, ``claude``, ...) runs
    as ``runner_command`` (empty: the client's own program), read beside the program
    (:mod:`codex_presence.agent.installed`); None when it cannot be told."""
    import os

    from codex_presence.agent import installed
    from codex_presence.core.clients import client_named

    client = client_named("codex" if command == "wrap" else command)
    if client is None or client.package is None:
        return None
    program = (runner_command or [client.name])[0]
    return installed.installed_version(program, client.package, os.environ)[0]


def broker_link(
    args: argparse.Namespace, *, environ: Mapping[str, str] | None = None
) -> BrokerLink | None:
    """The broker side of the session, or None (said once on stderr) when there is none,
    its URL is no http(s) URL, or no token (from ``--token-file``, or ``environ``'s, by
    default ours). Neither is fatal: the relay must work whatever the reporting does."""
    import dataclasses
    import logging

    logger = logging.getLogger(f"codex_presence.{getattr(args, 'command', 'wrap')}")
    if not args.broker:
        logger.info("not reporting to a broker (set --broker or CODEX_PRESENCE_BROKER)")
        return None
    from codex_presence._wire import masked
    from codex_presence.client.auth import BadBrokerUrl, TokenError, broker_url, read_token
    from codex_presence.client.link import BrokerLink, BrokerSettings

    try:
        broker_url(args.broker)
    except BadBrokerUrl as exc:  # said once, not retried: no retry can reach it
        import os

        from codex_presence.cli.env import ENV_PREFIX

        # Named by the variable when it came from there: ``environ`` holds only the token
        # for the runners that forgot theirs, so the broker's variable is looked up in ours.
        variable = ENV_PREFIX + "BROKER"
        named = any(env.get(variable) == args.broker for env in (environ or {}, os.environ))
        given = variable if named else "--broker"
        logger.error("not reporting to a broker: %s %s", given, exc)
        return None
    try:
        token = read_token(token_file=args.token_file, environ=environ)
    except TokenError as exc:
        logger.error("not reporting to %s: %s", masked(args.broker), exc)
        return None
    from codex_presence.core.agent_record import Share

    command = getattr(args, "command", "wrap")
    if args.no_trace or Share(getattr(args, "share", "default")) is Share.NONE:
        version = None  # not reported
    else:
        version = installed_version(command, runner_command=given_command(args))
    settings = BrokerSettings(
        url=args.broker,
        token=token,
        name=args.name,
        trace=not args.no_trace,
        client=RUNNER_CLIENTS.get(command, command),
        share=Share(getattr(args, "share", "default")),
        version=version,
    )
    if args.exit_grace is not None:
        settings = dataclasses.replace(settings, exit_grace=args.exit_grace)
    if args.passing_hold is None:
        return BrokerLink(settings)
    from codex_presence.core.report_policy import ReportPolicy

    return BrokerLink(settings, policy=ReportPolicy(passing_hold=args.passing_hold))


def session_parts(link: BrokerLink | None) -> tuple[list[Observer], list[Companion]]:
    """The observers and companions of a runner's session: the log, and the broker link's
    reporting and lifetime when there is a link."""
    from codex_presence.agent.session import log_transition

    if link is None:
        return [log_transition], []
    return [log_transition, link.observe], [link.session]
