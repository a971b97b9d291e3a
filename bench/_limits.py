"""Where ``bench/broker.py --members N`` stops, said before it starts: the system's limits
that N streams (and the load's connections) need, checked against what this machine gives.

A run past one of them used to end in a heap of ``ConnectionResetError`` tracebacks (the
broker's ``--max-connections``) or an exit naming ``RLIMIT_NOFILE``'s number (file
descriptors) after minutes of setup; :func:`where_it_stops` names the limit in one line
instead, with what would lift it. Standard library only (the benchmarks run without the
test dependencies); the arithmetic is pure, so a unit test decides it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SPARE_FDS", "Needs", "connections_for", "where_it_stops"]

SPARE_FDS = 256
"""Descriptors a process needs besides its connections: the interpreter, its pipes, the
listening socket, Redis's pool, the probes."""


def connections_for(members: int) -> int:
    """The broker's ``--max-connections`` for a run of ``members``: a stream each, the load
    generator's connections and the probes, with room to spare (the default, 4,096, ends a
    run of 5,000 members in refused connections)."""
    return 2 * members + 512


@dataclass(frozen=True)
class Needs:
    """What one broker of the run is asked to hold at once."""

    streams: int
    """Every stream open on it: the runners' and the pages'."""
    load: int
    """The load generator's connections besides (``--concurrency`` and the probes)."""

    @property
    def connections(self) -> int:
        return self.streams + self.load


def where_it_stops(
    needs: Needs,
    *,
    fd_hard_limit: int,
    port_range: tuple[int, int],
    max_connections: int,
) -> str | None:
    """The first limit ``needs`` is past, in one line with what lifts it; None when the
    run fits. ``fd_hard_limit``: ``RLIMIT_NOFILE``'s hard limit (``ulimit -Hn``; the bench
    raises its soft limit and the brokers', which inherit it, up to it); ``port_range``:
    ``net.ipv4.ip_local_port_range``, the client's ports to one broker's address;
    ``max_connections``: the broker's ``--max-connections``."""
    fds = needs.connections + SPARE_FDS
    if fds > fd_hard_limit:
        return (
            f"file descriptors: {needs.connections} connections need {fds} descriptors in "
            f"the load generator and in the broker, past the hard limit {fd_hard_limit} "
            "(ulimit -Hn; raise it in /etc/security/limits.conf or the container's nofile)"
        )
    ports = port_range[1] - port_range[0] + 1
    if needs.connections > ports:
        return (
            f"ephemeral ports: {needs.connections} connections to one broker from one "
            f"address, past the {ports} ports of net.ipv4.ip_local_port_range "
            f"({port_range[0]}-{port_range[1]}; widen it with sysctl)"
        )
    if needs.connections > max_connections:
        return (
            f"the broker's --max-connections: {needs.connections} connections, past "
            f"{max_connections}"
        )
    return None
