"""The relay's log from a signal handler: it may run while ``logging`` is half imported."""

from __future__ import annotations

import sys
import types

import pytest

from codex_presence.agent.child import relay_log, say_held


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


def test_what_is_said_before_the_log_is_set_up_is_held_until_it_is(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claude's runner sets its log up once claude's start is done (up to 2 s after the
    spawn): a signal forwarded meanwhile was said by Python's last resort, raw, onto
    claude's screen (a warning, even with -q), or not at all (debug). Held, then said."""
    import logging

    relay = logging.getLogger("codex_presence.relay")
    monkeypatch.setattr(relay, "propagate", False)  # no handler anywhere: not set up
    relay_log("warning", "second interrupt: killing %s (pid %d)", "claude", 42)
    relay_log("debug", "forwarding %s to %s", "SIGTERM", "claude")
    assert caplog.text == ""
    monkeypatch.setattr(relay, "propagate", True)
    with caplog.at_level("DEBUG", logger="codex_presence.relay"):
        say_held()
        say_held()  # once
    assert [r.getMessage() for r in caplog.records] == [
        "second interrupt: killing claude (pid 42)",
        "forwarding SIGTERM to claude",
    ]
