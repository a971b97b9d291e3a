"""The broker's notifications, delivered to real receivers on loopback through apprise:
a JSON webhook (``json://``), ntfy's JSON publish and Slack's incoming webhook, each
pointed at a local server that checks the shape the service documents.

The broker's wall clock and the notifier's are one :class:`FakeClock`: a member is
"blocked for a minute" by moving it, so that nothing waits for the delay; only the
deliveries (the sockets) take real time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from codex_presence.broker.notify.apprise_sender import AppriseSender
from codex_presence.broker.notify.claims import RedisClaims
from codex_presence.broker.notify.config import Target, command_line_targets
from codex_presence.broker.notify.notifier import Notifier
from codex_presence.broker.team_file import render_team
from codex_presence.core.backoff import Backoff
from codex_presence.core.notify_policy import NotifyEvent, Rule
from tests.support.broker_harness import (
    FakeClock,
    RunningBroker,
    broker_process,
    make_team,
    running_broker,
    shared_state,
    token_of,
)
from tests.support.receivers import Receiver, receiver, trickler
from tests.support.waiting import eventually, exits
from tests.support.wrap_harness import wrap_env

TEAM = make_team("alice", "builder", "scout")
START = 1_800_000_000.0  # unix seconds: 2027-01-15 08:00:00 UTC


def report(broker: RunningBroker, name: str, state: str) -> None:
    response = httpx.post(
        broker.url + "/presence/activity",
        json={"state": state},
        headers=broker.auth(name),
        timeout=5,
    )
    assert response.status_code == 204, response.text


def notifier(targets: list[Target], clock: FakeClock, **kwargs: Any) -> Notifier:
    kwargs.setdefault("backoff", lambda: Backoff(base=0.01, cap=0.05))
    kwargs.setdefault("recheck", 0.05)
    return Notifier(
        targets, team="acme", sender=AppriseSender(), clock=clock, max_sleep=0.01, **kwargs
    )


def settled(n: Notifier, clock: FakeClock) -> None:
    """Wait until the notifier has looked at the clock's time and delivered all it found."""
    eventually(lambda: n.looked_at >= clock.now and n.pending == 0, what="the notifier idle")


def fan_outs_ran(notifiers: list[Notifier], clock: FakeClock, *brokers: RunningBroker) -> None:
    """Every broker's fan-out has published since now (a publish first looks for lapses and
    deaths), prompted by another member's report through the first; then each notifier has
    looked again (the clock moved a tick) and delivered what it found. A wait for a cause:
    a notice not sent is then one that was never due."""
    before = [b.broker.version for b in brokers]
    report_in(brokers[0], "scout", "working", "other")
    eventually(
        lambda: all(b.broker.version > v for b, v in zip(brokers, before, strict=True)),
        what="every broker's fan-out",
    )
    clock.advance(0.001)
    for n in notifiers:
        settled(n, clock)


@contextmanager
def broker_with(n: Notifier, wall: FakeClock, **kwargs: Any) -> Iterator[RunningBroker]:
    with running_broker(team=TEAM, wall_clock=wall, watcher=n, **kwargs) as broker:
        yield broker


def target(url: str, *, after: float = 60, **rule: Any) -> Target:
    return Target(url=url, rule=Rule(after=after, **rule))


@contextmanager
def two_brokers_on_redis(
    redis_url: str, hook: Receiver, clock: FakeClock, **rule: Any
) -> Iterator[tuple[list[Notifier], RunningBroker, RunningBroker]]:
    """Two brokers sharing ``redis_url`` (and its claims), each notifying ``hook`` by
    ``rule``, their session grace 2 s (a runner comes back within it even on a loaded
    machine: past it, the first broker rightly takes the session for dead): their
    notifiers, and the two brokers running."""
    notifiers, brokers = [], []
    for _ in range(2):
        state = shared_state(redis_url, TEAM)
        claims = RedisClaims(state.store.link)
        n = notifier([target(f"json://{hook.host}/h", **rule)], clock, claims=claims)
        notifiers.append(n)
        brokers.append(broker_with(n, clock, store=state.store, session_grace=2.0))
    with brokers[0] as a, brokers[1] as b:
        yield notifiers, a, b


# -- one notification per target, with who, what, since and the link ---------------------


