"""Who listens on a TCP port (IPv4 and IPv6).

The kernel's socket tables (/proc/net/tcp, tcp6) say which sockets listen, with their inodes:
one file read each, cheap enough for every poll of a wait (`listening_sockets`, `has_listener`).
Naming the processes that hold a socket means reading every process's fd table: `listeners`
does that once per call (one pass, every holder of each socket, the ones a fork shared too).
"""
from __future__ import annotations

import errno
import ipaddress
import re
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils import _procs

_FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}
_SOCKET_LINK = re.compile(r"socket:\[([0-9]+)\]")
# Read by hand: psutil has no API for the listen table alone (net_connections maps every socket
# to a pid first, reading every process's fd table on each call: 0.3 s at 2,000 processes).
_NET_TABLES = (("/proc/net/tcp", "ipv4"), ("/proc/net/tcp6", "ipv6"))
_TCP_LISTEN = "0A"  # st column of /proc/net/tcp: TCP_LISTEN


@dataclass
class Listener:
    port: int
    address: str
    family: str  # "ipv4" | "ipv6"
    inode: int   # the socket's inode where an owner's fd could be read, else 0
    pids: List[int]

    def to_dict(self) -> Dict[str, object]:
        return {"port": self.port, "address": self.address, "family": self.family, "pids": sorted(self.pids)}


def validate_port(value: object) -> int:
    try:
        port = int(str(value))
    except (TypeError, ValueError):
        raise ValueError("port %r is not an integer" % (value,))
    if str(port) != str(value).strip() or not 1 <= port <= 65535:
        raise ValueError("port %r is not in 1..65535" % (value,))
    return port


Key = Tuple[str, str, int]


def _listening(conns: Iterable[Any], ports: Optional[Set[int]], holder: Optional[int] = None
               ) -> Tuple[Dict[Key, Listener], Dict[Key, Tuple[int, int]]]:
    """(family, address, port) -> Listener from psutil connections in state LISTEN, and for each
    one (pid, fd) of an owner psutil could read (none for another user's socket, as non-root).
    `holder`: the pid of a per-process list (its entries carry no pid)."""
    lib = _procs.require()
    found: Dict[Key, Listener] = {}
    owner_fd: Dict[Key, Tuple[int, int]] = {}
    for conn in conns:
        family = _FAMILIES.get(conn.family)
        if family is None or conn.status != lib.CONN_LISTEN or not conn.laddr:
            continue
        address, port = conn.laddr[0], int(conn.laddr[1])
        if ports is not None and port not in ports:
            continue
        key = (family, address, port)
        listener = found.setdefault(key, Listener(port, address, family, 0, []))
        pid = getattr(conn, "pid", holder)
        if pid is not None and pid not in listener.pids:
            listener.pids.append(pid)
            if conn.fd is not None and conn.fd >= 0:
                owner_fd.setdefault(key, (pid, conn.fd))
    return found, owner_fd


def _inode(pid: int, fd: int) -> int:
    for name, target in _procs.fd_targets(pid):
        if name == str(fd):
            match = _SOCKET_LINK.fullmatch(target)
            return int(match.group(1)) if match else 0
    return 0


