"""Who holds a TCP port: a bind probe and the listening processes. Used by the doctor's port check
and by the supervisor's start blockers (backend/server/owners.py)."""

from __future__ import annotations

import errno
import socket

import psutil


def probe_bind(host: str, port: int) -> OSError | None:
    """Bind (not listen) host:port the way a server would (SO_REUSEADDR); the error, or None if free."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return OSError(errno.EADDRNOTAVAIL, f"cannot resolve {host!r}: {e.strerror}")
    family, kind, proto, _, addr = infos[0]
    try:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
    except OSError as e:
        return e
    return None


def listening_pids(port: int) -> list[tuple[int, str]]:
    """(pid, name) of processes listening on `port`, where this user may see them."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return []
    out = []
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                name = psutil.Process(c.pid).name()
            except psutil.Error:
                name = "?"
            out.append((c.pid, name))
    return sorted(set(out))
