"""The sans-I/O core: an agent's traffic in, idle/working/blocked out, and when to tell the
broker.

Knows no pipes, sockets or clocks (the import contracts forbid every I/O library here). The
feeders, one per agent, each behind the one interface of :mod:`.feeder` and listed in the
registry (:mod:`.clients`), open and close handles on the activity signal
(:mod:`.activity`); the reporter's policy (:mod:`.report_policy`, with :mod:`.backoff`)
says when to tell the broker. Beside them: the recording format
(:mod:`.recording`), the replayed timeline (:mod:`.timeline`) and its words (:mod:`.wording`),
the one adapter to jsonrpcserver (:mod:`.router`), and what every hook-driven client
shares (:mod:`.hooks`).
"""