def _hex_address(text: str, family: str) -> str:
    """An address of /proc/net/tcp{,6}: 32-bit words in host byte order, as hex."""
    raw = bytes.fromhex(text)
    if sys.byteorder == "little":
        raw = struct.pack(">%dI" % (len(raw) // 4), *struct.unpack("<%dI" % (len(raw) // 4), raw))
    return socket.inet_ntop(socket.AF_INET6 if family == "ipv6" else socket.AF_INET, raw)


def _table_rows(path: str) -> List[List[str]]:
    try:
        with open(path) as fh:
            return [line.split() for line in fh.readlines()[1:]]
    except OSError:
        return []  # no IPv6 on this host


def listening_sockets(ports: Optional[Iterable[int]] = None) -> List[Listener]:
    """Every listening TCP socket on `ports` (all when None), one entry per socket with its
    inode and no pids: two reads of the kernel's tables, no process is looked at."""
    wanted = set(ports) if ports is not None else None
    out: List[Listener] = []
    for path, family in _NET_TABLES:
        for cols in _table_rows(path):
            if len(cols) < 10 or cols[3] != _TCP_LISTEN:
                continue
            host, _sep, port_hex = cols[1].rpartition(":")
            port = int(port_hex, 16)
            if wanted is not None and port not in wanted:
                continue
            out.append(Listener(port, _hex_address(host, family), family, int(cols[9]), []))
    return out


def _holders(by_link: Dict[str, List[Listener]]) -> None:
    """Every process holding one of the sockets (one pass over the fd tables): a listening
    socket inherited across fork is held by several processes, and a teardown must find each.
    Another user's fd table is unreadable unless root: that socket keeps no pid."""
    for pid in _procs.all_pids():
        for _fd, target in _procs.fd_targets(pid):
            for listener in by_link.get(target, ()):
                if pid not in listener.pids:
                    listener.pids.append(pid)


def _sorted(found: Iterable[Listener]) -> List[Listener]:
    out = list(found)
    for listener in out:
        listener.pids.sort()
    return sorted(out, key=lambda l: (l.port, l.family, l.address))


def listeners(ports: Optional[Iterable[int]] = None) -> List[Listener]:
    """Listening sockets on `ports` (all ports when None) with every pid holding them, one entry
    per (family, address, port) (SO_REUSEPORT sockets merged). A socket whose owner we cannot
    read (another user's, not root) has an empty pid list."""
    merged: Dict[Key, Listener] = {}
    by_link: Dict[str, List[Listener]] = {}
    for sock in listening_sockets(ports):
        key = (sock.family, sock.address, sock.port)
        entry = merged.setdefault(key, Listener(sock.port, sock.address, sock.family, sock.inode, []))
        by_link.setdefault("socket:[%d]" % sock.inode, []).append(entry)
    if by_link:
        _holders(by_link)
    return _sorted(merged.values())


def has_listener(port: int) -> bool:
    """Anything listening on `port` (IPv4 or IPv6)? The kernel's tables only, no process."""
    return bool(listening_sockets([port]))


def _connections(handle: Any) -> List[Any]:
    # Process.net_connections since psutil 6.0; connections() before (5.9)
    method = getattr(handle, "net_connections", None) or handle.connections
    return list(method(kind="tcp"))


def listeners_by_pid(pids: Iterable[int]) -> List[Listener]:
    """Listening sockets held by the given pids (cheap: psutil reads only those fd tables)."""
    lib = _procs.require()
    merged: Dict[Key, Listener] = {}
    for pid in sorted(set(pids)):
        try:
            conns = _connections(lib.Process(pid))
        except (lib.Error, ValueError):
            continue
        found, owner_fd = _listening(conns, None, pid)
        for key, listener in found.items():
            entry = merged.setdefault(key, Listener(listener.port, listener.address, listener.family, 0, []))
            if pid not in entry.pids:
                entry.pids.append(pid)
            if not entry.inode and key in owner_fd:
                entry.inode = _inode(*owner_fd[key])
    return _sorted(merged.values())


def can_bind(host: str, port: int) -> Optional[str]:
    """None when host:port could be bound now, else the reason (address in use, ...)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return "address already in use"
        return str(exc)
    finally:
        sock.close()
    return None


# --- does a listener collide with a bind address -------------------------------------------------
# The one helper for sglang_ready (is a foreign listener in the way of this server?) and
# sglang_teardown (does a listener of another user block the instance's port?).

_WILDCARD = {"ipv4": "0.0.0.0", "ipv6": "::"}


def normal_address(family: Optional[str], address: Optional[str]) -> Tuple[str, str]:
    """(family, address) with IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as the IPv4 it is."""
    text = (address or "").strip("[]")
    if not text:
        return (family or "ipv4"), _WILDCARD.get(family or "ipv4", "0.0.0.0")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return (family or "ipv4"), text
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        return "ipv4", str(mapped)
    return ("ipv6" if ip.version == 6 else "ipv4"), str(ip)


def host_addresses(host: str) -> List[Tuple[str, str]]:
    """The (family, address) pairs a server asked to bind `host` binds; [] when unknown."""
    if host in ("", "0.0.0.0", "::"):
        return [normal_address("ipv6" if host == "::" else "ipv4", host)]
    try:
        ipaddress.ip_address(host.strip("[]"))
        return [normal_address(None, host)]
    except ValueError:
        pass  # a name: what it resolves to
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return sorted({normal_address("ipv6" if i[0] == socket.AF_INET6 else "ipv4", i[4][0]) for i in infos})


def _collide(a: Tuple[str, str], b: Tuple[str, str]) -> bool:
    """Two sockets on one port that the kernel would not let coexist (Linux, no SO_REUSEPORT).
    An IPv6 wildcard is taken as dual-stack (the default): it covers IPv4 too."""
    if a[0] == b[0]:
        return a[1] == b[1] or _WILDCARD[a[0]] in (a[1], b[1])
    six = a if a[0] == "ipv6" else b
    return six[1] == "::"


def address_conflict(family: Optional[str], address: Optional[str], host: Optional[str]) -> bool:
    """Does a listener on (family, address) collide with a server bound to `host`? A host that
    is unknown or cannot be resolved counts as colliding (the cautious answer)."""
    mine = host_addresses(host) if isinstance(host, str) else []
    if not mine:
        return True
    theirs = normal_address(family, address)
    return any(_collide(theirs, m) for m in mine)