def test_blocked_past_the_delay_reaches_each_receiver_once_with_who_what_since_and_link(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from apprise.plugins.slack import NotifySlack

    with (
        receiver() as hook,
        receiver(answer=b'{"id":"x","event":"message"}') as ntfy,
        receiver(answer=b"ok") as slack,
    ):
        # apprise has no option for Slack's host: its webhook base is a class attribute.
        monkeypatch.setattr(NotifySlack, "webhook_url", f"http://{slack.host}/services")
        clock = FakeClock(START)
        n = notifier(
            [
                target(f"json://{hook.host}/hook"),
                target(f"ntfy://{ntfy.host}/agents"),
                target("slack://T0AAAAAAA/B0BBBBBBB/secretsecretsecret24chr"),
            ],
            clock,
            link="https://presence.example.com/",
        )
        with broker_with(n, clock) as broker:
            report(broker, "builder", "blocked")
            clock.advance(59)
            settled(n, clock)
            assert not (hook.requests or ntfy.requests or slack.requests)  # not yet
            clock.advance(1)
            eventually(lambda: hook.requests and ntfy.requests and slack.requests)
            clock.advance(3600)  # still blocked an hour on: no repeat asked for
            report(broker, "builder", "blocked")
            settled(n, clock)

    assert [len(r.requests) for r in (hook, ntfy, slack)] == [1, 1, 1]
    # apprise's JSON webhook: {"version", "title", "message", "attachments", "type"}
    sent = hook.requests[0].json()
    assert sent["title"] == "builder: needs input"
    assert sent["message"] == (
        "builder needs input since 08:00:00 UTC (1 min) - team acme\nhttps://presence.example.com/"
    )
    assert sent["type"] == "warning"
    assert hook.requests[0].path == "/hook"
    # ntfy's "publish as JSON": a POST to the root with topic, title and message
    published = ntfy.requests[0]
    assert (published.path, published.headers["content-type"]) == ("/", "application/json")
    assert published.json()["topic"] == "agents"
    assert published.json()["title"] == "builder: needs input"
    assert "since 08:00:00 UTC" in published.json()["message"]
    # Slack's incoming webhook: POST /services/T/B/C, a JSON body with the text in it
    posted = slack.requests[0]
    assert posted.path == "/services/T0AAAAAAA/B0BBBBBBB/secretsecretsecret24chr"
    assert "builder needs input since 08:00:00 UTC" in posted.body.decode()
    assert n.stats[0].sent == n.stats[1].sent == n.stats[2].sent == 1


def test_answered_within_the_delay_notifies_nobody() -> None:
    with receiver() as hook:
        clock = FakeClock(START)
        on_all = frozenset(NotifyEvent)
        n = notifier([target(f"json://{hook.host}/hook", on=on_all)], clock)
        with broker_with(n, clock) as broker:
            report(broker, "builder", "blocked")
            clock.advance(20)
            report(broker, "builder", "working")
            eventually(lambda: n.policy.blocked_since("builder") is None)  # the fan-out told it
            clock.advance(3600)
            settled(n, clock)
            assert hook.requests == []


def test_answered_after_an_announcement_says_back_to_work_to_who_asked() -> None:
    with receiver() as asks, receiver() as does_not:
        clock = FakeClock(START)
        n = notifier(
            [
                target(f"json://{asks.host}/a", on=frozenset(NotifyEvent)),
                target(f"json://{does_not.host}/b"),
            ],
            clock,
        )
        with broker_with(n, clock) as broker:
            report(broker, "scout", "blocked")
            clock.advance(61)
            eventually(lambda: asks.requests and does_not.requests)
            clock.advance(9)
            report(broker, "scout", "working")
            eventually(lambda: len(asks.requests) == 2)
            settled(n, clock)
    assert [r.json()["title"] for r in asks.requests] == [
        "scout: needs input",
        "scout: back to work",
    ]
    assert asks.requests[1].json()["type"] == "success"
    assert len(does_not.requests) == 1


def test_only_the_named_members_are_announced() -> None:
    with receiver() as hook:
        clock = FakeClock(START)
        n = notifier([target(f"json://{hook.host}/h", members=frozenset({"scout"}))], clock)
        with broker_with(n, clock) as broker:
            report(broker, "builder", "blocked")
            report(broker, "scout", "blocked")
            clock.advance(61)
            eventually(lambda: hook.requests)
            settled(n, clock)
    assert [r.json()["title"] for r in hook.requests] == ["scout: needs input"]


# -- a failing target: retried, given up with a log line, nobody else delayed --------------


def test_a_failing_target_is_retried_then_given_up_with_a_warning_and_the_others_still_get_theirs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="codex_presence")
    with receiver(status=500) as broken, receiver() as fine:
        clock = FakeClock(START)
        n = notifier(
            [target(f"json://{broken.host}/x"), target(f"json://{fine.host}/y")],
            clock,
            attempts=3,
        )
        with broker_with(n, clock) as broker:
            report(broker, "builder", "blocked")
            clock.advance(60)
            eventually(lambda: fine.requests)
            settled(n, clock)
    assert len(broken.requests) == 3  # three attempts, then given up
    assert len(fine.requests) == 1
    gave_up = [r for r in caplog.records if "gave up" in r.getMessage()]
    assert len(gave_up) == 1 and gave_up[0].levelno == logging.WARNING
    line = gave_up[0].getMessage()
    assert f"json://{broken.host}/***" in line and "after 3 attempts" in line
    assert n.stats[0].given_up == 1 and n.stats[0].failing == 1
    assert n.stats[1].sent == 1 and n.stats[1].failing == 0


