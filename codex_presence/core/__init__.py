"""The sans-I/O core: codex traffic in, idle/working/blocked out, and when to tell the broker.

Knows no pipes, sockets or clocks (the import contracts forbid every I/O library here):
the activity signal, the codex vocabulary and mapping, the relay's byte-level pre-filter,
the recording format, the replayed timeline, the reporter's policy and its backoff.
"""
