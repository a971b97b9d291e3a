"""``codex-presence claude``: one Claude Code process, its hooks (served by
:mod:`codex_presence.agent.hooks.hook_server`) and its own files (:mod:`.files`), run by
:mod:`.session`."""
