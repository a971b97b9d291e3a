"""``codex-presence gemini``: one Gemini CLI process, its hooks (served by
:mod:`codex_presence.agent.hooks.hook_server`, registered by :mod:`.settings`) and its chat
file (:mod:`.chat`), run by :mod:`.session`."""
