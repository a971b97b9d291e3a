"""Run a command and copy its stdout both to ours and to a file: an independent witness of
what the wrapped child wrote, to compare with what wrap's client received.

``python tests/support/tee_child.py FILE CMD [ARGS...]``; stdin and stderr are the command's own,
and our exit status is the command's (128+N if signal N killed it). Our pid is printed to
stderr first as ``tee_child pid=<pid> child=<pid>`` so a test can signal the real child.
"""

from __future__ import annotations

import subprocess
import sys


def main() -> int:
    path, command = sys.argv[1], sys.argv[2:]
    with open(path, "wb") as copy:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        sys.stderr.write(f"tee_child child={proc.pid}\n")
        sys.stderr.flush()
        assert proc.stdout is not None
        out = sys.stdout.buffer
        while chunk := proc.stdout.read1(1 << 16):
            copy.write(chunk)
            copy.flush()
            try:
                out.write(chunk)
                out.flush()
            except BrokenPipeError:
                break
        code = proc.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
