"""How the benchmarks run Python commands: as an installation would, bytecode cached."""

from __future__ import annotations

import os
from pathlib import Path


def installed_like(environ: dict[str, str] | os._Environ[str], cache: Path) -> dict[str, str]:
    """``environ`` for a Python command whose bytecode is cached, as pip's compiled install
    has it (this machine sets ``PYTHONDONTWRITEBYTECODE``, which would make every start
    compile wrap's modules anew), in ``cache``: nothing is written into the checkouts."""
    env = {k: v for k, v in environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env
