"""``GET /metrics``: the broker in Prometheus's text format, through prometheus-client, for
the tools operators already use (Prometheus scrapes, Grafana shows).

One :class:`BrokerMetrics` per broker, with its own registry (several brokers may run in
one process: the tests'):

* read from the broker at each scrape (a collector: nothing to keep current) —
  ``codex_presence_members{state}`` (members by shown state: working, blocked, idle,
  offline), ``codex_presence_member_state{member,state}`` (1 for each member's state),
  ``codex_presence_member_blocked_seconds{member}`` (how long each blocked member has
  waited so far), ``codex_presence_connected_members``, ``codex_presence_streams`` (open
  on this broker), ``codex_presence_notifications_total{outcome="sent"|"failed"}`` (the
  notifier's own counts: a notice delivered, or given up after its attempts), and with a
  shared store ``codex_presence_store_up``;
* counted as it happens — ``codex_presence_reports_total{outcome}`` (each ``POST
  /presence/activity`` by its answer: recorded, refused, unauthorized, too_many_sessions,
  unavailable; :func:`count_reports` wraps the app), ``codex_presence_store_outages_total``
  (the shared store went away), ``codex_presence_store_round_trip_seconds`` (a ``PING`` at
  each scrape), and ``codex_presence_block_seconds`` (a histogram: how long each wait
  lasted until someone answered; with Redis, counted by the broker that wrote the answer
  to the history, so that the team's brokers summed count each wait once).

Labels hold member names and fixed words, never a token, a URL or a session id. Scraping
takes a member's token (``Authorization: Bearer``, or the page's sign-in), as the roster:
give Prometheus a member of its own in the team file, with no permissions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codex_presence._wire import ACTIVITY_PATH, METRICS_PATH
from codex_presence.broker.auth import Authentication
from codex_presence.broker.history import HISTORY_STATES, shown_state
from codex_presence.broker.http import error

if TYPE_CHECKING:
    from codex_presence.broker.notify.notifier import Notifier
    from codex_presence.broker.state import Broker

__all__ = ["BLOCK_BUCKETS", "BrokerMetrics", "count_reports", "metrics_routes"]

BLOCK_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
"""Seconds: from a glance at the screen to a wait over lunch."""
_OUTCOMES = {204: "recorded", 401: "unauthorized", 429: "too_many_sessions", 503: "unavailable"}


class BrokerMetrics:
    """The metrics of one broker; ``notifier`` (if any) says what it sent."""

    def __init__(self, notifier: Notifier | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.notifier = notifier
        self.broker: Broker | None = None
        self.reports = Counter(
            "codex_presence_reports",
            "Activity reports (POST /presence/activity) by their answer",
            ["outcome"],
            registry=self.registry,
        )
        self.outages = Counter(
            "codex_presence_store_outages",
            "Times the shared store (Redis) became unreachable",
            registry=self.registry,
        )
        self.blocks = Histogram(
            "codex_presence_block_seconds",
            "How long a member waited, blocked, until someone answered",
            buckets=BLOCK_BUCKETS,
            registry=self.registry,
        )
        self.round_trip: float | None = None
        self.registry.register(_Scraped(self))

    def block_answered(self, seconds: float) -> None:
        """A wait of ``seconds`` was answered (the history's ``answered``)."""
        self.blocks.observe(max(0.0, seconds))

    def report(self, status: int) -> None:
        self.reports.labels(_OUTCOMES.get(status, "refused")).inc()

    async def measure_store(self) -> None:
        """The shared store's round trip (a PING), and whether it went away since the last
        look (the broker's ``stale``)."""
        broker = self.broker
        if broker is None or not broker.store.shared:
            return
        link = getattr(broker.store, "link", None)
        self.round_trip = None
        if link is not None and link.up:
            started = time.perf_counter()
            try:
                await link.client.ping()
            except Exception:  # down: the scrape says so by the round trip missing
                return
            self.round_trip = time.perf_counter() - started

    def watch(self, link: Any) -> None:
        """Count the outages of ``link`` (a :class:`~.redis.link.RedisLink`): it tells
        this object as one of its listeners."""
        link.add_listener(_OutageCounter(self.outages))

    def exposition(self) -> bytes:
        return _generate(self.registry)


class _Scraped(Collector):
    """What is read from the broker at each scrape."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # read at each scrape: nothing to check for clashes

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        broker = metrics.broker
        if broker is None:
            return
        now_ms = int(time.time() * 1000)
        by_state = dict.fromkeys(HISTORY_STATES, 0)
        member_state = GaugeMetricFamily(
            "codex_presence_member_state",
            "1 for each member's current state",
            labels=["member", "state"],
        )
        waited = GaugeMetricFamily(
            "codex_presence_member_blocked_seconds",
            "How long each blocked member has waited so far (0: not blocked)",
            labels=["member"],
        )
        connected = 0
        for member in broker.team.members:
            presence = broker.presence(member.name)
            state = shown_state(presence)
            by_state[state] += 1
            connected += presence["connected"] > 0
            member_state.add_metric([member.name, state], 1)
            since = presence.get("activitySince")
            wait = now_ms - since if state == "blocked" and since is not None else 0
            waited.add_metric([member.name], max(0, wait) / 1000)
        members = GaugeMetricFamily(
            "codex_presence_members", "Members by their current state", labels=["state"]
        )
        for state, count in by_state.items():
            members.add_metric([state], count)
        yield members
        yield member_state
        yield waited
        yield GaugeMetricFamily(
            "codex_presence_connected_members", "Members with a stream open", value=connected
        )
        yield GaugeMetricFamily(
            "codex_presence_streams", "Streams open on this broker", value=broker.streams
        )
        notified = CounterMetricFamily(
            "codex_presence_notifications",
            "Notifications delivered (sent) or given up (failed)",
            labels=["outcome"],
        )
        stats = [] if metrics.notifier is None else metrics.notifier.stats
        notified.add_metric(["sent"], sum(s.sent for s in stats))
        notified.add_metric(["failed"], sum(s.given_up for s in stats))
        yield notified
        if broker.store.shared:
            yield GaugeMetricFamily(
                "codex_presence_store_up",
                "1 while the shared store (Redis) is reachable",
                value=int(broker.stale is None),
            )
            if metrics.round_trip is not None:
                yield GaugeMetricFamily(
                    "codex_presence_store_round_trip_seconds",
                    "A PING to the shared store, at this scrape",
                    value=metrics.round_trip,
                )


class _OutageCounter:
    """A listener of the Redis link that counts its outages (each once, however many
    causes it goes through)."""

    def __init__(self, outages: Counter) -> None:
        self._outages = outages
        self._up = True

    async def resync(self) -> None:
        pass

    async def keep(self) -> None:
        await anyio.sleep_forever()

    def on_event(self, event: Any) -> None:  # a list or an object, by version: unused
        pass

    def on_down(self, reason: str) -> None:
        if self._up:
            self._outages.inc()
        self._up = False

    def on_back(self) -> None:
        self._up = True

    async def leave(self) -> None:
        pass


def count_reports(app: ASGIApp, metrics: BrokerMetrics) -> ASGIApp:
    """``app``, counting each activity report by its answer in ``metrics``."""

    async def counted(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != ACTIVITY_PATH:
            await app(scope, receive, send)
            return

        async def send_counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                metrics.report(message["status"])
            await send(message)

        await app(scope, receive, send_counting)

    return counted


def metrics_routes(broker: Broker, metrics: BrokerMetrics) -> list[BaseRoute]:
    """``GET /metrics``: 200 in Prometheus's text format with a member's token (bearer or
    the page's sign-in), 401 without."""
    metrics.broker = broker

    async def scrape(request: Request) -> Response:
        auth: Authentication = request.app.state.auth
        if await auth.member(request) is None:
            return error(401, auth.unauthorized_reason, {"www-authenticate": "Bearer"})
        await metrics.measure_store()
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return [Route(METRICS_PATH, scrape, methods=["GET"])]
