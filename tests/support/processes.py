"""Whether a process is still running, as the tests that kill trees ask it."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, not yet reaped) is not alive. A process that
    dies while its ``/proc`` entry is read is not either (the read fails with ESRCH, not
    ENOENT)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