def test_a_target_url_secret_is_in_no_log_line_of_the_broker_at_any_verbosity(
    tmp_path: Path,
) -> None:
    """The real command at -vv, two failing targets whose URLs hold a password and a
    token: neither appears on stderr, although apprise logs both at debug level."""
    password, token = "hunter2-pw-ntfy", "slacksecrettoken0123456789"
    team_file = tmp_path / "team.toml"
    text = render_team("acme", [(m.name, m.role, token_of(m.name)) for m in TEAM.members])
    team_file.write_text(
        text + f'\n[[notify]]\nurl = "slack://T0AAAAAAA/B0BBBBBBB/{token}"\nafter = 0\n'
    )
    with receiver(status=503) as ntfy:
        url = f"ntfy://alice:{password}@{ntfy.host}/agents"
        with broker_process(
            "--team",
            str(team_file),
            "--notify-after",
            "0",
            "-vv",
            env={"CODEX_PRESENCE_NOTIFY": url},
        ) as broker:
            response = httpx.post(
                broker.url + "/presence/activity",
                json={"state": "blocked"},
                headers={"authorization": f"Bearer {token_of('builder')}"},
                timeout=5,
            )
            assert response.status_code == 204
            eventually(lambda: len(ntfy.requests) >= 2, what="a retry")
            broker.stderr.until("attempt 1 of 5 failed.*slack|slack.*attempt 1 of 5 failed")
            broker.proc.terminate()
            exits(broker.proc, what="the broker", seen=broker.said)
            broker.stderr.rest()
            said = broker.said()
    assert ntfy.requests[0].headers["authorization"].startswith("Basic ")  # it was used
    assert "attempt 2 of 5 failed" in said and "ntfy://alice:" in said
    assert password not in said and token not in said


