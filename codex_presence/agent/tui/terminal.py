"""The terminal an interactive child draws on: saved before it starts, put back if it dies.

A full-screen TUI puts the terminal in raw mode and turns on modes of its own (bracketed
paste, focus reports, the keyboard protocol's flags), and undoes them when it exits. The
codex TUI undoes nothing when a signal ends it (measured: SIGINT, SIGTERM and SIGHUP all
leave the terminal raw, without echo). So when such a child was ended by a signal — ours,
forwarded, or sent by us because its app-server died — :meth:`SavedTerminal.restore` puts
back the terminal attributes saved before it started and turns those modes off, as the
child would have on a normal exit. Linux and other POSIX systems; a no-op without a tty.
"""

from __future__ import annotations

import os
from contextlib import suppress

TYPE_CHECKING = False  # neither typing nor logging before the TUI runs (:mod:`.launch`)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SavedTerminal"]

_MODES_OFF = (
    b"\x1b[<u"  # pop the keyboard protocol's flags
    b"\x1b[>4;0m"  # modifyOtherKeys off
    b"\x1b[?2004l"  # bracketed paste off
    b"\x1b[?1004l"  # focus reports off
    b"\x1b[?25h"  # show the cursor
    # The main screen again, the cursor where it was when the TUI took the alternate one
    # (measured: codex 0.169.0 and 0.171.0 draw on it, and leave it on a normal exit only).
    # Without this, our parting words were written over the TUI's last frame, from the
    # composer's line down, and the person's shell went on in the alternate screen.
    b"\x1b[?1049l"
    b"\r\n"
)
"""What the codex TUI writes on a normal exit to undo its modes (each harmless when off):
what we write next starts on a clean line of the main screen, as its own parting words do."""


class SavedTerminal:
    """The attributes of the terminal on ``fd`` (our stdin), to put back later."""

    def __init__(self, fd: int, attributes: list[Any], output: int | None) -> None:
        self.fd = fd
        self.attributes = attributes
        self.output = output

    @classmethod
    def save(cls, fd: int = 0, output: int = 1) -> SavedTerminal | None:
        """The terminal on ``fd`` now, or None if ``fd`` is not a terminal. ``output`` is
        where the modes are turned off, if it is a terminal too."""
        import termios

        try:
            attributes = termios.tcgetattr(fd)
        except (OSError, termios.error):
            return None
        return cls(fd, attributes, output if os.isatty(output) else None)

    def restore(self) -> None:
        """Put the saved attributes back and turn the child's modes off. Best effort."""
        import signal
        import termios

        # From a background process group, tcsetattr would stop us (SIGTTOU).
        previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.attributes)
        except (OSError, termios.error) as exc:
            import logging

            logging.getLogger("codex_presence.terminal").debug(
                "cannot restore the terminal: %s", exc
            )
        finally:
            signal.signal(signal.SIGTTOU, previous)
        if self.output is not None:
            with suppress(OSError):
                os.write(self.output, _MODES_OFF)
