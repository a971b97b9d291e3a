"""What every hook-driven client shares, sans-I/O: the poster our command hooks run
(:mod:`.poster`) and the order of their async deliveries (:mod:`.hook_order`).

A client whose state comes from hooks (a command it runs per event, with the event's JSON
on stdin) needs both, whichever client it is; its own vocabulary stays with its feeder.
Imports no client (the import contracts say so).
"""