def test_apprise_logs_which_name_the_url_never_reach_a_root_logger_that_takes_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program embedding the broker may log everything at debug level from the root:
    apprise's own debug lines (which spell out a Slack webhook's tokens) stop before it."""
    from apprise.plugins.slack import NotifySlack

    token = "slacksecrettoken0123456789"
    seen: list[str] = []

    class Everything(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(f"{record.name}: {record.getMessage()}")

    root = logging.getLogger()
    handler, level = Everything(logging.DEBUG), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with receiver(status=500, answer=b"nope") as slack:
            monkeypatch.setattr(NotifySlack, "webhook_url", f"http://{slack.host}/services")
            clock = FakeClock(START)
            n = notifier([target(f"slack://T0AAAAAAA/B0BBBBBBB/{token}")], clock, attempts=2)
            with broker_with(n, clock) as broker:
                report(broker, "builder", "blocked")
                clock.advance(60)
                eventually(lambda: len(slack.requests) == 2)
                settled(n, clock)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    text = "\n".join(seen)
    assert "gave up" in text and "Failed to send to Slack" in text  # apprise's reason, kept
    assert token not in text


# -- configuration seen by admins ----------------------------------------------------------


def test_admins_see_the_targets_without_their_secrets_and_others_do_not() -> None:
    from starlette.testclient import TestClient

    from codex_presence.broker.app import create_app
    from codex_presence.broker.state import Broker

    clock = FakeClock(START)
    webhook = "json://bot:s3cr3tpass@127.0.0.1:9/hooks/s3cr3tpath"  # the path: a secret too
    n = notifier(command_line_targets([webhook], after=30), clock)
    broker = Broker(team=TEAM, watcher=n)
    client = TestClient(create_app(broker, notifier=n))  # no lifespan: the route alone

    def get(name: str | None) -> httpx.Response:
        headers = {} if name is None else {"authorization": f"Bearer {token_of(name)}"}
        return client.get("/notify", headers=headers)

    assert get(None).status_code == 401
    assert get("scout").status_code == 403  # an operator, not an admin
    answer = get("alice")
    assert answer.status_code == 200
    [shown] = answer.json()["targets"]
    assert "s3cr3tpass" not in answer.text and "s3cr3tpath" not in answer.text
    assert shown["label"] == "json://bot:****@127.0.0.1:9/***" and shown["after"] == 30
    assert shown["on"] == ["blocked"] and shown["members"] is None


# -- session lost: a session that died while working or blocked -------------------------

RUNNER = "runnerSession0001"


def report_in(broker: RunningBroker, name: str, state: str, session: str) -> None:
    response = httpx.post(
        broker.url + "/presence/activity",
        json={"state": state, "session": session},
        headers=broker.auth(name),
        timeout=5,
    )
    assert response.status_code == 204, response.text


@contextmanager
def subscribed(broker: RunningBroker, name: str, session: str) -> Iterator[None]:
    """``GET /subscribe?name=<name>&session=<session>`` held open for the block (a runner's
    link, bound to its session)."""
    params = {"name": name, "session": session}
    with (
        httpx.Client(base_url=broker.url, timeout=httpx.Timeout(5, read=60)) as c,
        c.stream("GET", "/subscribe", params=params, headers=broker.auth(name)) as response,
    ):
        assert response.status_code == 200
        yield


def in_grace(broker: RunningBroker) -> None:
    """Wait until the broker gave the session its grace (the subscription's end seen)."""

    def due() -> bool:
        lapse = broker.broker.store.next_lapse()
        return lapse is not None and lapse <= 5.0  # the grace, not the TTL (30 s)

    eventually(due, what="the grace")


def test_a_session_whose_grace_lapses_while_blocked_is_told_lost_once_to_who_asked() -> None:
    with receiver() as asks, receiver() as does_not:
        clock = FakeClock(START)
        n = notifier(
            [
                target(f"json://{asks.host}/a", on=frozenset(NotifyEvent)),
                target(f"json://{does_not.host}/b"),
            ],
            clock,
        )
        with broker_with(n, clock, clock=clock, session_grace=1.0) as broker:
            with subscribed(broker, "builder", RUNNER):
                report_in(broker, "builder", "working", RUNNER)
                clock.advance(5)
                for heartbeat in (0, 25, 25, 16):  # announced as blocked (delay 60)
                    clock.advance(heartbeat)
                    report_in(broker, "builder", "blocked", RUNNER)
                eventually(lambda: asks.requests and does_not.requests)
            # The runner died: its subscription ended without an idle report.
            in_grace(broker)
            clock.advance(0.5)
            settled(n, clock)
            assert len(asks.requests) == 1  # within the grace: nothing yet
            clock.advance(0.5)
            eventually(lambda: n.policy.blocked_since("builder") is None, what="the death")
            settled(n, clock)
            assert len(asks.requests) == 1  # the death waits for the delay, as blocked does
            clock.advance(60)
            eventually(lambda: len(asks.requests) == 2, what="the session lost")
            clock.advance(3600)
            settled(n, clock)
    lost = asks.requests[1].json()
    assert lost["title"] == "builder: session lost"
    assert lost["message"] == (
        "builder's session was lost at 08:01:12 UTC while blocked (since 08:00:05 UTC, 1 min 7 s)"
        " - team acme"
    )
    assert lost["type"] == "failure"
    assert len(asks.requests) == 2  # no "no longer needs input" after the death
    assert len(does_not.requests) == 1  # asked for "blocked" only
    assert n.stats[0].sent == 2


@pytest.mark.parametrize("ending", ["idle", "again", "rebound", "no subscription"])
def test_a_session_that_did_not_die_is_not_told_lost(ending: str) -> None:
    """Reported idle before its subscription ended, reported again (or subscribed again)
    within the grace, or never bound to a subscription (its TTL lapse is no death)."""
    with receiver() as hook, ExitStack() as again:
        clock = FakeClock(START)
        n = notifier([target(f"json://{hook.host}/h", on=frozenset({NotifyEvent.LOST}))], clock)
        broker = again.enter_context(broker_with(n, clock, clock=clock, session_grace=1.0))
        if ending == "no subscription":
            report_in(broker, "builder", "working", RUNNER)
            clock.advance(31)  # the TTL: it reads idle
        else:
            with subscribed(broker, "builder", RUNNER):
                report_in(broker, "builder", "working", RUNNER)
                if ending == "idle":
                    report_in(broker, "builder", "idle", RUNNER)
            if ending != "idle":
                in_grace(broker)
            if ending == "again":
                report_in(broker, "builder", "working", RUNNER)
            if ending == "rebound":
                again.enter_context(subscribed(broker, "builder", RUNNER))
                eventually(lambda: broker.broker._bound)
            clock.advance(2)
        fan_outs_ran([n], clock, broker)
        assert hook.requests == []
        # "rebound" lapsed too (nothing re-sent its state), but its runner is alive.
        expected = "working" if ending == "again" else "idle"
        assert broker.broker.store.activity("builder").value == expected


# -- several brokers on one Redis: each notice once ----------------------------------------


def _redis_broker(url: str, clock: FakeClock, hook: Receiver, **kwargs: Any) -> Any:
    state = shared_state(url, TEAM)
    n = notifier(
        [target(f"json://{hook.host}/h")], clock, claims=RedisClaims(state.store.link), **kwargs
    )
    return n, broker_with(n, clock, store=state.store)


def test_two_brokers_on_one_redis_send_one_notification(redis_url: str) -> None:
    with receiver() as hook:
        clock = FakeClock(START)
        n1, first = _redis_broker(redis_url, clock, hook)
        n2, second = _redis_broker(redis_url, clock, hook)
        with first as a, second:
            report(a, "builder", "blocked")
            eventually(lambda: n2.policy.blocked_since("builder"), what="the other broker's view")
            clock.advance(60)
            eventually(lambda: hook.requests)
            settled(n1, clock)
            settled(n2, clock)
    assert len(hook.requests) == 1
    assert n1.stats[0].sent + n2.stats[0].sent == 1


def test_a_session_lost_on_two_brokers_on_one_redis_is_told_once(redis_url: str) -> None:
    """The runner subscribes to one broker and reports to the other (a load balancer in
    front): the broker holding the subscription tells, from the member's activity."""
    with receiver() as hook:
        clock = FakeClock(START)
        on_lost = frozenset({NotifyEvent.LOST})
        rule = {"on": on_lost, "after": 0}
        with two_brokers_on_redis(redis_url, hook, clock, **rule) as (notifiers, a, b):
            with subscribed(a, "builder", RUNNER):
                report_in(b, "builder", "blocked", RUNNER)
                eventually(lambda: a.broker.store.activity("builder").value == "blocked")
            eventually(lambda: hook.requests, what="the session lost")
            fan_outs_ran(notifiers, clock, a, b)  # the other broker, had it told too
    [told] = hook.requests
    assert told.json()["title"] == "builder: session lost"
    assert "while blocked (since 08:00:00 UTC, 0 s)" in told.json()["message"]
    assert sum(n.stats[0].sent for n in notifiers) == 1


def test_a_runner_that_dies_blocked_is_told_lost_and_never_answered_by_any_broker(
    redis_url: str,
) -> None:
    """Two brokers on one Redis, a target that asks for every event: the member is
    announced blocked, then its runner dies. The broker that held the subscription tells
    the death; the other sees the member's lapse to idle, and must not call it an answer
    ("no longer needs input") of a runner that died."""
    with receiver() as hook:
        clock = FakeClock(START)
        every = frozenset(NotifyEvent)
        with two_brokers_on_redis(redis_url, hook, clock, on=every, after=5) as (notifiers, a, b):
            with subscribed(a, "builder", RUNNER):
                report_in(a, "builder", "blocked", RUNNER)
                for n in notifiers:
                    eventually(lambda n=n: n.policy.blocked_since("builder"), what="blocked")
                clock.advance(5)
                eventually(lambda: len(hook.requests) == 1, what="needs input")
            # The runner died: its subscription ended without an idle report.
            for n in notifiers:  # told by one, lapsed on the other: the spell ends
                eventually(lambda n=n: n.policy.blocked_since("builder") is None, what="death")
            clock.advance(5)  # the delay, for the death as for blocked
            eventually(
                lambda: any("lost" in r.json()["title"] for r in hook.requests),
                what="the session lost",
            )
            eventually(lambda: b.broker.store.activity("builder").value == "idle")
            fan_outs_ran(notifiers, clock, b, a)
    titles = [r.json()["title"] for r in hook.requests]
    assert titles == ["builder: needs input", "builder: session lost"], titles


def test_a_session_that_came_back_through_another_broker_and_ended_idle_is_not_lost(
    redis_url: str,
) -> None:
    """The runner's subscription drops from one broker and comes back on another, which
    gets its reports from then on; past the first broker's grace the session still works,
    then ends cleanly there. The first broker never heard those reports: it must not take
    the clean end for a lapse."""
    with receiver() as hook:
        clock = FakeClock(START)
        on_lost = frozenset({NotifyEvent.LOST})
        with two_brokers_on_redis(redis_url, hook, clock, on=on_lost) as (notifiers, a, b):
            with subscribed(a, "builder", RUNNER):
                report_in(a, "builder", "working", RUNNER)
            in_grace(a)  # the first broker took it for dying
            with subscribed(b, "builder", RUNNER):
                report_in(b, "builder", "working", RUNNER)  # the link re-sends its state
                time.sleep(2.5)  # past the grace: alive, and held
                assert a.broker.store.activity("builder").value == "working"
                report_in(b, "builder", "idle", RUNNER)  # its last word, then its end
                eventually(lambda: a.broker.store.activity("builder").value == "idle")
            fan_outs_ran(notifiers, clock, a, b)
    assert hook.requests == []


def test_a_session_that_came_back_through_another_broker_and_died_there_is_told_once(
    redis_url: str,
) -> None:
    """The runner's subscription drops from one broker and comes back on another, where it
    turns blocked; then it dies there. That broker tells the death, blocked; the first one,
    which took the session for dying when it left, working, must not tell it again in that
    old state. (Before: two "session lost" notices, one of them "while working".)"""
    with receiver() as hook:
        clock = FakeClock(START)
        on_lost = frozenset({NotifyEvent.LOST})
        rule = {"on": on_lost, "after": 0}
        with two_brokers_on_redis(redis_url, hook, clock, **rule) as (notifiers, a, b):
            with subscribed(a, "builder", RUNNER):
                report_in(a, "builder", "working", RUNNER)
            in_grace(a)  # the first broker took it for dying
            with subscribed(b, "builder", RUNNER):
                clock.advance(5)
                report_in(b, "builder", "blocked", RUNNER)
                eventually(lambda: a.broker.store.activity("builder").value == "blocked")
            eventually(lambda: hook.requests, what="the session lost")
            fan_outs_ran(notifiers, clock, a, b)
    said = [r.json()["message"] for r in hook.requests]
    assert len(said) == 1 and "while blocked" in said[0], said


def test_a_notice_claimed_by_a_broker_that_died_is_sent_once_its_claim_lapses(
    redis_url: str,
) -> None:
    import redis

    with receiver() as hook:
        clock = FakeClock(START)
        n, broker = _redis_broker(redis_url, clock, hook)
        with broker as b:
            report(b, "builder", "blocked")
            eventually(lambda: n.policy.blocked_since("builder"))
            key = f"{n.targets[0].id}:builder:blocked:{n.policy.blocked_since('builder')}:0"
            client = redis.Redis.from_url(redis_url)
            # A broker claimed it, then died mid-send: its lease runs 0.5 s more.
            client.set(f"codex-presence:{{acme}}:n:{key}", "dead-broker/1", px=500)
            clock.advance(60)
            settled(n, clock)
            assert len(hook.requests) == 1
            assert client.get(f"codex-presence:{{acme}}:n:{key}") == b"done"
            client.close()


def test_a_claim_key_the_brokers_cannot_read_holds_no_notice_back(redis_url: str) -> None:
    """A claim key of another type (set by hand, or by something else on the prefix) is
    replaced by the claim, as the brokers' own scripts replace such keys."""
    import redis

    with receiver() as hook:
        clock = FakeClock(START)
        n, broker = _redis_broker(redis_url, clock, hook)
        with broker as b:
            report(b, "builder", "blocked")
            eventually(lambda: n.policy.blocked_since("builder"))
            key = f"{n.targets[0].id}:builder:blocked:{n.policy.blocked_since('builder')}:0"
            client = redis.Redis.from_url(redis_url)
            client.hset(f"codex-presence:{{acme}}:n:{key}", "x", "1")  # a hash, not a claim
            clock.advance(60)
            settled(n, clock)
            assert len(hook.requests) == 1
            assert client.get(f"codex-presence:{{acme}}:n:{key}") == b"done"
            client.close()


# -- configuration: the team file, the command line ---------------------------------------


def _parse(entries: str) -> list[Target]:
    import tomllib

    from codex_presence.broker.notify.config import parse_notify

    return parse_notify(tomllib.loads(entries), TEAM, source="team.toml")


def test_notify_entries_are_read_with_their_defaults() -> None:
    [plain, full] = _parse(
        '[[notify]]\nurl = "json://h/p"\n\n'
        '[[notify]]\nurl = "ntfy://h/t"\nafter = 5\nrepeat = 600\nmembers = ["scout"]\n'
        'on = ["blocked", "answered", "lost"]\nname = "ops phone"\n'
    )
    assert plain.rule == Rule()  # 60 s, everyone, blocked, no reminder
    assert full.rule == Rule(
        after=5, repeat=600, members=frozenset({"scout"}), on=frozenset(NotifyEvent)
    )
    assert full.name == "ops phone" and "ntfy://h/t" not in repr(full)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ('url = "json://h/p"\nmember = ["scout"]', "unknown key 'member'"),
        ('url = "json://h/p"\nafter = "soon"', "'after' must be a number of seconds"),
        ('url = "json://h/p"\nrepeat = -1', "'repeat' must be a number of seconds >= 0"),
        ('url = "json://h/p"\nmembers = ["mallory"]', "'mallory', not a team member"),
        ('url = "json://h/p"\non = ["blocked", "idle"]', "'on' holds 'idle'"),
        ("after = 5", "'url' must be a notification URL"),
        ('url = "json://h/p"\nname = "a\\u001b[2Jb"', "control character"),
    ],
)
def test_a_bad_notify_entry_is_refused_naming_what_is_wrong(entry: str, said: str) -> None:
    from codex_presence.broker.team import TeamError

    with pytest.raises(TeamError, match=r"team.toml: notify\[0\]") as caught:
        _parse(f"[[notify]]\n{entry}\n")
    assert said in str(caught.value)


