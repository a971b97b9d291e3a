"""The Gemini CLI feeder, sans-I/O: hook events and chat-file lines in, activity transitions
out (:mod:`.mapping`, with the vocabulary of :mod:`.protocol`)."""
