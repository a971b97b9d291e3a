"""A child with a tree below it, as codex has one: ``python bench/_process_tree.py [wait]``.

It starts three sleepers: one in its own process group, one in a session of its own (as codex
starts its commands), and one in a session of its own whose parent exits at once (an orphan,
re-parented away from it). It prints its own pid and theirs on one line, then exits, or with
``wait`` sleeps too. For the benchmark of the child's death with wrap (``bench/relay.py``)
and the tests of it (``tests/test_relay.py``); it lives here, standard library only, so that
the benchmark runs without the test dependencies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def main() -> None:
    kids = [
        subprocess.Popen(SLEEPER),
        subprocess.Popen(SLEEPER, start_new_session=True),
    ]
    spawn_and_leave = (
        "import subprocess, sys"
        f"; p = subprocess.Popen({SLEEPER!r}, start_new_session=True); print(p.pid, flush=True)"
    )
    middle = subprocess.Popen([sys.executable, "-c", spawn_and_leave], stdout=subprocess.PIPE)
    assert middle.stdout is not None
    orphan = int(middle.stdout.readline())
    middle.wait()
    pids = (os.getpid(), *(kid.pid for kid in kids), orphan)
    sys.stdout.write(" ".join(str(pid) for pid in pids) + "\n")
    sys.stdout.flush()
    if sys.argv[1:] == ["wait"]:
        time.sleep(300)


if __name__ == "__main__":
    main()