def test_the_broker_refuses_a_url_apprise_does_not_know_without_quoting_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from codex_presence.cli.main import main

    team_file = tmp_path / "team.toml"
    team_file.write_text(
        render_team("acme", [(m.name, m.role, token_of(m.name)) for m in TEAM.members])
    )
    args = ["broker", "--team", str(team_file), "--notify", "nosuchservice://s3cret@h/x"]
    assert main([*args, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--notify URL 1: not a notification URL apprise knows" in err
    # From the variable, named by it: the person typed no --notify.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CODEX_PRESENCE_NOTIFY", "json://127.0.0.1:9/h nosuchservice://s3cret@h/x")
        assert main(["broker", "--team", str(team_file), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "CODEX_PRESENCE_NOTIFY URL 2: not a notification URL apprise knows" in err, err
    assert "s3cret" not in err
    # In the team file, the entry is named as the file's other mistakes are (before: it was
    # "notification target 2", counted over --notify and the file together, from 1, where
    # the file's every other error says notify[0]).
    with team_file.open("a") as out:
        out.write('\n[[notify]]\nurl = "json://127.0.0.1:9/ok"\n')
        out.write('\n[[notify]]\nurl = "jsn://s3cret@127.0.0.1:9/x"\n')
    args = ["broker", "--team", str(team_file), "--notify", "json://127.0.0.1:9/h"]
    assert main([*args, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{team_file}: notify[1]: not a notification URL apprise knows" in err, err
    assert "s3cret" not in err


def test_a_team_file_with_notify_urls_that_others_can_read_draws_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a 0644 team file holding ``[[notify]]`` URLs (a Slack webhook's token, an
    ntfy password) was read without a word, where a readable token file draws one."""
    from codex_presence.cli.main import main

    team_file = tmp_path / "team.toml"
    team_file.write_text(
        render_team("acme", [(m.name, m.role, token_of(m.name)) for m in TEAM.members])
        + '\n[[notify]]\nurl = "json://127.0.0.1:9/ok"\n'
        + '\n[[notify]]\nurl = "jsn://127.0.0.1:9/x"\n'  # ends the broker before it listens
    )
    warning = "holds [[notify]] URLs (their secrets) and is readable by group or others"
    for mode, warned in ((0o644, True), (0o600, False)):
        team_file.chmod(mode)
        assert main(["broker", "--team", str(team_file), "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert "notify[1]: not a notification URL apprise knows" in err
        assert (warning in err) is warned, err


def test_notify_test_sends_one_test_notification_and_says_so() -> None:
    with receiver() as hook, receiver(status=500) as broken:
        ok = _run_notify_test(f"json://user:pw-s3cret@{hook.host}/h")
        failed = _run_notify_test(f"json://{broken.host}/h")
    assert ok.returncode == 0 and "delivered" in ok.stderr and "pw-s3cret" not in ok.stderr
    [sent] = hook.requests
    assert sent.json()["title"] == "codex-presence: test" and sent.json()["type"] == "info"
    assert failed.returncode == 1 and "not delivered" in failed.stderr


def _run_notify_test(url: str) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "codex_presence", "notify", "test", url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_notify_list_shows_an_admin_the_targets_and_never_a_secret(tmp_path: Path) -> None:
    """``codex-presence notify list`` against a real broker: an admin sees each target's
    label (its URL's password masked), rule and counts; an operator is told the list is for
    admins, not that its token was refused."""
    import subprocess
    import sys

    team_file = tmp_path / "team.toml"
    team_file.write_text(
        render_team("acme", [(m.name, m.role, token_of(m.name)) for m in TEAM.members])
    )

    def notify_list(member: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "codex_presence", "notify", "list", "--broker", broker.url],
            capture_output=True,
            text=True,
            timeout=60,
            env=wrap_env({"CODEX_PRESENCE_TOKEN": token_of(member)}),
        )

    with (
        receiver() as hook,
        broker_process(
            "--team",
            str(team_file),
            "--notify",
            f"json://bot:pw-s3cret@{hook.host}/h",
            "--notify-after",
            "45",
        ) as broker,
    ):
        admin = notify_list("alice")
        operator = notify_list("scout")
    assert admin.returncode == 0, admin.stderr
    [line] = admin.stdout.splitlines()
    assert line.startswith("json://bot:") and "blocked after 45" in line and "everyone" in line
    assert "pw-s3cret" not in admin.stdout + admin.stderr
    assert operator.returncode == 1
    assert "admins (members.manage) only" in operator.stderr


class HandSetClaims:
    """The broker's claims, with the notice's claim key set by hand in Redis (without an
    expiry) before the broker first asks for it; every ask counted."""

    def __init__(self, claims: RedisClaims, redis_url: str, value: str) -> None:
        import redis

        self._claims = claims
        self._store = redis.Redis.from_url(redis_url)
        self._value = value
        self.asked: list[str] = []
        self.key = ""

    async def claim(self, key: str, lease: float) -> float | bool:
        if not self.asked:
            self.key = f"codex-presence:{{acme}}:n:{key}"
            self._store.set(self.key, self._value)
        self.asked.append(key)
        return await self._claims.claim(key, lease)

    async def settle(self, key: str, keep: float) -> None:
        await self._claims.settle(key, keep)

    def pttl(self) -> int:
        return int(self._store.pttl(self.key))


@pytest.mark.parametrize("held", ["another-host/0badc0de", "done"])
def test_a_claim_set_by_hand_without_expiry_silences_no_target_for_good(
    redis_url: str, held: str
) -> None:
    """A claim key set by hand without an expiry, as if another broker held the notice,
    silenced its target for good, and the broker asked Redis again ~20 times a second. A
    claim no broker could have made is taken as free (the notice goes out, after one ask),
    and a hand-set ``done`` is cut to the keep, after which the notice is news again."""
    from codex_presence.broker.notify.notifier import KEEP

    with receiver() as hook:
        clock = FakeClock(START)
        state = shared_state(redis_url, TEAM)
        claims = HandSetClaims(RedisClaims(state.store.link), redis_url, held)
        n = notifier([target(f"json://{hook.host}/h")], clock, claims=claims)
        with broker_with(n, clock, store=state.store) as broker:
            report(broker, "builder", "blocked")
            eventually(lambda: n.policy.blocked_since("builder"), what="blocked")
            clock.advance(60)
            eventually(lambda: claims.asked, what="the notice claimed")
            settled(n, clock)
            pttl = claims.pttl()
    assert len(claims.asked) == 1, f"{len(claims.asked)} asks for one notice"
    if held == "done":
        assert hook.requests == []
        assert 0 < pttl <= KEEP * 1000
    else:
        assert len(hook.requests) == 1
        assert 0 < pttl <= KEEP * 1000  # settled: done, with its keep


class CountingSender:
    """apprise's sender, with its sends in flight counted: each holds a worker thread."""

    def __init__(self) -> None:
        import threading

        self._sender = AppriseSender()
        self._lock = threading.Lock()
        self.in_flight = 0

    def masked(self, url: str) -> str:
        return self._sender.masked(url)

    def send(self, url: str, title: str, body: str, kind: str, timeout: float) -> str | None:
        with self._lock:
            self.in_flight += 1
        try:
            return self._sender.send(url, title, body, kind, timeout)
        finally:
            with self._lock:
                self.in_flight -= 1


def test_a_target_that_trickles_holds_no_thread_past_its_timeout() -> None:
    """A target that answers a byte at a time, each read within the read timeout: every
    attempt's worker thread stayed in the send for good (1 to 15 threads in 180 s). Each
    send now ends at its deadline: once the notice is given up, no send holds a thread,
    while the target still trickles."""
    with trickler(every=0.2) as slow:
        clock = FakeClock(START)
        sender = CountingSender()
        n = Notifier(
            [target(f"json://{slow.host}/h")],
            team="acme",
            sender=sender,
            clock=clock,
            max_sleep=0.01,
            timeout=1.0,
            attempts=3,
            backoff=lambda: Backoff(base=0.01, cap=0.05),
        )
        with broker_with(n, clock) as broker:
            report(broker, "builder", "blocked")
            eventually(lambda: n.policy.blocked_since("builder"), what="blocked")
            clock.advance(60)
            eventually(lambda: n.stats[0].given_up == 1, what="the notice given up")
            eventually(
                lambda: sender.in_flight == 0,
                60,
                f"every send's thread free (still held: {sender.in_flight})",
            )
            assert len(slow.requests) == 3
    assert n.stats[0].last_error == "no whole answer within 1 s"
