"""The relay's log from a signal handler: it may run while ``logging`` is half imported."""

from __future__ import annotations

import sys
import types

import pytest

from codex_presence.agent.child import relay_log


def test_a_signal_while_logging_is_being_imported_drops_the_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGTERM that reached wrap while its main thread was importing ``logging`` (CI,
    loaded) ran the handler's ``relay_log`` on the half-made module: an AttributeError,
    and wrap exited 1 instead of 115. The message is dropped now."""
    half_made = types.ModuleType("logging")  # what sys.modules holds mid-import
    monkeypatch.setitem(sys.modules, "logging", half_made)
    relay_log("debug", "forwarding %s to %s", "SIGTERM", "child")  # raises nothing


def test_the_relay_logs_when_logging_is_there(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("DEBUG", logger="codex_presence.relay"):
        relay_log("debug", "forwarding %s to %s", "SIGTERM", "child")
    assert "forwarding SIGTERM to child" in caplog.text
