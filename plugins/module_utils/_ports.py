"""Who listens on a TCP port (IPv4 and IPv6), read from /proc/net/tcp{,6} and the fd tables."""
from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set

from ansible_collections.llmops.sglang.plugins.module_utils import _procs

_LISTEN = "0A"


@dataclass
class Listener:
    port: int
    address: str
    family: str  # "ipv4" | "ipv6"
    inode: int
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


def _hex_to_addr(hexaddr: str, family: str) -> str:
    raw = bytes.fromhex(hexaddr)
    if family == "ipv4":
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # IPv6 in /proc is four little-endian 32-bit words.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def _listening_sockets(ports: Optional[Set[int]]) -> Dict[int, Listener]:
    """inode -> Listener (pids filled later)."""
    found: Dict[int, Listener] = {}
    for name, family in (("tcp", "ipv4"), ("tcp6", "ipv6")):
        try:
            with open("/proc/net/%s" % name) as fh:
                next(fh, None)
                for line in fh:
                    cols = line.split()
                    if len(cols) < 10 or cols[3] != _LISTEN:
                        continue
                    hexaddr, hexport = cols[1].split(":")
                    port = int(hexport, 16)
                    if ports is not None and port not in ports:
                        continue
                    inode = int(cols[9])
                    found[inode] = Listener(port, _hex_to_addr(hexaddr, family), family, inode, [])
        except OSError:
            continue
    return found


def _socket_owners(inodes: Set[int], pids: Optional[Iterable[int]] = None) -> Dict[int, List[int]]:
    owners: Dict[int, List[int]] = {}
    if not inodes:
        return owners
    wanted = {"socket:[%d]" % i: i for i in inodes}
    candidates = pids if pids is not None else _procs.all_pids()
    for pid in candidates:
        for _fd, target in _procs.fd_targets(pid):
            inode = wanted.get(target)
            if inode is not None and pid not in owners.setdefault(inode, []):
                owners[inode].append(pid)
    return owners


def listeners(ports: Optional[Iterable[int]] = None) -> List[Listener]:
    """Listening sockets on `ports` (all ports when None) with the pids holding them.
    A socket whose owner we cannot read (another user's, not root) has an empty pid list."""
    wanted = set(ports) if ports is not None else None
    socks = _listening_sockets(wanted)
    owners = _socket_owners(set(socks))
    for inode, listener in socks.items():
        listener.pids = sorted(owners.get(inode, []))
    return sorted(socks.values(), key=lambda l: (l.port, l.family, l.address))


def has_listener(port: int) -> bool:
    """Anything listening on `port` (IPv4 or IPv6)? Reads only /proc/net/tcp{,6}, no fd scan:
    cheap enough to call several times a second while a server starts."""
    return bool(_listening_sockets({port}))


def listeners_by_pid(pids: Iterable[int]) -> List[Listener]:
    """Listening sockets held by the given pids (cheap: scans only those fd tables)."""
    pid_list = list(pids)
    socks = _listening_sockets(None)
    owners = _socket_owners(set(socks), pid_list)
    out = []
    for inode, pid_owners in owners.items():
        listener = socks[inode]
        listener.pids = sorted(pid_owners)
        out.append(listener)
    return sorted(out, key=lambda l: (l.port, l.family, l.address))


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
