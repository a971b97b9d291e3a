"""Who is on the other end of a loopback TCP connection: the uid that owns the peer's socket.

The hook server listens on 127.0.0.1, where every local user can connect; only the client,
run by our own user, has anything to say to it. TCP has no ``SO_PEERCRED``, but on
loopback the peer's socket is on this host, and the kernel knows its owner:

* **sock_diag** (netlink, ``SOCK_DIAG_BY_FAMILY``): one exact lookup of the socket whose
  local end is the peer's address and whose remote end is ours; ``idiag_uid`` is its
  owner. One round trip, however many sockets the host has.
* **/proc/net/tcp**, where netlink is not to be had: the line whose local/remote address
  pair is the peer's, its ``uid`` column. A scan of every TCP socket, so the fallback.

:func:`peer_uid` gives the uid, None when no such socket exists or it is no longer
ESTABLISHED (its process closed it, and the kernel then says root owns it: a flooder
closing its connections before we accept them must not pass for root's), and raises
OSError when neither source can be read (then nobody can be told apart).
Linux only, IPv4 only (the hook server's listener is 127.0.0.1).
"""

from __future__ import annotations

import errno
import socket
import struct

__all__ = ["peer_uid"]

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_ALL_STATES = 0xFFFFFFFF
_NO_COOKIE = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")
"""struct nlmsghdr: length, type, flags, sequence, port id."""
_ESTABLISHED = 1
"""The one state in which the peer's socket still has an owner to tell: once its process
closed it (FIN_WAIT, TIME_WAIT, CLOSE), the kernel says uid 0 (root's) for it."""
_UID_OFFSET = 4 + 48 + 12
"""In struct inet_diag_msg: family/state/timer/retrans, the socket id, expires/rqueue/wqueue."""


def peer_uid(local: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """The uid owning the peer's end of the connection from ``peer`` to ``local`` (both
    ``(ipv4 address, port)``); None if there is no such socket any more."""
    try:
        return _by_sock_diag(local, peer)
    except OSError:
        return _by_proc_net_tcp(local, peer)


def _by_sock_diag(local: tuple[str, int], peer: tuple[str, int]) -> int | None:
    sock_id = (
        struct.pack("!HH", peer[1], local[1])
        + socket.inet_aton(peer[0]).ljust(16, b"\0")
        + socket.inet_aton(local[0]).ljust(16, b"\0")
        + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    )
    request = struct.pack("=BBBxI", socket.AF_INET, socket.IPPROTO_TCP, 0, _ALL_STATES) + sock_id
    message = _HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(1.0)
        nl.send(message + request)
        answer = nl.recv(8192)
    _, kind, _, _, _ = _HEADER.unpack_from(answer)
    if kind == _NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", answer, _HEADER.size)
        if -code == errno.ENOENT:
            return None
        raise OSError(-code, f"sock_diag: {errno.errorcode.get(-code, -code)}")
    if kind != _SOCK_DIAG_BY_FAMILY:
        raise OSError(errno.EPROTO, f"sock_diag answered message type {kind}")
    if answer[_HEADER.size + 1] != _ESTABLISHED:
        return None
    (uid,) = struct.unpack_from("=I", answer, _HEADER.size + _UID_OFFSET)
    return int(uid)


def _by_proc_net_tcp(local: tuple[str, int], peer: tuple[str, int]) -> int | None:
    def hex_address(address: tuple[str, int]) -> bytes:
        # The kernel prints the address as a host-order word, the port as a number.
        (word,) = struct.unpack("=I", socket.inet_aton(address[0]))
        return b"%08X:%04X" % (word, address[1])

    pair = hex_address(peer) + b" " + hex_address(local)
    with open("/proc/net/tcp", "rb") as table:
        for line in table:
            fields = line.split()
            if len(fields) > 7 and fields[1] + b" " + fields[2] == pair:
                return int(fields[7]) if int(fields[3], 16) == _ESTABLISHED else None
    return None
