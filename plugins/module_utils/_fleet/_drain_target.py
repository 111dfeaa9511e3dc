"""PRIVATE to llmops.sglang. The server sglang_drain reads: only a listener proven to be the
instance's sglang server, re-checked before every reading.

The proof is the probe's rule (_sglang/_discovery.credential_refusal): every process holding a
listening socket on the port is a member of a recognised sglang server of `server_user`, wholly
that user's, in this PID namespace. Anything else - a plain listener, another user's process, a
container's - gets no request and no key, and the drain fails (reason `foreign_listener`)
instead of believing its "idle". Nothing listening is "nothing to drain", as before; the proven
server listening but not answering (within `request_timeout`, the whole request) is a failure
(reason `server_unresponsive`), not an idle server.

The proof reads every process's fd table (who holds the port) and groups the holders and their
ancestors as the probe groups servers; so a wait proves once and then, per reading, asks
psutil only about the holders it proved: each the same process (pid and start time) on the same
addresses of the port. While the server holds its socket nobody can bind a colliding address
(uvicorn sets no SO_REUSEPORT): the proof demands a socket that collides with the drain's
host, so the request reaches a proven holder or none.
"""
from __future__ import annotations

import os
import pwd
import socket
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

Holder = Tuple[int, float, FrozenSet[Tuple[str, str]]]  # pid, start time, its (family, address) on the port


def module_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _local(host: str) -> bool:
    """Is `host` an address of this host (a wildcard, loopback or an interface's)? Only there
    can the port's holders be judged. A bind to (address, 0) succeeds exactly for those."""
    if host in ("", "0.0.0.0", "::"):
        return True
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    for family, _type, _proto, _name, addr in infos:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # a family this host has no stack for (IPv6 off): no request can go there either
        with sock:
            try:
                sock.bind((addr[0], 0))
            except OSError:
                return False
    return bool(infos)


class Target:
    """The instance's server on host:port, as the drain may talk to it."""

    def __init__(self, host: str, port: int, server_user: str, api_key: Optional[str], timeout: float,
                 launch_ids: Iterable[str] = ()) -> None:
        if not _local(host):
            raise SglangError("host %s is not an address of this host: the drain reads only a server it can "
                              "prove is the instance's, on this host (run it there)" % host, reason="invalid_argument")
        self.host, self.port, self.user = host, port, server_user
        self.api_key, self.timeout = api_key, timeout
        self.launch_ids = list(launch_ids)
        self.proven: Optional[FrozenSet[Holder]] = None
        self.proofs = 0  # full proofs made (the fd-table scan), for the tests' curiosity

    def to_state(self) -> List[Any]:
        """The proven holders, for the next slice of a sliced wait (its action plugin hands the
        state back): that slice re-checks them per reading instead of proving again."""
        return sorted([pid, start, sorted([list(a) for a in addrs])] for pid, start, addrs in self.proven or ())

    def resume(self, state: Any) -> None:
        """Take over the holders a previous slice proved (see to_state); a bad entry proves nothing."""
        try:
            holders = frozenset((int(pid), float(start), frozenset((str(f), str(a)) for f, a in addrs))
                                for pid, start, addrs in state or ())
        except (TypeError, ValueError):
            holders = frozenset()
        self.proven = holders or None

    def fetch(self, path: str) -> _http.Response:
        """GET `path` from the proven server; an answer-less Response when nothing listens."""
        if not self._still_proven():
            if not self._prove():
                return _http.Response(None, None, "nothing listens on port %d (IPv4 or IPv6)" % self.port)
        resp = _http.request(self.host, self.port, path, self.api_key, timeout=self.timeout)
        if resp.status is None and self._still_proven():
            # the server is there and did not answer (in time): its load is unknown, not zero
            raise SglangError("the instance's server on port %d listens but GET %s got no answer: %s. Nothing was "
                              "stopped." % (self.port, path, resp.error), reason="server_unresponsive")
        return resp

    def _still_proven(self) -> bool:
        if not self.proven:
            return False
        return all(_ports.sockets_of(pid, start, self.port) == set(addrs) for pid, start, addrs in self.proven)

    def _prove(self) -> bool:
        """True when the port's holders are the instance's server (remembered); False when
        nothing listens; SglangError foreign_listener otherwise."""
        from ansible_collections.llmops.sglang.plugins.module_utils._sglang._discovery import (
            credential_refusal, find_servers)

        self.proofs += 1
        self.proven = None
        socks = _ports.listeners([self.port])
        if not socks:
            return False
        # The probe's grouping over the holders and their ancestors only: the same verdict for
        # them as over the whole process table, without reading every process's environment.
        servers = find_servers(_lineage(pid for sock in socks for pid in sock.pids), with_ports=False)
        refusal = credential_refusal(servers, socks, self.user, self.launch_ids)
        if refusal is None and not any(_ports.address_conflict(s.family, s.address, self.host) for s in socks):
            # then another process could bind the host's address on the port and get the request
            refusal = "the instance's server does not listen on %s (it listens on %s)" % (
                self.host, ", ".join(sorted("%s:%d" % (s.address, s.port) for s in socks)))
        holders = _holders(socks) if refusal is None else None
        if refusal is None and holders is None:
            refusal = "a holder of port %d changed while it was judged" % self.port
        if refusal is not None:
            raise SglangError("not draining port %d: %s. Only the instance's sglang server (of user %s, in this "
                              "PID namespace) is asked, with or without api_key; nothing was sent."
                              % (self.port, refusal, self.user), reason="foreign_listener",
                              listeners=[s.to_dict() for s in socks])
        self.proven = holders
        return True


def _lineage(pids: Iterable[int]) -> Dict[int, _procs.Proc]:
    """The processes `pids` and all their ancestors (a server's main is the holder's ancestor,
    or the holder itself), keyed by pid."""
    table: Dict[int, _procs.Proc] = {}
    for pid in pids:
        while pid > 0 and pid not in table:
            proc = _procs.read_proc(pid)
            if proc is None:
                break
            table[pid] = proc
            pid = proc.ppid
    return dict(sorted(table.items()))


def _holders(socks: List[_ports.Listener]) -> Optional[FrozenSet[Holder]]:
    by_pid: dict = {}
    for sock in socks:
        for pid in sock.pids:
            by_pid.setdefault(pid, set()).add((sock.family, sock.address))
    out: Set[Holder] = set()
    for pid, addrs in by_pid.items():
        start = _procs.start_time_of(pid)
        if start is None:
            return None
        out.add((pid, start, frozenset(addrs)))
    return frozenset(out)
