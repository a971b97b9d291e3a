"""The ``codex-presence`` command line: one subcommand per job, each in its own module.

Every subcommand module exposes ``HELP`` (one line), ``configure(parser)`` and
``run(args) -> int``, and keeps heavy imports inside ``run`` so that ``wrap`` starts fast.
Every option can also be set from the environment as ``CODEX_PRESENCE_<OPTION>`` (dashes
become underscores); a flag on the command line wins over the environment.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, Protocol, cast

__all__ = ["main"]

ENV_PREFIX = "CODEX_PRESENCE_"

_COMMANDS: dict[str, str] = {
    "wrap": "codex_presence.cli.wrap",
    "replay": "codex_presence.cli.replay",
    "broker": "codex_presence.cli.broker",
    "team": "codex_presence.cli.team",
    "roster": "codex_presence.cli.roster",
    "demo": "codex_presence.cli.demo",
    "mcp": "codex_presence.cli.mcp",
}

_DESCRIPTION = """\
Live presence for Codex: is each agent on the wire, and is it idle, working or blocked?

  wrap     put codex-presence in front of `codex app-server` (a byte-exact stdio proxy)
  replay   print the state timeline of a recorded session
  broker   run the reference presence broker (with the live roster page at /)
  team     make a team file with fresh member tokens
  roster   print the team roster from a broker, once or live
  mcp      serve the roster MCP tool over stdio (for codex's [mcp_servers])
  demo     the whole system on one machine, from a bundled real session
"""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class _Command(Protocol):
    HELP: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


class UsageError(Exception):
    """A bad option value; reported on one line with exit status 2."""


def _load(name: str) -> _Command | None:
    try:
        return cast(_Command, importlib.import_module(_COMMANDS[name]))
    except ModuleNotFoundError as exc:
        if exc.name == _COMMANDS[name]:
            return None  # a subcommand not built yet
        raise


def apply_env_defaults(parser: argparse.ArgumentParser, environ: dict[str, str]) -> list[str]:
    """Let ``CODEX_PRESENCE_<DEST>`` supply the default of every option of ``parser`` (and
    of its own subcommands). Returns what could not be used, for :func:`main` to report
    only if this very command runs: a variable meant for one command must not break
    another."""
    problems: list[str] = []
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        name = ENV_PREFIX + action.dest.upper()
        value = environ.get(name)
        if value is None:
            continue
        if isinstance(action, argparse._CountAction) and value.strip().isdigit():
            action.default = int(value)  # -vv as CODEX_PRESENCE_VERBOSE=2
            continue
        if action.nargs == 0:  # store_true / store_false / count
            lowered = value.strip().lower()
            if lowered not in _TRUE | _FALSE:
                problems.append(f"{name}={value!r} is not a boolean")
                continue
            truthy = lowered in _TRUE
            if isinstance(action, argparse._CountAction):
                action.default = 1 if truthy else 0
            else:
                const = action.const if action.const is not None else True
                action.default = const if truthy else (not const)
            continue
        converter: Any = action.type or str
        try:
            action.default = converter(value)
        except (TypeError, ValueError) as exc:
            problems.append(f"{name}={value!r}: {exc}")
    for subparsers in nested:  # `team init`: its own options, and ours
        for sub in subparsers.choices.values():
            sub.set_defaults(_env_problems=problems + apply_env_defaults(sub, environ))
    return problems


def build_parser(environ: dict[str, str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codex-presence",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from codex_presence import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        command = _load(name)
        if command is None:
            continue
        sub = subparsers.add_parser(
            name,
            help=command.HELP,
            description=command.HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(sub)
        problems = apply_env_defaults(sub, dict(os.environ) if environ is None else environ)
        sub.set_defaults(_command=command, _env_problems=problems)
    return parser


def setup_logging(*, verbose: int = 0, quiet: bool = False, log_file: str | None = None) -> None:
    """The daemon's own words go to stderr (or a file), never to stdout."""
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 0 else logging.INFO)
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("codex-presence: %(message)s"))
    if log_file:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("codex_presence")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except UsageError as exc:
        sys.stderr.write(f"codex-presence: {exc}\n")
        return 2
    args = parser.parse_args(argv)
    command: _Command = args._command
    if args._env_problems:
        sys.stderr.write(f"codex-presence {args.command}: {args._env_problems[0]}\n")
        return 2
    try:
        return command.run(args)
    except UsageError as exc:
        sys.stderr.write(f"codex-presence {args.command}: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
