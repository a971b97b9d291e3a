"""The real codex TUI through ``codex-presence codex``, in tmux, against the fake model, with a
real broker on loopback; once per codex version with fixtures (the ``codex`` fixture).

Each scenario of :mod:`tests.support.tui_scenarios` checks the member's activity on the
broker's roster at each of its checkpoints (and, after Esc or /exit, idle for the right
cause: the app-server's word, or the end of its stream); here, on top of that, the
command's exit status, and that its recording replays to the very transitions it
reported live. The recordings kept as fixtures
(``fixtures/codex-tui-<version>/``) replay to their hand-written timelines.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench._fake_model import FakeModel, message
from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import timeline
from tests.support.tui_driver import (
    COMPOSER,
    READY,
    Tui,
    pane_process,
    presence_command,
    short_tempdir,
    tui_home,
)
from tests.support.tui_scenarios import SCENARIOS, record

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TUI_DIRS = sorted(FIXTURES.glob("codex-tui-*/"))
EXPECTED = sorted(path for directory in TUI_DIRS for path in directory.glob("*.expected.json"))

Row = tuple[int | None, str, str]


@pytest.fixture
def out() -> Iterator[Path]:
    with short_tempdir("cpx-") as path:
        yield path


@pytest.mark.codex
@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_real_tui_through_the_command(name: str, codex: Path, out: Path) -> None:
    result = record(name, out, binary=codex)
    assert result.exit_status == (1 if name == "server_dies" else 0)
    live = re.findall(r"INFO codex_presence\.relay: (\w+) \(([^)]*)\)", result.log)
    entries = list(read_entries(result.recording.read_bytes().splitlines()))
    replayed = [(row.state, row.cause) for row in timeline(entries)]
    assert replayed == live
    assert replayed[-1][0] == "idle"


def test_there_are_tui_fixtures_of_every_codex_version() -> None:
    versions = {d.name.removeprefix("codex-tui-") for d in TUI_DIRS}
    assert versions == {d.name.removeprefix("codex-") for d in FIXTURES.glob("codex-[0-9]*/")}
    for directory in TUI_DIRS:
        names = {p.name.removesuffix(".expected.json") for p in directory.glob("*.expected.json")}
        assert set(SCENARIOS) <= names, directory.name


def expected(path: Path) -> list[Row]:
    doc = orjson.loads(path.read_bytes())
    assert doc["scenario"] == path.name.removesuffix(".expected.json")
    return [(row["line"], row["state"], row["cause"]) for row in doc["timeline"]]


@pytest.mark.parametrize("path", EXPECTED, ids=[f"{p.parent.name}/{p.name}" for p in EXPECTED])
def test_a_tui_recording_replays_to_its_hand_written_timeline(path: Path) -> None:
    recording = path.with_name(path.name.replace(".expected.json", ".jsonl"))
    entries = list(read_entries(recording.read_bytes().splitlines()))
    assert entries[-1].end
    assert [(row.line, row.state, row.cause) for row in timeline(entries)] == expected(path)


@pytest.mark.codex
def test_when_the_app_server_dies_our_words_start_on_a_clean_line_of_the_main_screen(
    codex: Path, out: Path
) -> None:
    """No ``--log-file``: what the command says when the app-server dies goes to the
    terminal once the TUI is ended. The TUI draws on the alternate screen and leaves it
    only on a normal exit, so the command leaves it for it: its words start on a line of
    their own on the main screen, as plain codex's parting words do, and the shell goes on
    there (issue 34: they were written over the TUI's last frame, from the composer's line
    down, and the alternate screen stayed)."""
    model = FakeModel([message("Hello there.")])
    with model.serve():
        home = tui_home(out, model.base_url)
        tui = Tui(presence_command(codex), env=home.env, cwd=home.work, sock_dir=out)
        try:
            tui.wait_for(READY, timeout=60)
            tui.wait_for(COMPOSER, timeout=60)
            assert tui.on_alternate_screen()  # the premise: codex draws there
            # The app-server's whole group (it has a session of its own): the deepest
            # process naming it may be a child forked by it and not yet exec'd.
            os.killpg(os.getpgid(pane_process(tui, b"app-server")), signal.SIGKILL)
            assert tui.wait_exit(60) == 1
            alternate = tui.on_alternate_screen()
            after = tui.scrollback()
        finally:
            tui.close()
    assert not alternate, after
    lines = after.splitlines()
    said = [line for line in lines if "codex app-server exited" in line]
    assert said and said[0].startswith("codex-presence: "), after
    assert COMPOSER not in after, after  # nothing of the frame under or beside our words
