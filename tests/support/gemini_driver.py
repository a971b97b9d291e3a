"""The real Gemini CLI for the tests: ``bench/_gemini_driver.py``'s driver (shared with
``bench/gemini_hooks.py``, which runs without the test dependencies) and what only the tests
need, :func:`require_gemini`.

The scenarios recorded into ``fixtures/gemini-cli-<version>/`` are
:mod:`tests.support.gemini_scenarios`'s.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bench._gemini_driver import (
    API_KEY,
    APPROVAL,
    DEFAULT_GEMINI,
    GEMINI_VERSION,
    HOOK_EVENTS,
    MODEL,
    READY,
    GeminiSession,
    PrintRun,
    capture_command,
    gemini_binary,
    gemini_env,
    hook_settings,
    interactive,
    prepare_home,
    run_print,
)

__all__ = [
    "API_KEY",
    "APPROVAL",
    "DEFAULT_GEMINI",
    "GEMINI_VERSION",
    "HOOK_EVENTS",
    "MODEL",
    "READY",
    "GeminiSession",
    "PrintRun",
    "capture_command",
    "gemini_binary",
    "gemini_env",
    "hook_settings",
    "interactive",
    "prepare_home",
    "require_gemini",
    "run_print",
]


def require_gemini() -> Path:
    """The gemini binary, or the end of the test: a failure under ``CI=true`` (a missing
    binary there is a broken setup, never a reason to pass), a skip elsewhere. tmux and
    curl, which the sessions need, are checked the same way."""
    import pytest

    binary = gemini_binary()
    problem = None
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        problem = f"gemini binary not found at {binary} (set CODEX_PRESENCE_TEST_GEMINI)"
    elif shutil.which("tmux") is None:
        problem = "tmux not found (Debian package tmux)"
    elif shutil.which("curl") is None:
        problem = "curl not found (Debian package curl)"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return binary
