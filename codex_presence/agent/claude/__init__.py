"""``codex-presence claude``: one Claude Code process, its HTTP hooks (:mod:`.hook_server`)
and its own files (:mod:`.files`), run by :mod:`.session`."""
