""" "Session lost" from a real runner's death (issue 25 with issue 23): a ``codex-presence
wrap`` (a scripted app-server as its child) working mid-turn is killed with SIGKILL (no
idle report, ever) against a real broker on loopback, in memory and on a real
redis-server (``store_url``); the broker's notifier, through apprise, tells a ``json://``
receiver on loopback once, after the session grace: who, what it was doing, since when.

The broker's TTL is far beyond the test (:data:`FAR`), so the grace is the only thing that
can end the session: the wait for the message is a generous deadline, never what tells the
grace from the TTL; the lower bound is the grace's own.
"""

from __future__ import annotations

import time

from codex_presence._wire import SESSION_GRACE
from codex_presence.broker.notify.apprise_sender import AppriseSender
from codex_presence.broker.notify.config import Target
from codex_presence.broker.notify.notifier import Notifier
from codex_presence.core.notify_policy import NotifyEvent, Rule
from tests.support.broker_harness import make_team, running_broker, token_of
from tests.support.receivers import receiver
from tests.support.shared_brokers import roster
from tests.support.waiting import WAIT, eventually
from tests.support.wrap_harness import WrapProcess, is_note

TOKEN = {"CODEX_PRESENCE_TOKEN": token_of("builder")}
LONG_TURN = {"deltas": 300, "delay_ms": 50}
"""A turn that works for about 15 s: longer than the test needs it working."""
FAR = 600.0
"""The broker's TTL: far beyond any wait here."""


def test_a_wrap_killed_mid_turn_is_told_lost_once_after_the_grace(store_url: str | None) -> None:
    with receiver() as hook:
        lost = Rule(after=0, on=frozenset({NotifyEvent.LOST}))
        notifier = Notifier(
            [Target(url=f"json://{hook.host}/hook", rule=lost)], team="acme", sender=AppriseSender()
        )
        with (
            running_broker(
                team=make_team("alice", "builder", "scout"),
                redis=store_url,
                watcher=notifier,
                activity_ttl=FAR,
            ) as broker,
            WrapProcess(["--broker", broker.url, "--name", "builder"], env=TOKEN) as wrap,
        ):
            url = broker.url
            eventually(lambda: roster(url)["builder"]["connected"] == 1, 60, "subscribed")
            wrap.start_turn(1, **LONG_TURN)
            wrap.wait_for(is_note("turn/started"))
            eventually(lambda: roster(url)["builder"].get("activity") == "working")
            since = roster(url)["builder"]["activitySince"]
            killed = time.monotonic()
            wrap.proc.kill()
            wrap.proc.wait(WAIT)
            eventually(lambda: hook.requests, 60, "the session lost")
            took = time.monotonic() - killed
            time.sleep(1)  # nothing more comes
            assert "activity" not in roster(url)["builder"]
    print(f"\n[{'redis' if store_url else 'memory'}] session lost told {took:.2f} s after SIGKILL")
    assert took >= SESSION_GRACE * 0.9  # after the grace, not at the subscription's end
    [request] = hook.requests
    sent = request.json()
    assert sent["title"] == "builder: session lost"
    assert sent["type"] == "failure"
    said_since = time.strftime("%H:%M:%S UTC", time.gmtime(since / 1000))
    assert f"while working (since {said_since}, " in sent["message"], sent["message"]
    assert sent["message"].startswith("builder's session was lost at ")
    assert notifier.stats[0].sent == 1
