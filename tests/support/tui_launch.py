"""``codex-presence codex``'s launch (:func:`~codex_presence.agent.tui.launch.launch_tui`) run
in the test's own process, and everything it leaves undone without a session put back.

* :func:`signals_kept`: the launch makes the forwarded signals the TUI's; ours come back
  after the block.
* :func:`launched`: the launch, and after the block its children killed and released, its
  socket and pipe closed, its private directory removed, our signals back.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from codex_presence.agent.signals import FORWARDED_SIGNALS
from codex_presence.agent.tui import launch as tui_launch
from codex_presence.agent.tui.launch import TuiLaunch
from tests.support.waiting import WAIT

__all__ = ["launched", "signals_kept"]


@contextmanager
def signals_kept() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@contextmanager
def launched(command: Sequence[str], env: Mapping[str, str]) -> Iterator[TuiLaunch]:
    with signals_kept():
        launch = tui_launch.launch_tui(command, env)
        try:
            yield launch
        finally:
            for child in (launch.tui, launch.app_server):
                if child is not None:
                    child.kill()
                    child.wait(WAIT)
                    child.release()
            if launch.listener is not None:
                launch.listener.close()
            if launch.output_fd >= 0:
                os.close(launch.output_fd)
            if launch.directory is not None:
                shutil.rmtree(launch.directory, ignore_errors=True)
