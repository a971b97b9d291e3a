"""The roster page's history strip (history-strip.js) in real headless Chromium against a
real broker: a member's wait shows as a stretch of "needs input" in their strip, and the
words beside it say how long. The broker's wall clock is set back (ShiftedClock) so that
the reports were made minutes ago, without waiting minutes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from codex_presence.broker.history import MemoryRecorder
from codex_presence.broker.history_http import history_routes
from codex_presence.broker.web import WebRoster
from tests.support.broker_harness import running_broker, token_of
from tests.support.waiting import eventually
from tests.test_web import (  # noqa: F401  (browser: the module's Chromium fixture)
    SCREENSHOTS,
    TEAM,
    ShiftedClock,
    Tab,
    Web,
    browser,
    checked_tabs,
)


@pytest.fixture
def wall() -> ShiftedClock:
    return ShiftedClock()


@pytest.fixture
def history_web(wall: ShiftedClock) -> Iterator[Web]:
    """A broker with the web roster and GET /history, dated by ``wall``."""
    recorder = MemoryRecorder()
    roster = WebRoster(team=TEAM)
    with running_broker(
        team=TEAM,
        keepalive=30,
        web=roster,
        wall_clock=wall,
        history=recorder,
        extra_routes=lambda broker: history_routes(broker, recorder, wall),
    ) as broker:
        yield Web(broker, roster)


def recorded(web: Web, name: str) -> list[Any]:
    """``name``'s transitions as the broker's history holds them."""
    history = web.broker.broker.history
    assert isinstance(history, MemoryRecorder)
    return history.history.transitions(name)


@pytest.fixture
def history_tabs(browser: Browser, history_web: Web) -> Iterator[list[Tab]]:  # noqa: F811
    yield from checked_tabs(history_web)


def signed_in_at_noon(chromium: Browser, web: Web, tabs: list[Tab], name: str) -> Page:
    """``name`` signed in, in a browser whose time zone makes it about noon: "today" (since
    local midnight) then holds the last 12 hours, whenever the test runs."""
    hours_ahead = 12 - time.gmtime().tm_hour  # -11 to 12: an Etc/GMT zone exists for each
    zone = "Etc/GMT" if hours_ahead == 0 else f"Etc/GMT{-hours_ahead:+d}"  # the sign is POSIX's
    context = chromium.new_context(viewport={"width": 1100, "height": 720}, timezone_id=zone)
    page = context.new_page()
    tab = Tab(context, page)
    context.on("request", lambda request: tab.requests.append(request.url))
    page.set_default_timeout(10_000)
    tabs.append(tab)
    page.goto(web.url + "/")
    expect(page.locator("#signin")).to_be_visible()
    page.fill("#token", token_of(name))
    page.click("#signin-submit")
    expect(page.locator("#me")).to_have_text(name)
    assert page.evaluate("new Date().getHours()") >= 11
    return page


@pytest.mark.browser
def test_the_strip_shows_a_blocked_stretch_and_todays_waits(
    browser: Browser,  # noqa: F811
    history_web: Web,
    history_tabs: list[Tab],
    wall: ShiftedClock,
) -> None:
    """builder worked, was blocked from 10 to 5 minutes ago, then worked again: the strip
    has one stretch of needs input between two of working, and says "needs input 5 min over
    1 wait"; scout's 25-minute wait shows beside theirs."""
    web = history_web
    for minutes_ago, name, state in (
        (300, "scout", "working"),
        (200, "builder", "working"),
        (170, "scout", "blocked"),
        (145, "scout", "working"),
        (90, "scout", "idle"),  # scout holds no stream: offline
        (10, "builder", "blocked"),
        (5, "builder", "working"),
    ):
        wall.offset = -60 * minutes_ago
        kept = len(recorded(web, name))
        web.report(name, state)
        eventually(lambda: web.roster_json()[name].get("activity", "idle") == state)  # noqa: B023
        # The history dates a transition when the fan-out publishes it, by the broker's
        # clock: the clock moves on only once it did (CI: a blocked published after the
        # clock had moved to its end drew no stretch at all).
        eventually(
            lambda: len(recorded(web, name)) > kept,  # noqa: B023
            what=f"{name}'s {state} in the history",
        )
    wall.offset = 0
    page = signed_in_at_noon(browser, web, history_tabs, "alice")
    section = page.locator("#history")
    expect(section).to_be_visible()
    builder = section.locator('li.history-row[data-name="builder"]')
    expect(builder.locator('.history-piece[data-state="blocked"]')).to_have_count(1)
    expect(builder.locator('.history-piece[data-state="working"]')).to_have_count(2)
    expect(builder.locator(".history-totals")).to_contain_text(
        "needs input 5 min over 1 wait, longest 5 min"
    )
    blocked = builder.locator('.history-piece[data-state="blocked"]').bounding_box()
    working = builder.locator('.history-piece[data-state="working"]').last.bounding_box()
    assert blocked is not None and working is not None
    assert blocked["width"] > 0
    assert blocked["x"] < working["x"]  # the wait came before the last stretch of work
    scout = section.locator('li.history-row[data-name="scout"]')
    expect(scout.locator(".history-totals")).to_contain_text(
        "needs input 25 min over 1 wait, longest 25 min"
    )
    expect(scout.locator('.history-piece[data-state="offline"]')).to_have_count(1)
    alice = section.locator('li.history-row[data-name="alice"]')
    expect(alice.locator(".history-totals")).to_contain_text("never needed input")
    if SCREENSHOTS:
        section.screenshot(path=str(Path(SCREENSHOTS) / "roster-history.png"))
