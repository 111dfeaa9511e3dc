"""Who listens on a TCP port (IPv4 and IPv6).

`listeners` reads the namespace's TCP tables (/proc/net/tcp, tcp6: address, port, the socket's
owner uid and inode, no fd reads) and then names the holders of the sockets on the asked ports by
reading fd tables: the processes of the socket's own user first, only the users asked for when
the caller's rules allow (a teardown without all_users), and never past the caller's deadline
(`scan_listeners` says when it was cut short). A port nothing listens on costs no fd read at all.
`sockets_of` asks about one process only (its own fd table): what a wait uses per poll once it
knows the port's holders (_portowner.current), and `has_listener` while the process it last saw
listening still does.
"""
from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

_FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}
_SOCKET_LINK = re.compile(r"socket:\[([0-9]+)\]")


@dataclass
class Listener:
    """A listening TCP socket and the processes that hold it."""

    port: int
    address: str
    family: str  # "ipv4" | "ipv6"
    inode: int   # the socket's inode (0 where the table could not be read)
    pids: List[int]
    uid: Optional[int] = None  # the socket's owner as the kernel's table names it

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


_TABLES = (("ipv4", "/proc/net/tcp"), ("ipv6", "/proc/net/tcp6"))
_LISTEN = "0A"


def _hex_address(family: str, text: str) -> str:
    """The kernel's hex address (host byte order per 32-bit word) as psutil writes it."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if family == "ipv4" else socket.AF_INET6, words)


def _table(ports: Optional[Set[int]], tables: Iterable[Tuple[str, str]] = _TABLES) -> Optional[Dict[Key, Listener]]:
    """Listening sockets on `ports` (all when None) from the namespace's TCP tables, holders not
    yet named; None when no table can be read (then psutil's table is used). Streamed, and a line
    without the port's hex is skipped unparsed: another user's 150,000 sockets cost a read of
    the table, not its parsing."""
    found: Dict[Key, Listener] = {}
    needles = None if ports is None else tuple(":%04X " % p for p in ports)
    readable = False
    for family, path in tables:
        try:
            fh = open(path)
        except OSError:
            continue
        readable = True
        with fh:
            next(fh, None)  # the header
            for line in fh:
                if needles is not None and not any(n in line for n in needles):
                    continue
                cols = line.split()
                if len(cols) < 10 or cols[3] != _LISTEN:
                    continue
                addr_hex, _sep, port_hex = cols[1].partition(":")
                port = int(port_hex, 16)
                if ports is not None and port not in ports:
                    continue
                key = (family, _hex_address(family, addr_hex), port)
                found.setdefault(key, Listener(port, key[1], family, int(cols[9]), [], int(cols[7])))
    return found if readable else None


def _psutil_table(ports: Optional[Set[int]]) -> Dict[Key, Listener]:
    """psutil's connection table (it reads every fd itself): where /proc/net/tcp is not readable."""
    found, owner_fd = _listening(_procs.require().net_connections(kind="tcp"), ports)
    for key, (pid, fd) in owner_fd.items():
        found[key].inode = _inode(pid, fd)
    return found


def _inode(pid: int, fd: int) -> int:
    for name, target in _procs.fd_targets(pid):
        if name == str(fd):
            match = _SOCKET_LINK.fullmatch(target)
            return int(match.group(1)) if match else 0
    return 0


@dataclass
class HolderScan:
    """How much of the host the naming of a port's holders covered."""

    scanned: int = 0       # processes whose fd tables were read
    left_out: int = 0      # processes of users the caller's rules leave out (never read)
    unreached: int = 0     # processes not read because the deadline came
    cut_short: bool = False
    seconds: float = 0.0
    users: Optional[List[int]] = field(default=None)

    def to_dict(self) -> Dict[str, object]:
        note = ("cut short at the deadline: %d processes not read; a holder among them is not named"
                % self.unreached if self.cut_short else "complete")
        return {"scanned": self.scanned, "left_out": self.left_out, "unreached": self.unreached,
                "cut_short": self.cut_short, "seconds": round(self.seconds, 3), "users": self.users, "note": note}


def _uid_of(pid: int) -> Optional[int]:
    try:
        return os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None


# Naming the holders of another user's socket (never ours to stop without all_users) is only
# for the report: one holder is enough, and it may not take longer than this.
FOREIGN_BUDGET_S = 0.5


def _by_uid(users: Optional[Set[int]], scan: HolderScan) -> Dict[Optional[int], List[int]]:
    """uid -> its pids; only `users`' processes when given (the rest left out)."""
    out: Dict[Optional[int], List[int]] = {}
    for pid in _procs.all_pids():
        uid = _uid_of(pid)
        if users is not None and uid not in users:
            scan.left_out += 1
            continue
        out.setdefault(uid, []).append(pid)
    return out


def _read_holders(pids: List[int], by_link: Dict[str, Listener], deadline: Optional[float], scan: HolderScan,
                  enough: Optional[Callable[[], bool]] = None) -> List[int]:
    """Read the fd tables of `pids` in order until `deadline` (or until `enough()`); the pids
    left unread."""
    for i, pid in enumerate(pids):
        if enough is not None and enough():
            return pids[i:]
        if deadline is not None and time.monotonic() >= deadline:
            scan.cut_short = True
            scan.unreached += len(pids) - i
            return []
        scan.scanned += 1
        for n, (_fd, target) in enumerate(_procs.fd_targets(pid)):
            listener = by_link.get(target)
            if listener is not None and pid not in listener.pids:
                listener.pids.append(pid)
            if n % 1024 == 1023 and deadline is not None and time.monotonic() >= deadline:
                break  # one process's huge fd table ends at the deadline too
    return []


def _earliest(*deadlines: Optional[float]) -> Optional[float]:
    given = [d for d in deadlines if d is not None]
    return min(given) if given else None


def _name_holders(found: Dict[Key, Listener], users: Optional[Set[int]], deadline: Optional[float],
                  complete_all: bool = False) -> HolderScan:
    """The processes holding each socket, by the socket links of their fd tables.

    A socket of the module's user (or of anyone, with `complete_all`: a teardown with all_users
    may stop them) needs every holder (a listening socket inherited across fork is held by
    several, and a teardown must find each): its owner's processes are all read. Another user's
    socket needs one holder, for the report: its owner's processes are read until one holds it,
    within FOREIGN_BUDGET_S. The remaining processes are read only
    for a socket still without a holder (one created before a change of user). Another user's
    million fds are then never read for a socket of ours, and cost at most the budget for one
    of theirs."""
    t0 = time.monotonic()
    scan = HolderScan(users=sorted(users) if users is not None else None)
    by_link = {"socket:[%d]" % l.inode: l for l in found.values() if l.inode}
    if by_link:
        euid = os.geteuid()
        procs = _by_uid(users, scan)
        complete = {l.uid for l in by_link.values()} if complete_all else {euid}
        for uid in sorted(u for u in {l.uid for l in by_link.values()} if u in complete):
            _read_holders(procs.pop(uid, []), by_link, deadline, scan)
        budget = _earliest(deadline, t0 + FOREIGN_BUDGET_S)
        for uid in sorted(u for u in {l.uid for l in by_link.values()} if u not in complete and u in procs):
            theirs = [l for l in by_link.values() if l.uid == uid]
            left = _read_holders(procs.pop(uid), by_link, budget, scan,
                                 enough=lambda ls=theirs: all(l.pids for l in ls))
            scan.left_out += len(left)
        rest = [pid for pids in procs.values() for pid in pids]
        if any(not l.pids for l in by_link.values()) and not scan.cut_short:
            mine = any(not l.pids and l.uid in complete for l in by_link.values())
            _read_holders(sorted(rest), by_link, deadline if mine else budget, scan,
                          enough=lambda: all(l.pids for l in by_link.values()))
        else:
            scan.left_out += len(rest)
    scan.seconds = time.monotonic() - t0
    return scan


def _sorted(found: Iterable[Listener]) -> List[Listener]:
    out = list(found)
    for listener in out:
        listener.pids.sort()
    return sorted(out, key=lambda l: (l.port, l.family, l.address))


# port -> (pid, start time) of a process last seen listening on it: a later `has_listener` asks
# psutil about that process alone, and reads the table only when it no longer listens there.
_LAST_HOLDER: Dict[int, Tuple[int, Optional[float]]] = {}


def _remember(found: Dict[Key, Listener]) -> None:
    for (_family, _address, port), listener in found.items():
        if listener.pids:
            _LAST_HOLDER[port] = (listener.pids[0], _procs.start_time_of(listener.pids[0]))


def scan_listeners(ports: Optional[Iterable[int]] = None, users: Optional[Iterable[int]] = None,
                   deadline: Optional[float] = None, complete_all: bool = False
                   ) -> Tuple[List[Listener], HolderScan]:
    """Listening sockets on `ports` (all ports when None), one entry per (family, address, port)
    (SO_REUSEPORT sockets merged), with the pids holding them: of `users` only when given, read
    until `deadline` (time.monotonic()) when given. A socket whose holders were not read (another
    user's, as non-root; left out; past the deadline) has an empty pid list and its `uid`."""
    wanted = set(ports) if ports is not None else None
    t0 = time.monotonic()
    found = _table(wanted)
    if found is None:  # no /proc/net/tcp: psutil names the holders (no bound)
        found = _psutil_table(wanted)
        return _sorted(found.values()), HolderScan()
    if deadline is not None:  # another user's 150,000 sockets slow the table's read (the kernel
        deadline += time.monotonic() - t0  # writes it whole): never at the cost of naming ours
    scan = _name_holders(found, set(users) if users is not None else None, deadline, complete_all)
    _remember(found)
    return _sorted(found.values()), scan


def listeners(ports: Optional[Iterable[int]] = None) -> List[Listener]:
    """scan_listeners over every process, unbounded: the preflight's, the probe's and the
    readiness's question (a port's holders must all be named)."""
    return scan_listeners(ports)[0]


def has_listener(port: int) -> bool:
    """Anything listening on `port` (IPv4 or IPv6)? Yes at once when the process last seen
    listening there (same start time) still does (psutil reads its fds only); else the TCP
    tables (no fd read)."""
    last = _LAST_HOLDER.get(port)
    if last is not None and sockets_of(last[0], last[1], port):
        return True
    found = _table({port})
    if found is None:
        found = _psutil_table({port})
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


def connect_address(held: Iterable[Tuple[str, str]], host: Optional[str]) -> Optional[str]:
    """The numeric address to connect to so that a request for `host` reaches one of the
    sockets `held` ((family, address) of proven holders) and nothing else: a socket's own
    address, or the loopback of its family for a wildcard. Only sockets that collide with
    `host` count (the host's address the request is for); None when none does. Resolving the
    name again at connect time could pick another of its addresses, one another user may hold."""
    mine = host_addresses(host) if isinstance(host, str) else []
    best: List[Tuple[int, str]] = []
    for family, address in held:
        sock = normal_address(family, address)
        if mine and not any(_collide(sock, m) for m in mine):
            continue
        wildcard = sock[1] == _WILDCARD[sock[0]]
        literal = ("127.0.0.1" if sock[0] == "ipv4" else "::1") if wildcard else sock[1]
        best.append((int(wildcard) + (0 if sock in mine else 2), literal))
    return sorted(best)[0][1] if best else None


def address_conflict(family: Optional[str], address: Optional[str], host: Optional[str]) -> bool:
    """Does a listener on (family, address) collide with a server bound to `host`? A host that
    is unknown or cannot be resolved counts as colliding (the cautious answer)."""
    mine = host_addresses(host) if isinstance(host, str) else []
    if not mine:
        return True
    theirs = normal_address(family, address)
    return any(_collide(theirs, m) for m in mine)
