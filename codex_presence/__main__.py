"""``python -m codex_presence`` is the ``codex-presence`` command."""

import sys

from ._cli import main

sys.exit(main())
