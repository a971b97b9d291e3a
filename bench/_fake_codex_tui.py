"""A stand-in for the ``codex`` executable as ``codex-presence codex`` runs it, in both roles,
for the tests of the command's own mechanics (exit status, signals, ends, clean-up, logs)
that do not need the real TUI (``tests/test_codex_tui.py`` has those), and for
``bench/tui.py``'s roster figure. It lives here so that the benchmark runs without the test
dependencies (standard library, orjson and wsproto: the project's own).

``_fake_codex_tui.py app-server --listen unix://PATH`` behaves like codex's app-server on a
socket: PATH becomes a symlink to a socket in ``$FAKE_CODEX_DAEMON_DIR`` (with a ``.lock``
beside it), each connection gets a 101 and then the messages of ``$FAKE_CODEX_FRAMES`` (a
JSON list) as text frames, and a client's close frame is not answered: the connection just
ends. It starts a ``sleep`` in a session of its own (as codex runs commands), and with
``$FAKE_APP_SERVER=stubborn`` it ignores SIGTERM (as codex does mid-turn); with ``fail`` it
says why on stderr and exits 3 before listening.

``_fake_codex_tui.py --remote unix://OUTER [ARGS...]`` behaves like the TUI: prints
``TUI START`` on the terminal, connects with the TUI's upgrade request, reads the messages,
and then, by ``$FAKE_TUI``: ``exit:N`` sends the messages of ``$FAKE_TUI_SENDS`` (a JSON
list; none by default), a close frame, and exits with N; ``wait`` waits for a signal (and
dies of it).

Both roles append what they saw (argv, cwd, whether the member token reached them, in their
environment or in their elders' original environment blocks, pids) to ``$FAKE_CODEX_LOG``
as JSON lines.

For ``bench/tui.py``, with ``$FAKE_CODEX_CONTROL`` the app-server also listens there: each
line is a message, sent at once to every client connection with ``params.benchT`` set to
``time.monotonic()`` just before, and answered with that time and the number of clients.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import orjson
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import AcceptConnection, CloseConnection, Message, Request, TextMessage

TOKEN_ENV = "CODEX_PRESENCE_TOKEN"


def log(**fields: Any) -> None:
    path = os.environ.get("FAKE_CODEX_LOG")
    if path:
        with Path(path).open("ab") as out:
            out.write(orjson.dumps(fields) + b"\n")


def token_seen() -> bool:
    """The member token in our environment, or readable in our parent's (the watchdog's) or
    grandparent's (codex-presence's) original environment block (blanked, it is NULs)."""
    if TOKEN_ENV in os.environ:
        return True
    pid, prefix = os.getpid(), TOKEN_ENV.encode() + b"="
    for _ in range(2):
        pid = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if entry.startswith(prefix) and entry != prefix:
                return True
    return False


def frames() -> list[bytes]:
    return [orjson.dumps(m) for m in orjson.loads(os.environ.get("FAKE_CODEX_FRAMES", "[]"))]


# -- the app-server ---------------------------------------------------------------------------


def app_server(path: Path) -> None:
    mode = os.environ.get("FAKE_APP_SERVER", "")
    if mode == "fail":
        sys.stderr.write("boom: the fake app-server cannot start\n")
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    command = subprocess.Popen(["sleep", "300"], start_new_session=True)
    daemon_dir = Path(os.environ["FAKE_CODEX_DAEMON_DIR"])
    target = daemon_dir / f"{os.getpid():064d}"
    (daemon_dir / f"{target.name}.lock").touch()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(target))
    listener.listen()
    path.symlink_to(target)
    log(
        role="app-server",
        pid=os.getpid(),
        sid=os.getsid(0),
        command=command.pid,
        cwd=str(Path.cwd()),
        token=token_seen(),
    )
    sys.stderr.write("fake app-server: listening\n")
    sys.stderr.flush()
    control = os.environ.get("FAKE_CODEX_CONTROL")
    if control:
        threading.Thread(target=serve_control, args=(Path(control),), daemon=True).start()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


_clients: list[tuple[socket.socket, Connection]] = []
_clients_lock = threading.Lock()


def serve_control(path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    while True:
        conn, _ = listener.accept()
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                message = orjson.loads(line)
                with _clients_lock:
                    t = time.monotonic()
                    message.setdefault("params", {})["benchT"] = t
                    text = orjson.dumps(message).decode()
                    for client, ws in _clients:
                        with suppress(OSError):
                            client.sendall(ws.send(Message(data=text)))
                stream.write(b"%r %d\n" % (t, len(_clients)))
                stream.flush()


def serve(conn: socket.socket) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        log(role="app-server", head=head.decode())
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        import hashlib

        guid = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        accept = base64.b64encode(hashlib.sha1(key + guid).digest())
        ws = Connection(ConnectionType.SERVER)
        out = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
        out += b"connection: Upgrade\r\nsec-websocket-accept: " + accept + b"\r\n\r\n"
        out += b"".join(ws.send(Message(data=m.decode())) for m in frames())
        with _clients_lock:
            conn.sendall(out)
            _clients.append((conn, ws))
        try:
            ws.receive_data(rest)
            while True:
                for event in ws.events():
                    if isinstance(event, CloseConnection):
                        return  # codex answers no close frame: it ends the connection
                chunk = conn.recv(65536)
                if not chunk:
                    return
                ws.receive_data(chunk)
        finally:
            with _clients_lock:
                _clients.remove((conn, ws))


# -- the TUI ------------------------------------------------------------------------------------


def tui(path: str, args: list[str]) -> None:
    log(role="tui", pid=os.getpid(), sid=os.getsid(0), remote=path, args=args, token=token_seen())
    sys.stdout.write("TUI START\n")
    sys.stdout.flush()
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    ws = WSConnection(ConnectionType.CLIENT)
    offer = [("x-codex-app-server-compression", "zstd-stream-v1")]
    sock.sendall(ws.send(Request(host="localhost", target="/rpc", extra_headers=offer)))
    expected = len(frames())
    got = 0
    accepted = False
    while not accepted or got < expected:
        data = sock.recv(65536)
        if not data:
            break
        ws.receive_data(data)
        for event in ws.events():
            accepted = accepted or isinstance(event, AcceptConnection)
            got += isinstance(event, TextMessage) and event.message_finished
    log(role="tui", received=got)
    behaviour = os.environ.get("FAKE_TUI", "exit:0")
    if behaviour == "wait":
        while True:
            time.sleep(60)
    for message in orjson.loads(os.environ.get("FAKE_TUI_SENDS") or "[]"):
        sock.sendall(ws.send(TextMessage(orjson.dumps(message).decode())))
    sock.sendall(ws.send(CloseConnection(code=1005)))
    sock.close()
    sys.stdout.write("TUI END\n")
    sys.stdout.flush()
    sys.exit(int(behaviour.split(":")[1]))


def main(argv: list[str]) -> None:
    if argv[:2] == ["app-server", "--listen"]:
        app_server(Path(argv[2].removeprefix("unix://")))
    elif argv[:1] == ["--remote"]:
        tui(argv[1].removeprefix("unix://"), argv[2:])
    else:
        sys.stderr.write(f"fake codex: unexpected arguments {argv}\n")
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
