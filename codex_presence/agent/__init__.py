"""The runner's I/O shells: an agent's native instrumentation in, transitions out to the
member's broker client (:mod:`codex_presence.client.link`).

One shell per agent — :mod:`.wrap` (``codex app-server`` over stdio), :mod:`.tui` (the codex
TUI over its socket), :mod:`.claude` (Claude Code's hooks) — on one skeleton shared here:
:mod:`.session` (observers, companions, the final close, signals, exit statuses),
:mod:`.analysis` (the guard a mapping runs in), :mod:`.child` and :mod:`.watchdog` (the
child process and its whole tree), :mod:`.recorder` (``--record``).
"""
