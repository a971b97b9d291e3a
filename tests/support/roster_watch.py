"""A teammate watching the roster: one SSE subscription, on a thread, recording every
activity the broker shows for one member; and the roster's answer for a member, once."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson
from httpx_sse import connect_sse

from tests.support.broker_harness import RunningBroker
from tests.support.waiting import WAIT


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
        self._releases: list[tuple[str | None, threading.Event]] = []
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
            for activity, release in self._releases:
                if activity == row.get("activity"):
                    release.set()
            self._cond.notify_all()

    def shown(self, activity: str | None) -> threading.Event:
        """An event set once the stream shows ``activity`` (now or later): a fake model's
        ``hold``, for an answer held until the roster shows the turn where the test
        cannot wait for it itself (while ``claude -p`` runs to its end)."""
        release = threading.Event()
        with self._cond:
            self._releases.append((activity, release))
            if any(a == activity for _, a in self.seen):
                release.set()
        return release

    @property
    def current(self) -> str | None:
        with self._cond:
            return self.seen[-1][1] if self.seen else None

    def wait(self, activity: str | None, *, within: float = WAIT) -> float:
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

    def wait_seen(self, activity: str | None, *, within: float = WAIT) -> float:
        """Block until the stream has shown ``activity`` at some point, latest or not (a
        state the agent soon left: working just before an approval request); return when
        it first did."""
        deadline = time.monotonic() + within
        with self._cond:
            while not any(a == activity for _, a in self.seen):
                left = deadline - time.monotonic()
                assert left > 0 and self.error is None, (
                    f"the roster never showed {activity!r}; saw {self.sequence()}, "
                    f"error {self.error!r}"
                )
                self._cond.wait(left)
            return next(t for t, a in self.seen if a == activity)

    def wait_connected(self, count: int, *, within: float = WAIT) -> None:
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

    def join(self, timeout: float = WAIT) -> None:
        self._thread.join(timeout)


def roster_row(broker: RunningBroker, name: str = "alice") -> dict[str, Any]:
    """``name``'s Presence object, as a teammate (bob) reads the roster."""
    roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob"), trust_env=False)
    (row,) = [p for p in roster.json() if p["name"] == name]
    return dict(row)


def roster_activity(broker: RunningBroker, name: str = "alice") -> str | None:
    activity: str | None = roster_row(broker, name).get("activity")
    return activity
