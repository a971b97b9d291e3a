"""The roster page's history strip (history-strip.js) in real headless Chromium against a
real broker: a member's wait shows as a stretch of "needs input" in their strip, and the
words beside it say how long. The broker's wall clock is set back (ShiftedClock) so that
the reports were made minutes ago, without waiting minutes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from codex_presence.broker.history import MemoryRecorder
from codex_presence.broker.history_http import history_routes
from codex_presence.broker.web import WebRoster
from tests.support.broker_harness import running_broker
from tests.test_web import (  # noqa: F401  (browser: the module's Chromium fixture)
    TEAM,
    ShiftedClock,
    Tab,
    Web,
    browser,
    checked_tabs,
    signed_in,
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


@pytest.fixture
def history_tabs(browser: Browser, history_web: Web) -> Iterator[list[Tab]]:  # noqa: F811
    yield from checked_tabs(history_web)


@pytest.mark.browser
def test_the_strip_shows_a_blocked_stretch_and_todays_waits(
    browser: Browser,  # noqa: F811
    history_web: Web,
    history_tabs: list[Tab],
    wall: ShiftedClock,
) -> None:
    """builder was blocked from 10 to 5 minutes ago, then worked: the strip has one
    stretch of needs input, one of working, and says "needs input 5 min over 1 wait"."""
    web = history_web
    wall.offset = -600
    web.report("builder", "blocked")
    wall.offset = -300
    web.report("builder", "working")
    wall.offset = 0
    tab = signed_in(browser, web, history_tabs, "alice")
    page = tab.page
    section = page.locator("#history")
    expect(section).to_be_visible()
    builder = section.locator('li.history-row[data-name="builder"]')
    expect(builder.locator('.history-piece[data-state="blocked"]')).to_have_count(1)
    expect(builder.locator('.history-piece[data-state="working"]')).to_have_count(1)
    expect(builder.locator(".history-totals")).to_contain_text(
        "needs input 5 min over 1 wait, longest 5 min"
    )
    blocked = builder.locator('.history-piece[data-state="blocked"]').bounding_box()
    working = builder.locator('.history-piece[data-state="working"]').bounding_box()
    assert blocked is not None and working is not None
    assert blocked["width"] > 0
    assert blocked["x"] < working["x"]  # the wait came first
    alice = section.locator('li.history-row[data-name="alice"]')
    expect(alice.locator(".history-totals")).to_contain_text("never needed input")
