"""The whole pipeline for real: codex behind ``wrap --broker``, a real broker on loopback,
and a teammate watching the roster's SSE stream through an approval turn; once per codex
version with fixtures.

The driver (``tests/support/codex_driver.py``) starts wrap in front of the real binary, with the
fake Responses-API model scripting one escalated command. The teammate ``bob`` holds
``GET /subscribe`` and records every activity the broker shows for ``alice``; the test
checks that stream at the moments that matter — while the approval is held back, while
the approved command runs, after the turn — and then the whole sequence. Needs the codex
binaries (``tests/run.sh`` installs them): without one this skips, except under ``CI=true``,
where it fails.
"""

from __future__ import annotations

import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import connect_sse

from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.codex_driver import Config, session
from tests.support.fake_model import FakeModel, exec_command, message, reply

pytestmark = pytest.mark.codex

APPROVALS = Config(approval_policy="on-request", sandbox_mode="read-only")
HOLD = 1.0
"""How long the client holds the approval back while the roster must show blocked."""


class RosterWatch:
    """A teammate's SSE subscription, on a thread: every activity shown for ``member``.

    ``seen`` holds ``(monotonic time, activity)`` per event that carried the member
    (``None`` is idle: activity absent). The stream ends when the broker shuts down.
    """

    def __init__(self, broker: RunningBroker, *, watcher: str, member: str) -> None:
        self._url = broker.url
        self._headers = broker.auth(watcher)
        self._watcher = watcher
        self._member = member
        self._cond = threading.Condition()
        self.seen: list[tuple[float, str | None]] = []
        self.connected: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="roster-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with (
                httpx.Client(base_url=self._url, headers=self._headers, trust_env=False) as client,
                connect_sse(
                    client,
                    "GET",
                    "/subscribe",
                    params={"name": self._watcher},
                    timeout=httpx.Timeout(5.0, read=60.0),
                ) as source,
            ):
                source.response.raise_for_status()
                for event in source.iter_sse():
                    data: Any = orjson.loads(event.data) if event.data else None
                    if event.event == "roster":
                        rows = data["members"]
                    elif event.event == "presence":
                        rows = [data]
                    else:
                        continue
                    for row in rows:
                        if row["name"] == self._member:
                            self._note(row)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            with self._cond:
                self._cond.notify_all()

    def _note(self, row: dict[str, Any]) -> None:
        with self._cond:
            self.seen.append((time.monotonic(), row.get("activity")))
            self.connected = row["connected"]
            self._cond.notify_all()

    @property
    def current(self) -> str | None:
        with self._cond:
            return self.seen[-1][1] if self.seen else None

    def wait(self, activity: str | None, *, within: float = 20.0) -> float:
        """Block until the stream shows ``activity`` as the latest; return when it arrived."""
        deadline = time.monotonic() + within
        with self._cond:
            while not (self.seen and self.seen[-1][1] == activity):
                left = deadline - time.monotonic()
                assert left > 0 and self.error is None, (
                    f"the roster never showed {activity!r}; saw {self.sequence()}, "
                    f"error {self.error!r}"
                )
                self._cond.wait(left)
            return self.seen[-1][0]

    def wait_connected(self, count: int, *, within: float = 20.0) -> None:
        deadline = time.monotonic() + within
        with self._cond:
            while self.connected != count:
                left = deadline - time.monotonic()
                assert left > 0 and self.error is None, f"connected stayed {self.connected}"
                self._cond.wait(left)

    def sequence(self) -> list[str | None]:
        """The activities shown, with repeats (other fields changing) collapsed."""
        out: list[str | None] = []
        for _, activity in self.seen:
            if not out or out[-1] != activity:
                out.append(activity)
        return out

    def join(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)


def roster_activity(broker: RunningBroker, name: str = "alice") -> str | None:
    roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob"), trust_env=False)
    (row,) = [p for p in roster.json() if p["name"] == name]
    activity: str | None = row.get("activity")
    return activity


def wrapped(codex: Path, tmp_path: Path, broker: RunningBroker) -> Path:
    """An executable the driver starts as its "codex": wrap, reporting as alice, in front
    of the real one. The token goes in a file (the driver passes no CODEX_* variables)."""
    token_file = tmp_path / "alice.token"
    token_file.write_text(token_of("alice") + "\n")
    token_file.chmod(0o600)
    command = [
        sys.executable,
        "-m",
        "codex_presence",
        "wrap",
        "--broker",
        broker.url,
        "--name",
        "alice",
        "--token-file",
        str(token_file),
        "--",
        str(codex),
    ]
    script = tmp_path / "codex-behind-wrap"
    script.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
    script.chmod(0o755)
    return script


def is_server_request(method: str) -> Any:
    return lambda msg: msg.get("method") == method and "id" in msg


def test_roster_follows_a_real_approval_turn(codex: Path, tmp_path: Path) -> None:
    model = FakeModel(
        [
            # The command sleeps, so "working while it runs" is a moment one can look at.
            reply(
                exec_command(
                    "touch made.txt && sleep 1 && echo done", call_id="call_touch", escalate=True
                )
            ),
            message("Finished."),
        ]
    )
    root = tmp_path / "run"
    with running_broker(team=make_team("alice", "bob")) as broker:
        watch = RosterWatch(broker, watcher="bob", member="alice")
        with (
            model.serve(),
            session(
                root,
                base_url=model.base_url,
                config=APPROVALS,
                recording=tmp_path / "client.jsonl",
                codex=wrapped(codex, tmp_path, broker),
            ) as s,
        ):
            watch.wait_connected(1)  # wrap holds alice's subscription
            assert watch.current is None
            s.initialize()
            thread = s.start_thread()
            assert watch.current is None  # a thread alone is no work

            s.start_turn(thread, "make a file")
            s.wait_method("turn/started", threadId=thread)
            watch.wait("working")

            request = s.wait_for(is_server_request("item/commandExecution/requestApproval"))
            watch.wait("blocked")
            held_from = time.monotonic()
            time.sleep(HOLD)  # the client holds the answer back; nobody else moves
            assert watch.current == "blocked"
            assert roster_activity(broker) == "blocked"
            assert all(a == "blocked" for t, a in watch.seen if t >= held_from)

            s.answer(request, {"decision": "accept"})
            # (codex announced the command item before asking; it runs once answered)
            s.wait_method("serverRequest/resolved", requestId=request["id"])
            working_again = watch.wait("working")
            assert roster_activity(broker) == "working"
            s.wait_item("completed", "commandExecution")
            done_at = time.monotonic()
            assert working_again < done_at  # shown working while the command ran

            s.turn_completed(thread)
            watch.wait(None)
            assert roster_activity(broker) is None
            assert (root / "work" / "made.txt").exists()
        # The session is over (stdin closed, codex and wrap exited): alice left.
        watch.wait_connected(0)
        assert watch.current is None
    watch.join()

    assert watch.sequence() == [None, "working", "blocked", "working", None]
    assert not model.pending and not model.unscripted
    log = (root / "codex-stderr.log").read_text(errors="replace")
    assert "online: subscribed to the broker as alice" in log
    assert token_of("alice") not in log
