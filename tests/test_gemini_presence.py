"""The Gemini CLI runner for real: the real gemini 0.61.0 behind ``codex-presence gemini``, a
real broker on loopback, and a teammate (``bob``) watching ``alice`` on the roster's stream.

Each test drives gemini (in tmux, or ``-p``) against the fake Gemini API and checks the
roster at the moments that matter: working once a prompt is sent, blocked while an approval
is on screen, working again once it is allowed, idle after the turn; idle after an Esc at
an approval, which fires no hook (the chat file's ``Request cancelled.``); after ``/quit``
the runner exits 0 and alice is offline. Each session's ``--record`` file then replays
(``replay``'s code, the registry choosing gemini's mapping) to the same states. Needs
gemini and tmux (``tests/run.sh`` installs them): without them this skips, except under
``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench._fake_gemini import FakeGemini, Reply, function_responses, say, shell, user_texts
from bench._gemini_driver import MODEL, gemini_env
from codex_presence.core.recording import read_relevant_entries
from codex_presence.core.timeline import timeline
from tests.support.broker_harness import RunningBroker, make_team, running_broker
from tests.support.gemini_driver import APPROVAL, READY, gemini_binary, require_gemini
from tests.support.gemini_presence import (
    PresenceFiles,
    descendants,
    interactive_presence,
    print_presence,
)
from tests.support.processes import alive
from tests.support.roster_watch import RosterWatch, roster_activity, roster_row
from tests.support.waiting import eventually

pytestmark = [pytest.mark.gemini, pytest.mark.slow]

WITHIN = 60.0
"""A generous bound for what must happen, on a loaded machine."""
ESC_WITHIN = 20.0
"""From the Esc to an idle roster, generous for a loaded machine (the chat file's line comes
0.1 s after the key; the follower polls every 0.1 s): far below any fallback (there is
none but the session's end)."""


@pytest.fixture(scope="module", autouse=True)
def _gemini() -> Path:
    return require_gemini()


@pytest.fixture
def broker() -> Iterator[RunningBroker]:
    with running_broker(team=make_team("alice", "bob")) as running:
        yield running


@pytest.fixture
def watch(broker: RunningBroker) -> Iterator[RosterWatch]:
    watching = RosterWatch(broker, watcher="bob", member="alice")
    yield watching
    assert watching.error is None


def after_shell(body: dict[str, object]) -> bool:
    return "run_shell_command" in function_responses(body)


def replayed(files: PresenceFiles) -> list[tuple[str, str]]:
    """``(state, cause)`` of each row of the session's recording, replayed."""
    rows = timeline(read_relevant_entries(files.record.read_bytes()))
    return [(row.state, row.cause) for row in rows]


def quit_gemini(s: object, watch: RosterWatch) -> None:
    s.prompt("/quit")  # type: ignore[attr-defined]
    assert s.wait_exit(WITHIN) == 0  # type: ignore[attr-defined]
    watch.wait_connected(0, within=WITHIN)


def test_a_prompt_is_working_then_idle_and_quit_leaves_the_roster(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeGemini([say("Hello there.")])
    with api.serve(), interactive_presence(tmp_path, broker, base_url=api.base_url) as (s, f):
        s.ready()
        watch.wait_connected(1, within=WITHIN)
        s.prompt("say hello")
        watch.wait_seen("working", within=WITHIN)
        s.tmux.wait_screen("Hello there", WITHIN)
        watch.wait(None, within=WITHIN)
        quit_gemini(s, watch)
        # gemini's own resume hint, on its screen as without the runner; the session's id
        # (the chat file's) is what plain gemini finds later: see the non-root test.
        screen = s.tmux.wait_screen(r"gemini --resume [0-9a-f-]{36}", WITHIN)
    hint = re.search(r"gemini --resume ([0-9a-f-]{36})", screen)
    assert hint and f'"session_id":"{hint[1]}"' in f.record.read_text(), screen
    assert watch.sequence()[-2:] == ["working", None], watch.sequence()
    assert [state for state, _ in replayed(f)] == ["working", "idle"], replayed(f)


def test_an_approval_is_blocked_and_allow_once_works_on_to_idle(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeGemini(
        [Reply(parts=[shell("echo hi > made.txt")]), say("Made it.", match=after_shell)]
    )
    with api.serve(), interactive_presence(tmp_path, broker, base_url=api.base_url) as (s, f):
        s.ready()
        s.prompt("make a file")
        s.tmux.wait_screen(APPROVAL, WITHIN)
        watch.wait("blocked", within=WITHIN)
        assert roster_activity(broker) == "blocked"
        s.answer_dialog("Enter")  # 1. Allow once
        s.tmux.wait_screen("Made it", WITHIN)
        watch.wait(None, within=WITHIN)
        quit_gemini(s, watch)
    assert (s.work / "made.txt").exists()
    states = [state for state, _ in replayed(f)]
    assert states == ["working", "blocked", "working", "idle"], replayed(f)
    assert watch.sequence()[-3:] == ["blocked", "working", None], watch.sequence()


@pytest.mark.parametrize("key", ["Escape", "3"], ids=["esc", "no"])
def test_esc_at_an_approval_is_idle_by_the_chat_files_cancel_line(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch, key: str
) -> None:
    """Esc, or "3. No" (the tool denied): no hook fires; the chat file says it."""
    api = FakeGemini([Reply(parts=[shell("echo hi > made.txt")])])
    with api.serve(), interactive_presence(tmp_path, broker, base_url=api.base_url) as (s, f):
        s.ready()
        s.prompt("make a file")
        s.tmux.wait_screen(APPROVAL, WITHIN)
        watch.wait("blocked", within=WITHIN)
        s.answer_dialog(key)
        watch.wait(None, within=ESC_WITHIN)
        s.tmux.wait_screen(READY, WITHIN)
        quit_gemini(s, watch)
    assert replayed(f)[-1] == ("idle", "chat Request cancelled."), replayed(f)
    assert not (s.work / "made.txt").exists()


def test_a_setting_persisted_in_the_session_lands_in_the_persons_own_settings(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """``/model set NAME --persist`` makes gemini rewrite its user settings file, the
    shadow's copy: at the end the runner writes the change into the person's own
    ``~/.gemini/settings.json``, and none of our hooks."""
    api = FakeGemini([])
    with api.serve(), interactive_presence(tmp_path, broker, base_url=api.base_url) as (s, f):
        s.ready()
        # gemini loads its slash commands after the input box shows: until then a command
        # goes to the model as a prompt. Their menu, with /model's words, says they are in.
        s.tmux.type("/model")
        s.tmux.wait_screen("Manage model configuration", WITHIN)
        s.prompt(" set gemini-2.5-flash --persist")
        s.tmux.wait_screen(r"Model set to gemini-2\.5-flash \(persisted\)", WITHIN)
        quit_gemini(s, watch)
    assert s.home is not None
    settings = orjson.loads((s.home / ".gemini" / "settings.json").read_bytes())
    assert settings["model"]["name"] == "gemini-2.5-flash", settings
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}, settings
    assert "hooks" not in settings, settings
    assert "saved model, changed in the session" in f.log.read_text(errors="replace")


def test_print_mode_reports_the_turn_and_passes_the_exit_status(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeGemini([say("Hello from the fake.")])
    with api.serve():
        run, files = print_presence(tmp_path, broker, "say hello", base_url=api.base_url)
    assert run.returncode == 0, run.stderr
    assert "Hello from the fake." in run.stdout
    eventually(lambda: "working" in watch.sequence(), within=WITHIN, what="working seen")
    watch.wait_connected(0, within=WITHIN)
    assert [state for state, _ in replayed(files)] == ["working", "idle"], replayed(files)
    assert "hook spool: watching" in files.log.read_text(errors="replace")  # -v: logged


def test_geminis_exit_status_is_the_runners(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeGemini([])
    with api.serve():
        run, _ = print_presence(
            tmp_path, broker, "say hello", base_url=api.base_url, args=("--no-such-flag",)
        )
    assert run.returncode == 1, run.stderr
    assert "Unknown arguments: such-flag" in run.stderr  # gemini's own words, passed on


def test_no_trace_reports_nothing_and_registers_no_hook(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeGemini([say("Hello from the fake.")])
    with api.serve():
        run, files = print_presence(
            tmp_path,
            broker,
            "say hello",
            base_url=api.base_url,
            options=("--no-trace",),
            record=False,
        )
    assert run.returncode == 0, run.stderr
    assert "Hello from the fake." in run.stdout
    watch.wait_connected(0, within=WITHIN)
    assert "working" not in watch.sequence(), watch.sequence()
    log = files.log.read_text(errors="replace")
    assert log and "hook server listening" not in log


def test_the_persons_own_hooks_run_beside_ours(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    marker = tmp_path / "their-hook-ran"
    theirs = {"name": "mine", "type": "command", "command": f"touch {marker}"}
    settings = {"hooks": {"BeforeAgent": [{"matcher": "*", "hooks": [theirs]}]}}
    api = FakeGemini([say("Hello from the fake.")])
    with api.serve():
        run, files = print_presence(
            tmp_path, broker, "say hello", base_url=api.base_url, settings=settings
        )
    assert run.returncode == 0, run.stderr
    assert marker.exists()
    assert [state for state, _ in replayed(files)] == ["working", "idle"], replayed(files)


def test_nothing_is_left_running_after_the_runner_is_sigkilled(
    tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeGemini([])
    with api.serve(), interactive_presence(tmp_path, broker, base_url=api.base_url) as (s, _):
        s.ready()
        watch.wait_connected(1, within=WITHIN)
        runner = s.tmux.pane_pid()
        assert runner is not None
        below = descendants(runner)
        assert below, "gemini runs under the runner"
        os.kill(runner, signal.SIGKILL)
        for pid in below:
            eventually(lambda pid=pid: not alive(pid), within=WITHIN, what=f"{pid} ended")
        watch.wait_connected(0, within=WITHIN)


def test_a_gemini_and_a_wrap_of_one_member_show_the_strongest(tmp_path: Path) -> None:
    """Two sessions of one member, two kinds of runner: a real gemini and a wrap. The
    wrap's turn waits on an approval (blocked) while gemini runs a turn and ends it: the
    member stays blocked throughout, with one session working then none; once the approval
    is answered and the wrap's turn ends, the member is idle."""
    from codex_presence._wire import TOKEN_ENV
    from tests.support.broker_harness import token_of
    from tests.support.wrap_harness import WrapProcess, is_note, is_request

    held = threading.Event()
    api = FakeGemini([say("Done.", hold=held)])
    with (
        running_broker(team=make_team("alice", "bob")) as broker,
        api.serve(),
        WrapProcess(
            ["--broker", broker.url, "--name", "alice"], env={TOKEN_ENV: token_of("alice")}
        ) as wrap,
        interactive_presence(tmp_path, broker, base_url=api.base_url) as (s, _),
    ):
        s.ready()
        eventually(lambda: roster_row(broker)["connected"] == 2, WITHIN, "both subscribed")
        wrap.start_turn(1, approval=True, deltas=1)
        request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
        eventually(lambda: roster_activity(broker) == "blocked", WITHIN, "blocked")

        s.prompt("say hello")
        eventually(
            lambda: roster_row(broker).get("sessions") == {"working": 1, "blocked": 1}, WITHIN
        )
        assert roster_activity(broker) == "blocked"  # the strongest, whatever gemini does
        held.set()
        s.tmux.wait_screen(r"Done\.", WITHIN)
        eventually(lambda: "sessions" not in roster_row(broker), WITHIN, "gemini's turn over")
        assert roster_activity(broker) == "blocked"  # gemini's idle hides nothing

        wrap.send({"id": request["id"], "result": {"decision": "accept"}})
        wrap.wait_for(is_note("turn/completed"))
        eventually(lambda: roster_activity(broker) is None, WITHIN, "both idle")
        assert roster_row(broker)["connected"] == 2


NOBODY = 65534


def resumed(body: dict[str, object]) -> bool:
    """A request that carries the first session's prompt beside the resumed one."""
    texts = user_texts(body)
    return any("say hello" in t for t in texts) and any("once more" in t for t in texts)


@pytest.fixture(scope="module")
def other_user() -> Iterator[tuple[Path, Path, int | None]]:
    """Where a person who is not root runs gemini: a directory every user can read, the
    gemini install they run (a copy of ours there when we are root: ours is under
    ``/root``, which only root can enter), and the uid they run as (None: we are not root,
    so we are that person already)."""
    shared = Path(tempfile.mkdtemp(prefix="codex-presence-gemini-other-"))
    opened: list[tuple[Path, int]] = []
    try:
        shared.chmod(0o755)
        if os.geteuid() != 0:
            yield shared, gemini_binary(), None
            return
        package = gemini_binary().resolve().parents[3]  # …/gemini-cli-X/node_modules/...
        install = shared / "install"
        shutil.copytree(package.parent, install, symlinks=True)
        # The runner runs from this checkout and its venv, which may lie in a directory
        # only we may enter (a clone in `mktemp -d`'s): others may pass through (not list)
        # for the test's length.
        for place in (Path(__file__).resolve().parents[1], Path(sys.prefix)):
            opened += passable_by_others(place)
        yield shared, install / "node_modules" / ".bin" / "gemini", NOBODY
    finally:
        for directory, mode in reversed(opened):
            directory.chmod(mode)
        shutil.rmtree(shared, ignore_errors=True)


def passable_by_others(path: Path) -> list[tuple[Path, int]]:
    """Give others the right to pass through ``path`` and each directory above it that
    lacks it (``o+x``, not ``o+r``); the modes changed, to put back."""
    changed = []
    for directory in (path, *path.parents):
        mode = stat.S_IMODE(directory.stat().st_mode)
        if not mode & stat.S_IXOTH:
            directory.chmod(mode | stat.S_IXOTH)
            changed.append((directory, mode))
    return changed


def test_a_person_who_is_not_root_is_observed_and_resumes_their_chat(
    other_user: tuple[Path, Path, int | None], broker: RunningBroker, watch: RosterWatch
) -> None:
    """The runner and gemini run as an ordinary user (nobody): our hooks are in a shadow of
    their gemini home, so the turn is on the roster (working, then idle); the chat lands in
    their own ``~/.gemini``, where a plain ``gemini --resume`` finds it afterwards, and no
    private directory of ours is left."""
    shared, gemini, uid = other_user
    root = shared / "person"
    session = str(uuid.uuid4())
    api = FakeGemini([say("Hello from the fake."), say("Again, with the history.", match=resumed)])
    with api.serve():
        run, files = print_presence(
            root,
            broker,
            "say hello",
            base_url=api.base_url,
            args=("--session-id", session),
            gemini=gemini,
            as_user=uid,
        )
        assert run.returncode == 0, run.stderr
        assert "Hello from the fake." in run.stdout
        eventually(lambda: "working" in watch.sequence(), within=WITHIN, what="working seen")
        watch.wait_connected(0, within=WITHIN)
        assert [state for state, _ in replayed(files)] == ["working", "idle"], replayed(files)
        assert "without our hooks" not in files.log.read_text(errors="replace")

        chats = list((run.home / ".gemini" / "tmp").glob(f"*/chats/session-*-{session[:8]}.json*"))
        assert chats, sorted(p.name for p in (run.home / ".gemini").rglob("*"))
        again = subprocess.run(  # plain gemini, as the same person, after the session
            [
                *(
                    ("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--")
                    if uid
                    else ()
                ),
                str(gemini),
                "-m",
                MODEL,
                "--resume",
                session,
                "-p",
                "once more",
                "-o",
                "text",
            ],
            cwd=run.work,
            env=gemini_env(run.home, api.base_url),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    assert again.returncode == 0, again.stderr
    assert "Again, with the history." in again.stdout, again.stdout + again.stderr
    shadow = re.search(r"gemini's home is shadowed in (\S+)", files.log.read_text())
    assert shadow, files.log.read_text()
    assert not Path(shadow[1]).exists()  # removed at the end
