"""GET /history and GET /metrics on real brokers: two sharing a real redis-server read one
history; the history outlives a broker; both endpoints need a member's token.

Time is the brokers' own wall clock, a FakeClock the test moves between reports (the
reports date the transitions), so nothing here waits for seconds to pass: each step waits
for what must happen (the other broker's history showing it), generously.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
import redis

from codex_presence.broker.history import MemoryRecorder, Transition
from codex_presence.broker.history_http import history_routes
from codex_presence.broker.metrics import BrokerMetrics, metrics_routes
from codex_presence.broker.notify.apprise_sender import AppriseSender
from codex_presence.broker.notify.config import Target
from codex_presence.broker.notify.notifier import Notifier
from codex_presence.broker.redis.history import HISTORY, RedisHistory
from codex_presence.broker.redis.link import RedisLink
from codex_presence.cli.main import main
from codex_presence.core.backoff import Backoff
from codex_presence.core.notify_policy import Rule
from tests.support.broker_harness import (
    FakeClock,
    RunningBroker,
    broker_process,
    running_broker,
    shared_state,
    token_of,
)
from tests.support.receivers import receiver
from tests.support.redis_server import redis_server
from tests.support.shared_brokers import TEAM, Stream, auth, report, roster, team_file
from tests.support.waiting import eventually

T0 = 1_767_225_600_000  # 2026-01-01, unix ms
WAIT = 60.0


@contextmanager
def history_broker(
    clock: FakeClock, redis: str | None = None
) -> Iterator[tuple[RunningBroker, BrokerMetrics]]:
    """A broker keeping the history (in ``redis``'s stream, or in memory) and metrics,
    dated by ``clock``."""
    metrics = BrokerMetrics()
    kwargs: dict[str, Any] = {}
    if redis is not None:
        state = shared_state(redis, TEAM)
        metrics.watch(state.link)
        recorder: Any = RedisHistory(
            state.link, names=[m.name for m in TEAM.members], answered=metrics.block_answered
        )
        kwargs["store"] = state.store
    else:
        recorder = MemoryRecorder(answered=metrics.block_answered)

    def routes(broker: Any) -> list[Any]:
        return [*history_routes(broker, recorder, clock), *metrics_routes(broker, metrics)]

    with running_broker(
        team=TEAM, wall_clock=clock, history=recorder, extra_routes=routes, **kwargs
    ) as running:
        yield running, metrics


def history(url: str, member: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(
        url + "/history", params={"member": member, **params}, headers=auth("scout"), timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def states(url: str, member: str) -> list[str]:
    return [i["state"] for i in history(url, member, since=T0)["intervals"]]


def scrape(url: str) -> str:
    response = httpx.get(url + "/metrics", headers=auth("scout"), timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def sample(text: str, line_start: str) -> float:
    """The value of the metric line starting with ``line_start`` (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rpartition(" ")[2])
    return 0.0


def test_two_brokers_on_one_redis_read_one_history_and_a_restart_loses_nothing() -> None:
    clock = FakeClock(T0 / 1000)
    with redis_server() as server, ExitStack() as stack:
        a, _ = stack.enter_context(history_broker(clock, server.url))
        b, _ = stack.enter_context(history_broker(clock, server.url))
        builder = Stream(a.url, "builder")  # builder is on the wire: idle, not offline
        eventually(lambda: roster(b.url)["builder"]["connected"] == 1, WAIT, "B sees builder")

        assert report(a.url, "builder", "blocked").status_code == 204
        eventually(lambda: states(b.url, "builder")[-1:] == ["blocked"], WAIT, "B: blocked")
        text = scrape(b.url)
        assert sample(text, 'codex_presence_members{state="blocked"}') == 1
        assert sample(text, 'codex_presence_member_state{member="builder",state="blocked"}') == 1

        clock.advance(3)
        assert report(a.url, "builder", "working").status_code == 204
        eventually(lambda: states(b.url, "builder")[-1:] == ["working"], WAIT, "B: working")
        clock.advance(2)
        assert report(a.url, "builder", "idle").status_code == 204
        eventually(lambda: states(b.url, "builder")[-1:] == ["idle"], WAIT, "B: idle")

        expected = [
            {"state": "blocked", "since": T0, "until": T0 + 3000},
            {"state": "working", "since": T0 + 3000, "until": T0 + 5000},
            {"state": "idle", "since": T0 + 5000, "until": None},
        ]
        clock.advance(4)
        answer = history(b.url, "builder", since=T0)
        assert answer["intervals"] == expected
        assert answer["totals"] == {"working": 2.0, "blocked": 3.0, "idle": 4.0, "offline": 0.0}
        assert answer["waits"] == {"count": 1, "longest": 3.0, "each": [3.0]}
        assert history(a.url, "builder", since=T0) == answer

        # the wait was counted once, by the broker that wrote its answer
        counts = [sample(scrape(x.url), "codex_presence_block_seconds_count") for x in (a, b)]
        assert sorted(counts) == [0, 1], counts
        assert (
            sample(scrape(a.url if counts[0] else b.url), "codex_presence_block_seconds_sum") == 3
        )

        builder_ended = builder.ended
        stack.close()  # both brokers gone: the history is Redis's
        assert builder_ended.wait(WAIT)
        with history_broker(clock, server.url) as (c, _):
            assert history(c.url, "builder", since=T0)["intervals"][:2] == expected[:2]


def test_a_change_made_while_redis_hangs_is_written_once_it_answers() -> None:
    """builder subscribes while Redis hangs (SIGSTOP): the change (offline to idle) is
    published on this broker at once, its write fails (an outage), and it is written when
    Redis answers again, dated when it happened (not when it was written). /metrics
    counts the outage, once."""
    clock = FakeClock(T0 / 1000)
    with redis_server() as server, history_broker(clock, server.url) as (broker, _):
        url = broker.url
        text = scrape(url)
        assert sample(text, "codex_presence_store_up") == 1
        assert sample(text, "codex_presence_store_outages_total") == 0
        assert sample(text, "codex_presence_store_round_trip_seconds") > 0
        assert report(url, "builder", "blocked").status_code == 204
        eventually(lambda: states(url, "builder") == ["blocked"], WAIT, "blocked")
        clock.advance(3)
        assert report(url, "builder", "idle").status_code == 204  # no stream: offline
        eventually(lambda: states(url, "builder")[-1:] == ["offline"], WAIT, "offline")
        clock.advance(2)
        server.pause()
        try:
            Stream(url, "builder")  # attaching never waits on Redis
            eventually(lambda: broker.broker.stale is not None, WAIT, "the outage seen")
            clock.advance(4)  # what is written after the outage is dated by what was queued
        finally:
            server.resume()

        def written() -> bool:
            response = httpx.get(
                url + "/history",
                params={"member": "builder", "since": T0},
                headers=auth("scout"),
                timeout=10,
            )
            return response.status_code == 200 and len(response.json()["intervals"]) == 3

        eventually(written, WAIT, "the idle written once Redis answered")
        assert history(url, "builder", since=T0)["intervals"] == [
            {"state": "blocked", "since": T0, "until": T0 + 3000},
            {"state": "offline", "since": T0 + 3000, "until": T0 + 5000},
            {"state": "idle", "since": T0 + 5000, "until": None},
        ]
        # The gauge follows the link's word that Redis is back, which may come after the
        # queued write went through: waited for, as what must happen.
        eventually(lambda: sample(scrape(url), "codex_presence_store_up") == 1, WAIT, "up")
        assert sample(scrape(url), "codex_presence_store_outages_total") == 1


@pytest.mark.anyio
async def test_a_write_cut_short_by_an_outage_is_kept_for_the_next_connection() -> None:
    """The link ends its background work when any of its tasks sees Redis gone: a write in
    flight then is cancelled, not failed, and must stay queued. Before, only a write's own
    error put it back: one cancelled was lost (the test above passes either way, depending
    on which task saw the outage first)."""
    with redis_server() as server:
        link = RedisLink(server.url, team=TEAM.name)
        recorder = RedisHistory(link, names=[m.name for m in TEAM.members])
        presence = {"name": "builder", "connected": 1, "createdAt": 0, "lastSeen": 0}
        server.pause()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(recorder.keep)
                recorder.observe("builder", presence, T0)  # type: ignore[arg-type]
                while not recorder.writing:  # the writer took it: its script waits on Redis
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()  # as the link does on an outage
        finally:
            server.resume()
        assert recorder.pending == 1
        await written(recorder)
        assert (await recorder.read("builder", T0)) == [Transition(T0, "idle")]
        await link.client.aclose()


async def written(recorder: RedisHistory) -> None:
    """Run the recorder's writer until what it queued is written (within the suite's wait)."""
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(recorder.keep)
            while recorder.pending:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_transitions_queued_together_are_one_script_call_written_in_order() -> None:
    """Transitions queued before the writer runs are written by one script call (issue
    37: a call per transition was the largest part of what the history added to a
    report), each in its order: a member's wait answered within the batch is counted."""
    with redis_server() as server:
        client = redis.Redis.from_url(server.url)
        link = RedisLink(server.url, team=TEAM.name)
        waits: list[float] = []
        recorder = RedisHistory(link, names=[m.name for m in TEAM.members], answered=waits.append)

        def presence(name: str, activity: str | None, since: int) -> Any:
            return {
                "name": name,
                "connected": 1,
                "createdAt": 0,
                "lastSeen": 0,
                "activity": activity,
                "activitySince": since,
            }

        recorder.observe("builder", presence("builder", "blocked", T0), T0)
        recorder.observe("scout", presence("scout", "working", T0 + 100), T0 + 100)
        recorder.observe("builder", presence("builder", "working", T0 + 3000), T0 + 3000)
        recorder.observe("scout", presence("scout", None, 0), T0 + 4000)
        client.script_load(HISTORY)  # so that no NOSCRIPT's call counts
        client.config_resetstat()
        await written(recorder)
        calls = client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        assert calls == 1, f"{calls} script calls for one batch of 4 transitions"
        assert waits == [3.0]
        assert (await recorder.read("builder", T0 + 5000)) == [
            Transition(T0, "blocked"),
            Transition(T0 + 3000, "working"),
        ]
        assert (await recorder.read("scout", T0 + 5000)) == [
            Transition(T0 + 100, "working"),
            Transition(T0 + 4000, "idle"),
        ]
        assert client.xlen("codex-presence:{acme}:history") == 4
        await link.client.aclose()
        client.close()


def test_what_no_broker_writes_in_redis_costs_its_entry_alone() -> None:
    """Entries written by hand (another version, an operator, a bug): each one out of
    bounds is dropped alone, the others read; an unreadable last-state key is replaced by
    the next write."""
    clock = FakeClock(T0 / 1000)
    with redis_server() as server:
        client = redis.Redis.from_url(server.url)
        stream, last = "codex-presence:{acme}:history", "codex-presence:{acme}:history:last"
        for fields in (
            {"m": "builder", "s": "blocked", "t": str(T0)},
            {"m": "builder", "s": "asleep", "t": str(T0 + 500)},
            {"m": "builder", "s": "idle", "t": "1e9"},
            {"m": "builder", "s": "idle", "t": "9" * 16},
            {"m": "mallory", "s": "idle", "t": str(T0 + 1000)},
            {"m": "builder", "s": "idle", "t": str(T0 + 1000), "x": "no spaces allowed"},
            {"s": "idle", "t": str(T0 + 1000)},
            {"m": "builder", "s": "working", "t": str(T0 + 2000)},
        ):
            client.xadd(stream, fields)  # type: ignore[arg-type]
        client.set(last, "not a hash")
        with history_broker(clock, server.url) as (broker, _):
            clock.advance(3)
            answer = history(broker.url, "builder", since=T0)
            assert answer["intervals"] == [
                {"state": "blocked", "since": T0, "until": T0 + 2000},
                {"state": "working", "since": T0 + 2000, "until": None},
            ]
            assert report(broker.url, "builder", "blocked").status_code == 204
            eventually(lambda: states(broker.url, "builder")[-1:] == ["blocked"], WAIT, "written")
            assert client.type(last) == b"hash"
        client.close()


def test_history_and_metrics_need_a_members_token_and_say_what_is_wrong() -> None:
    clock = FakeClock(T0 / 1000)
    with history_broker(clock) as (broker, _):
        url = broker.url
        for path in ("/history?member=builder", "/metrics"):
            assert httpx.get(url + path, timeout=10).status_code == 401
            wrong = {"authorization": "Bearer cp_not-a-token"}
            assert httpx.get(url + path, headers=wrong, timeout=10).status_code == 401
        get = lambda query: httpx.get(url + "/history" + query, headers=auth("scout"), timeout=10)  # noqa: E731
        unknown = get("?member=mallory")
        assert unknown.status_code == 404
        assert "mallory" in unknown.json()["error"]
        bad = get("?member=builder&since=yesterday")
        assert bad.status_code == 400
        assert "unix milliseconds" in bad.json()["error"]
        assert get("").status_code == 400
        assert get("?member=builder").json()["intervals"] == []


def test_memory_history_times_a_wait_and_the_histogram_buckets_it() -> None:
    clock = FakeClock(T0 / 1000)
    metrics = BrokerMetrics()
    recorder = MemoryRecorder(answered=metrics.block_answered)
    with running_broker(
        team=TEAM,
        wall_clock=clock,
        history=recorder,
        extra_routes=lambda b: [*history_routes(b, recorder, clock), *metrics_routes(b, metrics)],
    ) as broker:
        assert report(broker.url, "builder", "blocked").status_code == 204
        eventually(lambda: states(broker.url, "builder") == ["blocked"], WAIT, "blocked")
        clock.advance(11)
        assert report(broker.url, "builder", "working").status_code == 204
        eventually(lambda: states(broker.url, "builder")[-1:] == ["working"], WAIT, "working")
        answer = history(broker.url, "builder", since=T0)
        assert answer["waits"] == {"count": 1, "longest": 11.0, "each": [11.0]}
        text = scrape(broker.url)
        assert sample(text, "codex_presence_block_seconds_count") == 1
        assert sample(text, 'codex_presence_block_seconds_bucket{le="15.0"}') == 1
        assert sample(text, 'codex_presence_block_seconds_bucket{le="5.0"}') == 0
        assert sample(text, 'codex_presence_members{state="working"}') == 1


def test_roster_history_says_where_a_member_waited_in_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(T0 / 1000)
    with history_broker(clock) as (broker, _):
        monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
        monkeypatch.setenv("CODEX_PRESENCE_BROKER", broker.url)
        for minutes, state in ((0, "blocked"), (11, "working"), (20, "blocked"), (42, "idle")):
            clock.now = T0 / 1000 + minutes * 60
            assert report(broker.url, "builder", state).status_code == 204
            shown = "offline" if state == "idle" else state  # builder holds no stream
            eventually(lambda: states(broker.url, "builder")[-1:] == [shown], WAIT, shown)  # noqa: B023
        clock.advance(3600)
        assert main(["roster", "--history"]) == 0
        out = capsys.readouterr().out
        assert "team acme history" in out
        assert (
            "- builder: needs input 33 min over 2 waits, longest 22 min; working 9 min; offline 1 h"
            in out
        )
        assert "- alice: never needed input" in out
        assert main(["roster", "--history", "builder", "--json"]) == 0
        (answer,) = orjson.loads(capsys.readouterr().out)
        assert answer["waits"]["each"] == [660.0, 1320.0]
        assert main(["roster", "--history", "mallory"]) == 1
        assert "mallory" in capsys.readouterr().err
        for wrong in (
            ["--history", "--watch"],
            ["--since-hours", "2"],
            ["--history", "--since-hours", "-1"],
        ):
            assert main(["roster", *wrong]) == 2, wrong
            assert "--" in capsys.readouterr().err


def test_the_real_command_counts_reports_by_outcome_and_keeps_history_off_when_told(
    tmp_path: Path,
) -> None:
    team = team_file(tmp_path)
    with broker_process("--team", team) as broker:
        url = broker.url
        assert report(url, "builder", "blocked").status_code == 204
        assert report(url, "builder", "asleep").status_code == 400
        wrong = {"authorization": "Bearer cp_wrong"}
        posted = httpx.post(url + "/presence/activity", json={"state": "idle"}, headers=wrong)
        assert posted.status_code == 401
        text = scrape(url)
        assert sample(text, 'codex_presence_reports_total{outcome="recorded"}') == 1
        assert sample(text, 'codex_presence_reports_total{outcome="refused"}') == 1
        assert sample(text, 'codex_presence_reports_total{outcome="unauthorized"}') == 1
        assert sample(text, 'codex_presence_members{state="blocked"}') == 1
        assert sample(text, 'codex_presence_notifications_total{outcome="sent"}') == 0
        assert token_of("builder") not in text and "cp_" not in text
        eventually(lambda: states(url, "builder") == ["blocked"], WAIT, "blocked")
    with broker_process("--team", team, "--history-hours", "0") as broker:
        off = httpx.get(broker.url + "/history?member=builder", headers=auth("scout"), timeout=10)
        assert off.status_code == 404
        assert "--history-hours 0" in off.json()["error"]


def test_metrics_count_the_notifications_sent_and_given_up() -> None:
    """One target that takes builder's notices, one that answers 500 to all: a wait is
    told to both; /metrics counts one sent and one failed (given up after its attempts),
    and no target's URL."""
    with receiver() as good, receiver(status=500) as bad:
        targets = [
            Target(url=f"json://{good.host}/ok", rule=Rule(after=0)),
            Target(url=f"json://{bad.host}/down", rule=Rule(after=0)),
        ]
        notifier = Notifier(
            targets,
            team="acme",
            sender=AppriseSender(),
            attempts=2,
            backoff=lambda: Backoff(base=0.01, cap=0.05),
            max_sleep=0.05,
            recheck=0.05,
        )
        metrics = BrokerMetrics(notifier)
        with running_broker(
            team=TEAM, watcher=notifier, extra_routes=lambda b: metrics_routes(b, metrics)
        ) as broker:
            assert report(broker.url, "builder", "blocked").status_code == 204
            eventually(
                lambda: [s.sent + s.given_up for s in notifier.stats] == [1, 1],
                WAIT,
                "both targets done",
            )
            text = scrape(broker.url)
            assert sample(text, 'codex_presence_notifications_total{outcome="sent"}') == 1
            assert sample(text, 'codex_presence_notifications_total{outcome="failed"}') == 1
            assert good.host not in text and bad.host not in text


def test_two_real_brokers_with_redis_share_the_history_and_say_the_store_in_metrics(
    tmp_path: Path,
) -> None:
    """The command's own wiring: ``broker --redis`` keeps the history in the team's stream
    (what one broker was told, the other reads) and its /metrics says the store."""
    team = team_file(tmp_path)
    with (
        redis_server() as server,
        broker_process("--team", team, redis=server.url) as a,
        broker_process("--team", team, redis=server.url) as b,
    ):
        assert report(a.url, "builder", "blocked").status_code == 204
        eventually(lambda: states(b.url, "builder")[-1:] == ["blocked"], WAIT, "B: blocked")
        text = scrape(b.url)
        assert sample(text, "codex_presence_store_up") == 1
        assert sample(text, 'codex_presence_members{state="blocked"}') == 1


@pytest.mark.parametrize("hours", ["-1", "nan", "9999"])
def test_history_hours_out_of_range_is_a_usage_error(hours: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "codex_presence", "broker", "--port", "0", "--history-hours", hours],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--history-hours" in done.stderr
