"""``codex-presence codex``: the codex TUI and its app-server, with the websocket relay
(:mod:`.ws_relay`) between them, run by :mod:`.session`; :mod:`.terminal` puts the terminal
back when a signal ends the TUI."""
