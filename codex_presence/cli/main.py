"""The ``codex-presence`` command line: one subcommand per job, each in its own module.

Every subcommand module exposes ``HELP`` (one line), ``configure(parser)`` and
``run(args) -> int``, and keeps heavy imports inside ``run`` so that ``wrap`` starts fast.
Every option can also be set from the environment as ``CODEX_PRESENCE_<OPTION>`` (dashes
become underscores; :mod:`codex_presence.cli.env`); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from codex_presence.cli.env import apply_env_defaults

TYPE_CHECKING = False  # not typing's: wrap imports as little as it can before its child runs
if TYPE_CHECKING:
    from typing import NoReturn, Protocol

    class _Command(Protocol):
        HELP: str

        def configure(self, parser: argparse.ArgumentParser) -> None: ...

        def run(self, args: argparse.Namespace) -> int: ...


__all__ = ["main"]

_COMMANDS: dict[str, str] = {
    "wrap": "codex_presence.cli.wrap",
    "claude": "codex_presence.cli.claude",
    "gemini": "codex_presence.cli.gemini",
    "codex": "codex_presence.cli.codex",
    "replay": "codex_presence.cli.replay",
    "doctor": "codex_presence.cli.doctor",
    "broker": "codex_presence.cli.broker",
    "team": "codex_presence.cli.team",
    "notify": "codex_presence.cli.notify",
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
  gemini   put codex-presence in front of `gemini` (its hooks, to a loopback server)
  codex    run the codex TUI in your terminal, its app-server traffic read on the way
  replay   print the state timeline of a recorded session
  doctor   check that codex-presence classifies everything your codex can send
  broker   run the reference presence broker (with the live roster page at /)
  team     make a team file with fresh member tokens
  notify   send a test notification to a target the broker would notify
  roster   print the team roster from a broker, once or live
  mcp      serve the roster MCP tool over stdio (for codex's [mcp_servers])
  demo     the whole system on one machine, from a bundled real session
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, the terminal's width read without :mod:`shutil` (whose import, with bz2
    and lzma, argparse pays on the first option it adds): ``wrap`` builds its parser before
    its child runs. The width is the same: ``$COLUMNS``, else the terminal's, else 80."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def _terminal_columns() -> int:
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class UsageError(Exception):
    """A bad option value; reported on one line with exit status 2."""


def install_hint(extra: str) -> str:
    """How to install an optional extra into the environment running us, as a person
    with a clone does (the package is on no index: installing it by its name
    fails): this interpreter's own pip, in the clone."""
    pip = f"{sys.prefix}/bin/pip"
    return f"in the codex-presence clone, run {pip} install '.[{extra}]'"


def masked(text: str) -> str:
    """:func:`codex_presence._wire.masked`, loaded when there is something to say (wrap and
    codex run this module before their child's spawn)."""
    from codex_presence._wire import masked as masked_text

    return masked_text(text)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors never echo a secret (see :func:`masked`):
    ``unrecognized arguments: --notify json://user:PASSWORD@…`` printed the password."""

    def error(self, message: str) -> NoReturn:
        super().error(masked(message))


def _load(name: str) -> _Command:
    command: _Command = importlib.import_module(_COMMANDS[name])
    return command


def build_parser(
    environ: dict[str, str] | None = None, *, only: str | None = None
) -> argparse.ArgumentParser:
    """The command line's parser; with ``only``, just that subcommand's (the others are
    not even imported: ``wrap`` must start its child fast). Parsing the subcommand's
    arguments gives the same result either way."""
    parser = _Parser(
        prog="codex-presence",
        description=_DESCRIPTION,
        formatter_class=HelpFormatter,
        allow_abbrev=False,  # `roster --token X` must not be taken for --token-file X
    )
    from codex_presence import __version__

    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, help="one of the commands above"
    )
    for name in [only] if only else _COMMANDS:
        command = _load(name)
        sub = subparsers.add_parser(  # no help=: the description lists the commands once
            name,
            description=command.HELP,
            formatter_class=HelpFormatter,
            allow_abbrev=False,
        )
        command.configure(sub)
        problems = apply_env_defaults(sub, dict(os.environ) if environ is None else environ)
        sub.set_defaults(_command=command, _env_problems=problems, _parser=sub)
    return parser


def check_log_file(log_file: str | None) -> None:
    """A ``--log-file`` that cannot be opened (it is created 0600) is a :class:`UsageError`
    naming it: for a runner to say so before its child starts, logging set up later."""
    if not log_file:
        return
    import os

    from codex_presence.agent.descriptors import open_private

    try:
        os.close(open_private(log_file, append=True))
    except OSError as exc:
        raise _unusable_log_file(log_file, exc) from None


def _unusable_log_file(log_file: str, exc: OSError) -> UsageError:
    return UsageError(f"--log-file {log_file}: {exc.strerror or exc}")


def setup_logging(*, verbose: int = 0, quiet: bool = False, log_file: str | None = None) -> None:
    """The daemon's own words go to stderr (or a file, created 0600), never to stdout. A
    log file that cannot be opened is a :class:`UsageError` naming it."""
    import logging

    from codex_presence.agent.child import say_held
    from codex_presence.agent.descriptors import open_private

    class PrivateFileHandler(logging.FileHandler):
        def _open(self):  # type: ignore[no-untyped-def]  # logging's own hook
            fd = open_private(self.baseFilename, append=True)
            return open(fd, "a", encoding=self.encoding, errors=self.errors)

    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 0 else logging.INFO)
    handler: logging.Handler
    try:
        handler = (
            PrivateFileHandler(log_file, encoding="utf-8")
            if log_file
            else logging.StreamHandler(sys.stderr)
        )
    except OSError as exc:
        raise _unusable_log_file(str(log_file), exc) from None
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        if log_file
        else logging.Formatter("codex-presence: %(message)s")
    )
    root = logging.getLogger("codex_presence")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    say_held()  # what a signal's forwarding said before


def main(argv: Sequence[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else list(argv)
    only = args_list[0] if args_list and args_list[0] in _COMMANDS else None
    args, unknown = build_parser(only=only).parse_known_args(args_list)
    if unknown:  # said with the subcommand's usage, not the top level's
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    command: _Command = args._command
    if args._env_problems:
        sys.stderr.write(f"codex-presence {args.command}: {masked(args._env_problems[0])}\n")
        return 2
    try:
        return command.run(args)
    except UsageError as exc:
        sys.stderr.write(f"codex-presence {args.command}: {masked(str(exc))}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        if not (_broken_pipes_only(exc) and _stdout_closed()):
            raise
        # The reader of our output went away (`codex-presence demo | head`): not an error,
        # and nothing more to say; stdout to /dev/null, so the interpreter's last flush is
        # quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _broken_pipes_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a broken pipe, or a group of nothing else (a task group's)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_broken_pipes_only(e) for e in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _stdout_closed() -> bool:
    """Whether our stdout is a pipe whose reader has closed it (a broken pipe of a socket,
    say the broker's, is an error like any other)."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poll.poll(0))
    except (OSError, ValueError):
        return False
