"""Every option from the environment: ``CODEX_PRESENCE_<OPTION>`` supplies its default.

Dashes become underscores (``--token-file`` is ``CODEX_PRESENCE_TOKEN_FILE``); a flag on the
command line wins over the environment. A variable that cannot be used is reported only when
the command it belongs to runs: a variable meant for one command must not break another.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["ENV_PREFIX", "apply_env_defaults", "from_environment"]

ENV_PREFIX = "CODEX_PRESENCE_"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_WANTED: dict[object, str] = {int: "a whole number", float: "a number"}
"""What a variable for an option of this type must hold, in words."""


class _FromEnvironment(list[object]):
    """A repeatable option's value from the environment. argparse appends the command
    line's uses to a copy of the default; this one copies as empty, so the command line's
    values replace the environment's (a flag wins, as for every other option) instead of
    argparse failing to append to the variable's string."""

    def __copy__(self) -> list[object]:
        return []


def from_environment(value: object) -> bool:
    """Whether a repeatable option's ``value`` came from its variable, not the command line."""
    return isinstance(value, _FromEnvironment)


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
        converter: Callable[[str], object] = action.type or str  # type: ignore[assignment]
        try:
            action.default = converter(value)
            if isinstance(action, argparse._AppendAction):
                action.default = _FromEnvironment([action.default])
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            wanted = _WANTED.get(converter)
            if wanted is not None:  # Python's words ("invalid literal for int()") say less
                option = action.option_strings[-1]
                problems.append(f"{name}={value!r} is not {wanted} (it sets {option})")
            elif repr(value) in str(exc):  # the message names the value already
                problems.append(f"{name}: {exc}")
            else:
                problems.append(f"{name}={value!r}: {exc}")
    for subparsers in nested:  # `team init`: its own options, and ours
        for sub in subparsers.choices.values():
            sub.set_defaults(_env_problems=problems + apply_env_defaults(sub, environ))
    return problems
