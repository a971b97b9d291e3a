"""The Claude Code feeder, sans-I/O: hooks, transcript entries and session status in,
activity transitions out (:mod:`.mapping`, with the vocabulary of :mod:`.protocol`)."""
