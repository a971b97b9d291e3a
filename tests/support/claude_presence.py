"""Runs the real claude behind ``codex-presence claude``, reporting to a real broker.

The counterpart of :mod:`bench._claude_driver` for the command under test: the same
private home, fake Messages API and tmux terminal, but no capture server of the tests' own —
claude's hooks go to the command's hook server, which reports ``alice``'s state to the
broker. What the test sees is what a teammate sees (the roster, through
:class:`~tests.support.roster_watch.RosterWatch`), the screen, the fake API's requests, and
the command's ``--record`` file and log afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._claude_driver import (
    Capture,
    Interactive,
    Tmux,
    claude_binary,
    claude_env,
    prepare_home,
)
from tests.support.broker_harness import RunningBroker, token_of

__all__ = ["PresenceFiles", "command", "interactive_presence", "presence_env", "run_print"]


@dataclass
class PresenceFiles:
    """Where one run keeps its things."""

    root: Path
    home: Path
    work: Path
    record: Path
    log: Path
    token: Path


def _files(root: Path, config: dict[str, Any] | None) -> PresenceFiles:
    home, work = prepare_home(root, config=config)
    token = root / "alice.token"
    token.write_text(token_of("alice") + "\n")
    token.chmod(0o600)
    return PresenceFiles(root, home, work, root / "session.jsonl", root / "presence.log", token)


def command(
    files: PresenceFiles,
    broker: RunningBroker,
    claude_args: Sequence[str],
    options: Sequence[str] = (),
    claude: Path | None = None,
) -> list[str]:
    """``codex-presence claude OPTIONS`` as alice, recording, logging in full to a file,
    running ``claude`` (the real one by default)."""
    return [
        sys.executable,
        "-m",
        "codex_presence",
        "claude",
        *options,
        "-v",
        "--log-file",
        str(files.log),
        "--record",
        str(files.record),
        "--broker",
        broker.url,
        "--name",
        "alice",
        "--token-file",
        str(files.token),
        "--",
        str(claude or claude_binary()),
        *claude_args,
    ]


def presence_env(files: PresenceFiles, base_url: str) -> dict[str, str]:
    """claude's environment (offline, private home), without the host's CODEX_PRESENCE_*."""
    env = claude_env(files.home, base_url)
    return {k: v for k, v in env.items() if not k.startswith("CODEX_PRESENCE_")}


def run_print(
    root: Path,
    broker: RunningBroker,
    *,
    base_url: str,
    claude_args: Sequence[str],
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], PresenceFiles]:
    """``codex-presence claude ... -- claude -p ...`` to its end, output captured (within
    ``timeout``: generous, for claude's start and turn on a loaded machine); ``env`` added
    to its environment."""
    files = _files(root, None)
    result = subprocess.run(
        command(files, broker, claude_args),
        cwd=files.work,
        env={**presence_env(files, base_url), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return result, files


def _show(session: Interactive, files: PresenceFiles) -> None:
    """What a failed test needs to be understood, where pytest shows it."""
    with suppress(Exception):
        print("--- the screen:\n" + session.tmux.screen(), file=sys.stderr)
    print(f"--- the keys sent: {session.capture.actions}", file=sys.stderr)
    with suppress(OSError):
        tail = files.log.read_text(errors="replace").splitlines()[-80:]
        print("--- the log's end:\n" + "\n".join(tail), file=sys.stderr)


@contextmanager
def interactive_presence(
    root: Path,
    broker: RunningBroker,
    *,
    base_url: str,
    claude_args: Sequence[str] = ("--permission-mode", "default"),
    config: dict[str, Any] | None = None,
    width: int = 160,
    options: Sequence[str] = (),
    claude: Path | None = None,
) -> Iterator[tuple[Interactive, PresenceFiles]]:
    """``codex-presence claude OPTIONS ... -- claude ARGS...`` in tmux, its terminal
    (``options``: ``("--claude-hooks", "all")`` for every hook; ``claude``: another
    command than the real claude).

    The :class:`Interactive` types and reads the screen (its capture holds only the keys
    sent, with their times); on leaving the block everything in the pane is ended. A test
    that fails in the block shows (on stderr) the screen, the keys sent and the log's end."""
    files = _files(root, config)
    tmux = Tmux(root / "tmux.sock", width=width)
    capture = Capture(None)
    capture.act("start codex-presence claude")
    tmux.start(
        command(files, broker, claude_args, options, claude),
        cwd=files.work,
        env=presence_env(files, base_url),
    )
    session = Interactive(capture, tmux, files.work, server=None)  # type: ignore[arg-type]
    try:
        yield session, files
    except BaseException:
        _show(session, files)
        raise
    finally:
        pid = tmux.pane_pid()
        tmux.kill()
        if pid is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, 9)
