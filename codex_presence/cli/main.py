"""The ``codex-presence`` command line: one subcommand per job, each in its own module.

Every subcommand module exposes ``HELP`` (one line), ``configure(parser)`` and
``run(args) -> int``, and keeps heavy imports inside ``run`` so that ``wrap`` starts fast.
Every option can also be set from the environment as ``CODEX_PRESENCE_<OPTION>`` (dashes
become underscores; :mod:`codex_presence.cli.env`); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections import deque
from collections.abc import Sequence
from typing import Protocol, cast

from codex_presence.cli.env import apply_env_defaults

__all__ = ["main"]

_COMMANDS: dict[str, str] = {
    "wrap": "codex_presence.cli.wrap",
    "claude": "codex_presence.cli.claude",
    "codex": "codex_presence.cli.codex",
    "replay": "codex_presence.cli.replay",
    "doctor": "codex_presence.cli.doctor",
    "broker": "codex_presence.cli.broker",
    "team": "codex_presence.cli.team",
    "roster": "codex_presence.cli.roster",
    "mcp": "codex_presence.cli.mcp",
    "demo": "codex_presence.cli.demo",
}
"""Every subcommand, in the order the help lists them (:data:`_DESCRIPTION`, the one list)."""

_DESCRIPTION = """\
Live presence for Codex and Claude Code: is each agent on the wire, and is it idle,
working or blocked?

  wrap     put codex-presence in front of `codex app-server` (a byte-exact stdio proxy)
  claude   put codex-presence in front of `claude` (its hooks, to a loopback server)
  codex    run the codex TUI in your terminal, its app-server traffic read on the way
  replay   print the state timeline of a recorded session
  doctor   check that codex-presence classifies everything your codex can send
  broker   run the reference presence broker (with the live roster page at /)
  team     make a team file with fresh member tokens
  roster   print the team roster from a broker, once or live
  mcp      serve the roster MCP tool over stdio (for codex's [mcp_servers])
  demo     the whole system on one machine, from a bundled real session
"""


class _Command(Protocol):
    HELP: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


class UsageError(Exception):
    """A bad option value; reported on one line with exit status 2."""


def _load(name: str) -> _Command:
    return cast(_Command, importlib.import_module(_COMMANDS[name]))


def build_parser(environ: dict[str, str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codex-presence",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `roster --token X` must not be taken for --token-file X
    )
    from codex_presence import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, help="one of the commands above"
    )
    for name in _COMMANDS:
        command = _load(name)
        sub = subparsers.add_parser(  # no help=: the description lists the commands once
            name,
            description=command.HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
        )
        command.configure(sub)
        problems = apply_env_defaults(sub, dict(os.environ) if environ is None else environ)
        sub.set_defaults(_command=command, _env_problems=problems, _parser=sub)
    return parser


def setup_logging(*, verbose: int = 0, quiet: bool = False, log_file: str | None = None) -> None:
    """The daemon's own words go to stderr (or a file), never to stdout."""
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 0 else logging.INFO)
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        if log_file
        else logging.Formatter("codex-presence: %(message)s")
    )
    root = logging.getLogger("codex_presence")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


class HeldLog(logging.Handler):
    """Holds the package's log records while an interactive child draws on the terminal
    (a line written there would break its screen), then writes them to stderr; the last
    ``capacity`` records are kept."""

    def __init__(self, capacity: int = 500) -> None:
        super().__init__()
        self.records: deque[logging.LogRecord] = deque(maxlen=capacity)
        self.dropped = 0
        self.setFormatter(logging.Formatter("codex-presence: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) == self.records.maxlen:
            self.dropped += 1
        self.records.append(record)

    def let_go(self) -> None:
        """Write what was held to stderr, and log there from now on. (Not ``release``:
        that is the handler's lock.)"""
        if self.dropped:
            sys.stderr.write(f"codex-presence: ({self.dropped} earlier log lines dropped)\n")
        for record in self.records:
            sys.stderr.write(self.format(record) + "\n")
        self.records.clear()
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(self.formatter)
        logging.getLogger("codex_presence").handlers[:] = [handler]


def hold_logging(*, verbose: int = 0, quiet: bool = False) -> HeldLog:
    """Log into a :class:`HeldLog`: warnings and errors, ``-v`` adds info (the
    transitions), ``-vv`` debug."""
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    held = HeldLog()
    root = logging.getLogger("codex_presence")
    root.handlers[:] = [held]
    root.setLevel(logging.WARNING if quiet else level)
    root.propagate = False
    return held


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # said with the subcommand's usage, not the top level's
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
