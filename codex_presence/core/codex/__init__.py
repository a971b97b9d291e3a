"""The codex feeder, sans-I/O: app-server traffic in, activity transitions out.

The path of a message: :mod:`.prefilter` frames the relay's chunks and keeps the few lines
that can matter (``wrap``), :mod:`.websocket` reads the TUI's frames (``codex-presence
codex``), and :mod:`.mapping` turns each message into handles on the activity signal, using
the vocabulary of :mod:`.protocol` and the memory of :mod:`.turns`. :mod:`.schema` checks a
codex version's JSON schema against that vocabulary (``doctor``).

Empty on purpose: ``wrap`` loads the pre-filter before the mapping, so importing this
package must load nothing.
"""
