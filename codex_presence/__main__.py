"""``python -m codex_presence`` is the ``codex-presence`` command."""

import sys

from codex_presence.cli.main import main

sys.exit(main())
