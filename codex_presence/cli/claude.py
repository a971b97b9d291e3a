"""``codex-presence claude [options] [-- claude [ARGS...]]``: a Claude Code session on the roster.

The Claude Code counterpart of ``wrap``, with its options and environment variables. The
session itself is :mod:`codex_presence.agent.claude.session`'s; this module reads the
options and sets up logging. Import-light on purpose: everything loads inside :func:`run`,
and before claude's spawn only what the spawn needs (no logging, orjson, typing, pathlib or
shutil: issue 34; ``tests/test_claude_command.py`` checks it).
"""

from __future__ import annotations

import argparse
import sys

from codex_presence.cli import runner
from codex_presence.cli.main import UsageError, check_log_file, setup_logging

HELP = "run Claude Code (`claude`) with hooks that put its state on the roster"

_EPILOG = """\
Put `codex-presence claude --` in front of `claude`: claude runs as usual, on your terminal
(nothing is proxied), with `--settings FILE` added after the command's first word (a
--settings of your own in ARGS is carried in FILE). Without `-- CMD`, CMD is `claude` from
your PATH; a CMD of your own (a wrapper script) must pass its arguments on to claude. FILE
(private, removed at the end) sends claude's hooks into a private spool directory of ours
(Linux), elsewhere to a server of ours on 127.0.0.1. Your state: working while a turn, a
tool or a subagent runs, blocked while a permission dialog or a question waits for you,
idle otherwise. An interactive claude of a version whose
session status file we checked (2.1.332) gets only SessionStart and SessionEnd hooks (its
spinner names none of ours): the state is read from that file as soon as claude writes it.
Any other (print mode, another version, --claude-hooks all) gets a hook for every event,
and interrupts (Esc, Ctrl-C, "No"), which fire no hook, are read from claude's transcript
and session file: the roster shows idle within 2 s, mostly well under one. The exit status
is claude's (128+N if signal N killed it); SIGTERM and SIGHUP are forwarded, and so is
SIGINT unless it came from the terminal (claude has it then). claude never outlives this
command.

Reporting, --record, --no-trace and the environment variables are wrap's: with --broker
(or $CODEX_PRESENCE_BROKER) and a token (--token-file FILE or $CODEX_PRESENCE_TOKEN), the
session holds your subscription and reports every transition, with a heartbeat while
working or blocked; with --no-trace (and no --record), claude runs with no hooks of ours at
all, and you still count as connected. While claude runs, our stderr is its screen: only
warnings and errors are written there, unless -v; --log-file FILE gets the whole log.

example: codex-presence claude --record session.jsonl -- claude --permission-mode default
"""


HOOK_CHOICES = ("auto", "all")
"""``--claude-hooks``: ``auto``, claude's session file leads where it can; ``all``, a hook
for every event the mapping reads, whatever the version
(:func:`~codex_presence.agent.claude.settings.with_our_hooks`)."""


class _NotAChoice(argparse.ArgumentTypeError, ValueError):
    """Told with its own words on the command line and from the environment alike."""


def claude_hooks(text: str) -> str:
    """``--claude-hooks``: ``auto`` or ``all``."""
    if text not in HOOK_CHOICES:
        raise _NotAChoice(f"{text!r} is not one of {', '.join(HOOK_CHOICES)}")
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    runner.configure(parser, epilog=_EPILOG)
    parser.add_argument(
        "--claude-hooks",
        metavar="{auto,all}",
        type=claude_hooks,
        default="auto",
        help="auto: where claude's session file is known to say its state (an interactive"
        " claude of a checked version), hooks only at its start and end, so its spinner names"
        " none of ours; else, and with all: a hook for every event (default: auto)",
    )


def run(args: argparse.Namespace) -> int:
    command = runner.given_command(args) or ["claude"]
    # claude's screen is our stderr: transitions there would be scribbled over its UI.
    quiet = args.quiet or (not args.log_file and not args.verbose and sys.stderr.isatty())
    check_log_file(args.log_file)  # or UsageError; logging itself is set up after the spawn

    import os

    from codex_presence._env import TOKEN_ENV
    from codex_presence.agent.child import forget_env
    from codex_presence.agent.claude.launch import forward_signals_now, launch_claude
    from codex_presence.agent.claude.settings import (
        SettingsError,
        child_environment,
        split_settings,
    )
    from codex_presence.agent.signals import SignalForwarding

    # --no-trace reports no activity: unless it is recorded, there is nothing to observe.
    observe = not args.no_trace or bool(args.record)
    settings: dict[str, object] = {}
    given_args = command[1:]
    if observe:
        try:
            command, settings = split_settings(command)
        except SettingsError as exc:
            raise UsageError(f"claude's {exc}") from exc

    # Spawn first (issue 34): claude starts before anything beyond its settings loads
    # (anyio, the hook server with h11, the mapping, the broker link's HTTP client); where
    # nothing of claude's waits for us (spooled hooks, or none) all of that loads once
    # claude's start is done, else beside it (the hook server's socket already listens).
    # The token is ours, not claude's: every command its agent runs would inherit it, or
    # read it from our original environment (/proc/<pid>/environ): it is not in claude's
    # environment, and blanked in ours as soon as claude is spawned (ctypes loads for it:
    # ~2 ms before the spawn, long before claude's agent can run a command).
    token = os.environ.get(TOKEN_ENV)
    env = child_environment(
        os.environ, drop=(TOKEN_ENV,), hinted_args=given_args if observe else None
    )
    signals = SignalForwarding(name="claude")
    forward_signals_now(signals)

    def spawned() -> None:
        forget_env(TOKEN_ENV)

    launch = launch_claude(
        command,
        env=env,
        settings=settings,
        observe=observe,
        hooks=args.claude_hooks,
        signals=signals,
        on_spawn=spawned,
    )

    from codex_presence.agent.claude.launch import run_checks, until_claude_started

    until_claude_started(launch, env)  # the session loads once claude's start is done
    # Nothing is logged before: logging loads once claude's start is done (at once where
    # the hooks are posted: the poster's check comes before claude's first hook).
    setup_logging(verbose=args.verbose, quiet=quiet, log_file=args.log_file)
    run_checks(launch)
    from codex_presence.agent.loading import load_behind

    load_behind(
        [
            "anyio",
            "anyio._backends._asyncio",  # what anyio.run loads first
            "codex_presence.agent.claude.session",
            *(["codex_presence.client.link"] if args.broker else []),
        ]
    )  # (claude's hooks meanwhile wait in the spool, or are taken at once: EarlyAccepts)
    import anyio

    from codex_presence.agent.claude.launch import config_dir
    from codex_presence.agent.claude.session import ClaudeSession

    link = runner.broker_link(args, environ={} if token is None else {TOKEN_ENV: token})
    observers, companions = runner.session_parts(link)
    session = ClaudeSession(
        config=config_dir(env),
        record=args.record,
        observers=observers,
        companions=companions,
        observe=observe,
        hooks=args.claude_hooks,
    )
    return anyio.run(lambda: session.run(launch.command, env=env, launch=launch))
