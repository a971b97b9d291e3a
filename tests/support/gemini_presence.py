"""Runs the real gemini behind ``codex-presence gemini``, reporting to a real broker.

The counterpart of :mod:`tests.support.claude_presence` for Gemini CLI: the driver of
:mod:`bench._gemini_driver` (private home, fake Gemini API, tmux terminal) with no capture
hooks of the tests' own; the command it starts is a small script that runs
``codex-presence gemini`` as alice, in front of the real gemini. What the test sees is what
a teammate sees (the roster), the screen, and the command's ``--record`` file and log.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._gemini_driver import GeminiSession, PrintRun, interactive, run_print
from tests.support.broker_harness import RunningBroker, token_of
from tests.support.gemini_driver import gemini_binary

__all__ = ["PresenceFiles", "interactive_presence", "print_presence"]


@dataclass
class PresenceFiles:
    """Where one run keeps its things."""

    root: Path
    record: Path
    log: Path
    runner: Path
    """The script gemini's driver starts: ``codex-presence gemini … -- gemini "$@"``."""


def _files(
    root: Path,
    broker: RunningBroker,
    options: Sequence[str],
    *,
    record: bool = True,
    gemini: Path | None = None,
    as_user: int | None = None,
) -> PresenceFiles:
    root.mkdir(parents=True, exist_ok=True)
    token = root / "alice.token"
    token.write_text(token_of("alice") + "\n")
    token.chmod(0o600)
    files = PresenceFiles(root, root / "session.jsonl", root / "presence.log", root / "run.sh")
    argv = [
        sys.executable,
        "-m",
        "codex_presence",
        "gemini",
        *options,
        "-v",
        "--log-file",
        str(files.log),
        *(("--record", str(files.record)) if record else ()),
        "--broker",
        broker.url,
        "--name",
        "alice",
        "--token-file",
        str(token),
        "--",
        str(gemini or gemini_binary()),
    ]
    if as_user is None:
        script = f'exec {shlex.join(argv)} "$@"'
    else:  # the driver made HOME and the work dir as root: they are the user's first
        drop = ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups", "--"]
        own = shlex.join(["chown", "-R", f"{as_user}:{as_user}", str(root)])
        script = f'{own} && exec {shlex.join([*drop, *argv])} "$@"'
    files.runner.write_text(f"#!/bin/sh\n{script}\n")
    files.runner.chmod(0o700)
    return files


@contextmanager
def interactive_presence(
    root: Path, broker: RunningBroker, *, base_url: str, options: Sequence[str] = ()
) -> Iterator[tuple[GeminiSession, PresenceFiles]]:
    """``codex-presence gemini OPTIONS -- gemini -m MODEL`` in tmux, its terminal."""
    files = _files(root, broker, options)
    session = interactive(root / "g", base_url=base_url, hooks=False, gemini=files.runner)
    with session as s:
        try:
            yield s, files
        except BaseException:
            _show(s, files)
            raise


def print_presence(
    root: Path,
    broker: RunningBroker,
    prompt: str,
    *,
    base_url: str,
    args: Sequence[str] = (),
    settings: dict[str, Any] | None = None,
    options: Sequence[str] = (),
    record: bool = True,
    gemini: Path | None = None,
    as_user: int | None = None,
) -> tuple[PrintRun, PresenceFiles]:
    """``codex-presence gemini OPTIONS -- gemini -m MODEL -p PROMPT ARGS`` to its end
    (``settings``: the person's own, in their ``~/.gemini/settings.json``; ``record``
    False: no ``--record``; ``gemini``: another binary; ``as_user``: the runner and gemini
    run as that uid (and gid), which then owns all of ``root``: we must be root)."""
    files = _files(root, broker, options, record=record, gemini=gemini, as_user=as_user)
    run = run_print(
        root / "g",
        prompt,
        base_url=base_url,
        hooks=False,
        gemini=files.runner,
        args=("-o", "text", *args),
        settings=settings,
    )
    return run, files


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, depth first."""
    out: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for child in map(int, children):
        out += [child, *descendants(child)]
    return out


def _show(session: GeminiSession, files: PresenceFiles) -> None:
    """What a failed test needs to be understood, where pytest shows it."""
    try:
        print("--- the screen:\n" + session.tmux.screen(), file=sys.stderr)
    except Exception as exc:
        print(f"--- no screen: {exc}", file=sys.stderr)
    try:
        tail = files.log.read_text(errors="replace").splitlines()[-60:]
        print("--- the log's end:\n" + "\n".join(tail), file=sys.stderr)
    except OSError:
        pass
