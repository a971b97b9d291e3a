"""When claude's start counts as done (issue 34): its main thread quiet over a window, by
its scheduler statistics (time running plus time waiting for a CPU), sample by sample."""

from __future__ import annotations

from codex_presence.agent.claude.launch import QUIET_FOR, QUIET_SHARE, QuietWindow

MS = 1_000_000
"""ns in a ms."""


def _fed(
    window: QuietWindow, samples: list[tuple[float, int]], runnable: frozenset[int] = frozenset()
) -> list[bool]:
    """What ``window`` says at each of ``samples`` (when, busy ns), the thread seen runnable
    at those of the indices in ``runnable``."""
    return [window.add(when, i in runnable, busy) for i, (when, busy) in enumerate(samples)]


def test_a_thread_runnable_all_the_time_is_never_quiet() -> None:
    """Through claude's start its main thread runs or waits for a CPU throughout."""
    samples = [(i * 0.01, i * 10 * MS) for i in range(100)]
    assert not any(_fed(QuietWindow(), samples))


def test_a_thread_that_sleeps_is_quiet_once_the_window_has_passed() -> None:
    """At its prompt it sleeps: quiet, but only once a whole window is seen."""
    busy = 400 * MS
    samples = [(1.0 + i * 0.01, busy) for i in range(10)]
    said = _fed(QuietWindow(for_seconds=0.05), samples)
    assert said[:5] == [False] * 5  # 0.00-0.04 s seen: not yet a window
    assert all(said[5:])


def test_quiet_follows_the_last_window_not_the_whole_past() -> None:
    """Busy, then sleeping: quiet once less than the share of the last window was busy,
    however busy it was before (times in 64ths of a second: exact)."""
    step = 1 / 64
    window = QuietWindow(for_seconds=4 * step, share=0.5)
    busy = [(i * step, int(i * step * 1e9)) for i in range(32)]  # busy throughout
    last = busy[-1][1]
    idle = [((32 + i) * step, last) for i in range(8)]
    said = _fed(window, busy + idle)
    # It last ran up to step 31: the window ending at 33 held 2 busy steps of 4 (not less
    # than half), the one ending at 34 one.
    assert said.index(True) == 34
    assert all(said[34:])


def test_a_timer_s_wake_up_is_still_quiet_but_half_the_window_is_not() -> None:
    window = 0.05
    share = QUIET_SHARE * window * 1e9
    short = [(0.0, 0), (0.06, int(share * 0.5))]
    long = [(0.0, 0), (0.06, int(share * 1.3))]  # (the window is 0.05 s: 0.06 s judged)
    assert _fed(QuietWindow(for_seconds=window), short)[-1]
    assert not _fed(QuietWindow(for_seconds=window), long)[-1]


def test_sparse_samples_count_over_their_whole_span() -> None:
    """A late sample (we were descheduled) judges the span since the one before it."""
    window = QuietWindow()
    assert not window.add(0.0, False, 0)
    assert window.add(QUIET_FOR * 4, False, int(QUIET_FOR * 4 * 1e9 * QUIET_SHARE * 0.9))


def test_a_thread_seen_runnable_starts_the_window_again() -> None:
    """The kernel counts a wait for a CPU only once the thread gets one: a thread queued
    behind another process looks idle by its statistics, but its state says runnable."""
    step = 1 / 64
    samples = [(i * step, 0) for i in range(16)]  # by the statistics: idle throughout
    said = _fed(QuietWindow(for_seconds=4 * step), samples, runnable=frozenset({6}))
    assert said[4:6] == [True, True]
    assert said[6:10] == [False] * 4  # seen runnable at 6: a whole window from there
    assert all(said[10:])
