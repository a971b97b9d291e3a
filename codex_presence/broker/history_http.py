"""``GET /history``: a member's timeline over HTTP, in front of a
:class:`~codex_presence.broker.history.HistoryRecorder`.

``GET /history?member=NAME[&since=MS]``
    A member's token (bearer, or the page's sign-in), as the roster: any member may read
    any member's history. ``{"member", "intervals": [{"state", "since", "until"}...],
    "totals": {"working": s, "blocked": s, "idle": s, "offline": s}, "waits": {"count",
    "longest", "each": [s...]}}`` (see :func:`~codex_presence.broker.history.summarize`):
    times in unix ms, lengths in seconds. ``since`` (unix ms) defaults to the start of the
    window the broker keeps (``--history-hours``). 401 without a member; 400 without
    ``member``, or with a ``since`` that is not unix ms (the reason says which); 404 for a
    member not in the team; 503 when the shared store cannot be read; 404 too when the
    broker keeps no history (``--history-hours 0``), saying so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from codex_presence._wire import HISTORY_PATH, printable
from codex_presence.broker.auth import Authentication
from codex_presence.broker.history import (
    HistoryLimits,
    HistoryRecorder,
    MemoryRecorder,
    parse_since,
    summarize,
)
from codex_presence.broker.http import error, json_response
from codex_presence.broker.state import Broker

if TYPE_CHECKING:
    from codex_presence.broker.redis.link import RedisLink

__all__ = ["history_recorder", "history_routes"]


def history_recorder(
    link: RedisLink | None, names: Sequence[str], hours: float, answered: Callable[[float], None]
) -> HistoryRecorder | None:
    """The recorder: the team's Redis stream through ``link`` (the shared store's), or in
    memory (``link`` None); keeping ``hours`` (0: none, None returned); ``answered`` is told
    each answered wait's seconds. Raises :class:`ValueError` for hours out of range."""
    if hours == 0:
        return None
    limits = HistoryLimits.for_hours(hours)
    if link is not None:
        from codex_presence.broker.redis.history import RedisHistory

        return RedisHistory(link, names=names, limits=limits, answered=answered)
    return MemoryRecorder(limits, answered)


def history_routes(
    broker: Broker,
    recorder: HistoryRecorder | None,
    wall_clock: Callable[[], float] = time.time,
) -> list[BaseRoute]:
    """The ``GET /history`` route of ``broker``, reading ``recorder`` (None: kept off)."""

    async def history(request: Request) -> Response:
        auth: Authentication = request.app.state.auth
        if await auth.member(request) is None:
            return error(401, auth.unauthorized_reason, {"www-authenticate": "Bearer"})
        members = request.query_params.getlist("member")
        if len(members) != 1 or not members[0]:
            return error(400, "give one ?member=NAME")
        name = members[0]
        try:
            since = parse_since(request.query_params.getlist("since"))
        except ValueError as exc:
            return error(400, str(exc))
        if broker.team.member(name) is None:  # the team of now: the file may have changed
            return error(404, f"no member {printable(name)} in team {printable(broker.team.name)}")
        if recorder is None:
            return error(404, "this broker keeps no history (--history-hours 0)")
        now_ms = int(wall_clock() * 1000)
        window_start = now_ms - recorder.limits.keep_ms
        start = window_start if since is None else max(since, window_start)
        transitions = await recorder.read(name, now_ms)  # StoreUnavailable: 503
        return json_response(200, summarize(name, transitions, start, now_ms))

    return [Route(HISTORY_PATH, history, methods=["GET"])]
