"""Who listens on a TCP port (IPv4 and IPv6): psutil's connection table.

`listeners` asks psutil for the host's table (`net_connections`), which maps every socket to a
pid by reading every process's fd table: a scan, for once per question, not for every poll of
a wait. `sockets_of` asks about one process only (its own fd table): what a wait uses per poll
once it knows the port's holders (_portowner.current), and `has_listener` while the process
it last saw listening still does.
"""
from __future__ import annotations

import errno
import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

_FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}
_SOCKET_LINK = re.compile(r"socket:\[([0-9]+)\]")


@dataclass
class Listener:
    """A listening TCP socket and the processes that hold it."""

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


_PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_RESERVED = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def _read_sysctl(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, ValueError):
        return ""


def _reserved(text: str, port: int) -> bool:
    """`ip_local_reserved_ports` is a list like `8000,30000-30010`."""
    for part in text.split(","):
        low, high = (part.strip().split("-", 1) + [""])[:2]
        try:
            if int(low) <= port <= int(high or low):
                return True
        except ValueError:
            continue
    return False


def ephemeral_range(port: int, port_range: str = _PORT_RANGE,
                    reserved: str = _RESERVED) -> Optional[Tuple[int, int]]:
    """The kernel's ephemeral range when `port` lies in it and is not reserved, else None.
    Such a port can be taken by any outgoing connection in the moment a restart frees it,
    and the relaunch then fails to bind."""
    try:
        low, high = (int(v) for v in _read_sysctl(port_range).split()[:2])
    except ValueError:
        return None
    if not low <= port <= high or _reserved(_read_sysctl(reserved), port):
        return None
    return low, high


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


def _all_holders(found: Dict[Key, Listener], owner_fd: Dict[Key, Tuple[int, int]]) -> None:
    """psutil names one pid per socket (the first fd it found); a listening socket inherited
    across fork is held by several processes, and a teardown must find each. psutil has no API
    for the other holders: their fd links are compared with the known owner's here (one pass)."""
    by_link: Dict[str, Listener] = {}
    for key, (pid, fd) in owner_fd.items():
        inode = _inode(pid, fd)
        if inode:
            found[key].inode = inode
            by_link["socket:[%d]" % inode] = found[key]
    if not by_link:
        return
    for pid in _procs.all_pids():
        for _fd, target in _procs.fd_targets(pid):
            listener = by_link.get(target)
            if listener is not None and pid not in listener.pids:
                listener.pids.append(pid)


def _sorted(found: Iterable[Listener]) -> List[Listener]:
    out = list(found)
    for listener in out:
        listener.pids.sort()
    return sorted(out, key=lambda l: (l.port, l.family, l.address))


# port -> (pid, start time) of a process last seen listening on it: a later `has_listener` asks
# psutil about that process alone, and scans the host only when it no longer listens there.
_LAST_HOLDER: Dict[int, Tuple[int, Optional[float]]] = {}


def _remember(found: Dict[Key, Listener]) -> None:
    for (_family, _address, port), listener in found.items():
        if listener.pids:
            _LAST_HOLDER[port] = (listener.pids[0], _procs.start_time_of(listener.pids[0]))


def listeners(ports: Optional[Iterable[int]] = None) -> List[Listener]:
    """Listening sockets on `ports` (all ports when None) with every pid holding them, one entry
    per (family, address, port) (SO_REUSEPORT sockets merged). A socket whose owner we cannot
    read (another user's, not root) has an empty pid list. Scans every process."""
    wanted = set(ports) if ports is not None else None
    found, owner_fd = _listening(_procs.require().net_connections(kind="tcp"), wanted)
    _all_holders(found, owner_fd)
    _remember(found)
    return _sorted(found.values())


def has_listener(port: int) -> bool:
    """Anything listening on `port` (IPv4 or IPv6)? Yes at once when the process last seen
    listening there (same start time) still does (psutil reads its fds only); else psutil's
    connection table, which reads every process's fds: a "no" always costs that scan."""
    last = _LAST_HOLDER.get(port)
    if last is not None and sockets_of(last[0], last[1], port):
        return True
    found, _owners = _listening(_procs.require().net_connections(kind="tcp"), {port})
    _remember(found)
    return bool(found)


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


def sockets_of(pid: int, start_time: Optional[float], port: int) -> Optional[Set[Tuple[str, str]]]:
    """(family, address) of the sockets this process listens on at `port`; None when it is gone,
    is another process by now (start time checked) or cannot be read. psutil reads only its fd
    table and the namespace's TCP table."""
    lib = _procs.require()
    try:
        handle = lib.Process(pid)
        if start_time is not None and abs(round(handle.create_time(), 2) - start_time) >= 0.05:
            return None  # the pid was reused
        found, _owners = _listening(_connections(handle), {port}, pid)
    except (lib.Error, ValueError):
        return None
    return {(family, address) for family, address, _port in found}


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
