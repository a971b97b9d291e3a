"""What the tests share: harnesses for a broker, a wrap and a real codex, fakes for the
model and the app-server, and the waiting helpers (one ``eventually()``, one way to own a
loopback port)."""
