"""What every hook-driven shell shares: the loopback hook server (:mod:`.hook_server`), the
check that a connection to it is the user's own (:mod:`.peer_uid`), and the wake-up when a
client writes its files (:mod:`.watch`).

A runner whose client reports through hooks starts the server, registers our poster
(:mod:`codex_presence.core.hooks.poster`) as the client's hook command, and feeds what
comes in to its mapping. Imports no shell (the import contracts say so).
"""
