"""The broker's configuration, checked in one place, and the one factory that builds a
broker from it: :class:`BrokerConfig` and :func:`build_broker`.

The command (``codex-presence broker``), the demo, the test harness and the benchmarks
all build their broker here, so that a broker is assembled one way: the rules
(:class:`~.state.Broker`) over a store, the HTTP app in front (:func:`~.app.create_app`),
the web roster's routes and sign-in, the notifier's ``GET /notify``. A value out of range
is a :class:`ConfigError` naming the setting, before anything starts (the command says it
as a usage error, with the option's spelling). Like httpx's ``_config.py``: plain values
in, checked once, then trusted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from codex_presence._wire import DEFAULT_TTL, KEEPALIVE, SESSION_GRACE
from codex_presence.broker.app import Described, create_app
from codex_presence.broker.auth import Authenticator
from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.state import FANOUT_INTERVAL, ActivityWatcher, Broker
from codex_presence.broker.store import Store
from codex_presence.broker.team import Team

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.routing import BaseRoute

    from codex_presence.broker.web import WebRoster

__all__ = ["BrokerConfig", "BuiltBroker", "ConfigError", "build_broker"]


class ConfigError(ValueError):
    """A setting out of range: ``setting`` (the field's name) and why."""

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"{setting} {reason}")
        self.setting = setting
        self.reason = reason

    def spelled(self, spell: Callable[[str], str]) -> str:
        """The message with the setting named as ``spell`` names it (the command:
        ``--activity-ttl`` for ``activity_ttl``)."""
        return f"{spell(self.setting)} {self.reason}"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """What a broker is configured with, checked when made (:class:`ConfigError`)."""

    activity_ttl: float = DEFAULT_TTL
    """Seconds a working or blocked report holds without a heartbeat."""
    keepalive: float = KEEPALIVE
    """Seconds between keep-alive comments on a quiet stream."""
    session_grace: float = SESSION_GRACE
    """Seconds a session's state outlives the last subscription bound to it."""
    fanout_interval: float = FANOUT_INTERVAL
    """The least pause between two batches of the fan-out."""
    limits: BrokerLimits = field(default_factory=BrokerLimits)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.activity_ttl) and self.activity_ttl > 0):
            raise ConfigError("activity_ttl", f"must be positive (got {self.activity_ttl:g})")
        if not (math.isfinite(self.keepalive) and self.keepalive > 0):
            raise ConfigError("keepalive", "must be positive")
        if not (math.isfinite(self.session_grace) and self.session_grace >= 0):
            raise ConfigError("session_grace", f"must be 0 or more (got {self.session_grace:g})")
        if not (math.isfinite(self.fanout_interval) and self.fanout_interval >= 0):
            raise ConfigError("fanout_interval", "must be 0 or more")
        if self.limits.max_connections < 1:
            raise ConfigError("max_connections", "must be at least 1")


@dataclass(frozen=True, slots=True)
class BuiltBroker:
    """A broker, its app and its limits (what :class:`~.server.BrokerServer` serves)."""

    broker: Broker
    app: Starlette
    limits: BrokerLimits


def build_broker(
    team: Team,
    config: BrokerConfig | None = None,
    *,
    store: Store | None = None,
    web: WebRoster | None = None,
    notifier: ActivityWatcher | None = None,
    authenticators: Sequence[Authenticator] = (),
    allowed_hosts: frozenset[str] | None = None,
    extra_routes: Callable[[Broker], Sequence[BaseRoute]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> BuiltBroker:
    """The broker of ``team`` as ``config`` says, its state in ``store`` (None: in
    memory, with ``clock``), with the web roster ``web`` (its page, its sign-in),
    ``notifier`` (watching, and described by ``GET /notify``), more ``authenticators``,
    the ``allowed_hosts`` of :func:`~.hosts.allowed_hosts` (None: any), and
    ``extra_routes`` made for the broker (tests)."""
    config = config if config is not None else BrokerConfig()
    broker = Broker(
        team=team,
        store=store,
        activity_ttl=config.activity_ttl,
        clock=clock,
        wall_clock=wall_clock,
        fanout_interval=config.fanout_interval,
        keepalive=config.keepalive,
        session_grace=config.session_grace,
        watcher=notifier,
    )
    routes: list[BaseRoute] = []
    if web is not None:
        authenticators = [*authenticators, web.authenticate]
        routes += web.routes(broker)
    if extra_routes is not None:
        routes += extra_routes(broker)
    described: Described | None = notifier if isinstance(notifier, Described) else None
    app = create_app(
        broker,
        limits=config.limits,
        routes=routes,
        allowed_hosts=allowed_hosts,
        authenticators=authenticators,
        notifier=described,
    )
    return BuiltBroker(broker, app, config.limits)
