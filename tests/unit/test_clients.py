"""The seam for a client (issue 31): the registry (:mod:`codex_presence.core.clients`) maps
every recording source to one client, each client's feeder is made from it, a recording's
first source chooses the feeder that replays it, and the shared modules name no client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import codex_presence
from codex_presence.core.clients import CLIENTS, PLAIN_OUTPUT, SOURCES, client_of
from codex_presence.core.recording import read_relevant_entries
from codex_presence.core.timeline import TimelineBuilder
from codex_presence.core.wording import event_words

PACKAGE = Path(codex_presence.__file__).parent
ROOT = PACKAGE.parent

SHARED = (
    "core/activity.py",
    "core/feeder.py",
    "core/recording.py",
    "core/timeline.py",
    "core/wording.py",
    "core/hooks/__init__.py",
    "core/hooks/hook_order.py",
    "core/hooks/poster.py",
    "agent/hooks/__init__.py",
    "agent/hooks/hook_server.py",
    "agent/hooks/peer_uid.py",
    "agent/hooks/spool.py",
    "agent/hooks/watch.py",
    "cli/replay.py",
)
"""The modules every client shares: none may name one (the registry does, once)."""

_CLIENT_WORD = re.compile(r"\b(codex|claude|gemini)\b", re.IGNORECASE)


@pytest.mark.parametrize("module", SHARED)
def test_a_shared_module_names_no_client(module: str) -> None:
    text = (PACKAGE / module).read_text()
    text = text.replace("codex_presence", "").replace("codex-presence", "")
    named = sorted({m.group(0).lower() for m in _CLIENT_WORD.finditer(text)})
    assert named == [], f"{module} names {named}"


def test_every_source_is_one_clients() -> None:
    assert sum(len(c.sources) for c in CLIENTS) == len(SOURCES)
    for client in CLIENTS:
        for source in client.sources:
            assert client_of(source) is client
    assert client_of("nobody's") is None and client_of(["hook"]) is None


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_each_client_makes_a_feeder_that_takes_its_sources(client: object) -> None:
    from codex_presence.core.clients import Client

    assert isinstance(client, Client)
    feeder = client.new_feeder()
    assert feeder.state == "idle" and feeder.background == 0 and feeder.messages == 0
    source = sorted(client.sources)[0]
    feeder.feed(source, {}, 0.0)
    assert feeder.stats.lines == 1
    assert feeder.feed_raw(source, b"not json", 0.0) == []
    assert feeder.close("eof") is None


@pytest.mark.parametrize(
    ("fixture", "mapping"),
    [
        ("fixtures/gemini-cli-0.61.0/approval_esc.jsonl", "GeminiMapping"),
        ("fixtures/codex-0.169.0", "CodexMapping"),
    ],
)
def test_the_first_source_chooses_the_feeder(fixture: str, mapping: str) -> None:
    path = ROOT / fixture
    if path.is_dir():
        path = sorted(path.glob("*.jsonl"))[0]
    builder = TimelineBuilder()
    for entry in read_relevant_entries(path.read_bytes()):
        builder.feed(entry)
    assert type(builder.mapping).__name__ == mapping
    assert builder.session_messages > 0


def test_plain_output_replays_through_its_clients_feeder() -> None:
    builder = TimelineBuilder()
    rows = list(read_relevant_entries(b'{"method":"turn/started","params":{}}\n'))
    for entry in rows:
        builder.feed(entry)
    assert type(builder.mapping) is type(PLAIN_OUTPUT.new_feeder())


def test_each_clients_words_are_asked() -> None:
    assert event_words("Notification ToolPermission") == "approval requested"
    assert event_words("UserPromptSubmit") == "prompt submitted"
    assert event_words("turn/started") == "turn started"
    assert event_words("eof") == "session ended"
    assert event_words("no/such-cause") == "no/such-cause"
