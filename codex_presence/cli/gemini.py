"""``codex-presence gemini [options] [-- gemini [ARGS...]]``: a Gemini CLI session on the roster.

The Gemini CLI counterpart of ``claude``, with the options every runner takes
(:mod:`codex_presence.cli.runner`). The session itself is
:mod:`codex_presence.agent.gemini.session`'s; this module reads the options and sets up
logging. Import-light on purpose: everything loads inside :func:`run`.
"""

from __future__ import annotations

import argparse
import sys

from codex_presence.cli import runner
from codex_presence.cli.main import UsageError, setup_logging

HELP = "run Gemini CLI (`gemini`) with hooks that put its state on the roster"

_EPILOG = """\
Put `codex-presence gemini --` in front of `gemini`: gemini runs as usual, on your terminal
(nothing is proxied). Without `-- CMD`, CMD is `gemini` from your PATH. gemini runs with
GEMINI_CLI_HOME set to a private shadow of its home: your ~/.gemini/settings.json with our
hook (named `codex-presence` in gemini's spinner) added after your own hooks, and every
other entry of your ~/.gemini linked, so chats, history and `gemini --resume` stay yours.
A setting you change in the session (/model, /settings) is written back to your
settings.json at the end (not if that file has comments: then a warning names it).
Your state: working while a turn or a tool runs, blocked while an approval waits for you,
idle otherwise; an Esc or a "No" at an approval, which fire no hook, are read from
gemini's chat file ("Request cancelled."). The exit status is gemini's (128+N if signal N
killed it); SIGTERM and SIGHUP are forwarded, and so is SIGINT unless it came from the
terminal. gemini never outlives this command.

Reporting, --record, --no-trace and the environment variables are wrap's: with --broker
(or $CODEX_PRESENCE_BROKER) and a token (--token-file FILE or $CODEX_PRESENCE_TOKEN), the
session holds your subscription and reports every transition, with a heartbeat while
working or blocked; with --no-trace (and no --record), gemini runs with no hooks of ours.
While gemini runs, our stderr is its screen: only warnings and errors are written there,
unless -v; --log-file FILE gets the whole log.

example: codex-presence gemini --record session.jsonl -- gemini
"""


def configure(parser: argparse.ArgumentParser) -> None:
    runner.configure(parser, epilog=_EPILOG)


def run(args: argparse.Namespace) -> int:
    command = runner.given_command(args) or ["gemini"]
    # gemini's screen is our stderr: transitions there would be scribbled over its UI.
    quiet = args.quiet or (not args.log_file and not args.verbose and sys.stderr.isatty())
    setup_logging(verbose=args.verbose, quiet=quiet, log_file=args.log_file)  # or UsageError

    import os

    import anyio

    from codex_presence._env import TOKEN_ENV
    from codex_presence.agent.child import forget_env
    from codex_presence.agent.gemini.session import GeminiSession
    from codex_presence.agent.gemini.settings import SettingsError, their_settings

    # --no-trace reports no activity: unless it is recorded, there is nothing to observe.
    observe = not args.no_trace or bool(args.record)
    try:
        if observe:
            their_settings(os.environ)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    # The token is ours, not gemini's: every command its agent runs would inherit it.
    token = forget_env(TOKEN_ENV)
    link = runner.broker_link(args, environ={} if token is None else {TOKEN_ENV: token})
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    observers, companions = runner.session_parts(link)
    session = GeminiSession(
        record=args.record, observers=observers, companions=companions, observe=observe
    )
    return anyio.run(lambda: session.run(command, env=env))
