"""Does a process, or a port, belong to one launch? The one ownership rule, shared by the launch
preflight (is the port held by the instance itself?) and sglang_ready (every listener that
collides with the launch's address must be this launch's).

A process belongs to the launch when it is, by pid AND start time (a reused pid proves nothing):
- the launched server process or the supervisor that started it, or a descendant of either;
- or, only for a process of the module's own user in the module's own PID namespace (anything
  else can copy a marker, or reuse a number): a member of the launch's process group or
  session (never the module's own), or a carrier of the launch's LLMOPS_SGLANG_LAUNCH_ID.

Naming a socket's holders reads every process's fd table (`port_owners`, psutil's connection
table): a wait does that once the launch listens, then per poll asks psutil about the holders
it named only (`current`): each still the same process, on the same addresses of the port.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact


@dataclass(frozen=True)
class LaunchIdentity:
    """What identifies one launch's processes (from its launch record)."""
    pid: Optional[int]
    start_time: Optional[float] = None
    supervisor_pid: Optional[int] = None
    supervisor_start_time: Optional[float] = None
    pgid: Optional[int] = None
    sid: Optional[int] = None
    launch_id: Optional[str] = None

    @classmethod
    def from_record(cls, record: Optional[Mapping[str, Any]]) -> "LaunchIdentity":
        """Tolerant: a field that is missing or not a number proves nothing (None)."""
        rec = record or {}
        return cls(pid=_int(rec.get("pid")), start_time=_procs.record_start(rec),
                   supervisor_pid=_int(rec.get("supervisor_pid")),
                   supervisor_start_time=_procs.record_start(rec, "supervisor_start_time"),
                   pgid=_int(rec.get("pgid")), sid=_int(rec.get("sid")),
                   launch_id=str(rec["launch_id"]) if rec.get("launch_id") else None)


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _float(value: Any) -> Optional[float]:
    try:
        return float(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


# --- one process ---------------------------------------------------------------------------

def _roots(ident: LaunchIdentity) -> List[Any]:
    """(pid, what it is) of the launch's live root processes, start times checked."""
    out = []
    if ident.pid and _procs.is_alive(ident.pid, ident.start_time):
        out.append((ident.pid, "the launched process"))
    if ident.supervisor_pid and _procs.is_alive(ident.supervisor_pid, ident.supervisor_start_time):
        out.append((ident.supervisor_pid, "the launch's supervisor"))
    return out


def other_pid_namespace(pid: int) -> bool:
    """Does `pid` live in another PID namespace than this module (a container's process)?"""
    theirs = _procs.pid_namespace(pid)
    return theirs is not None and theirs != _procs.own_pid_namespace()


def _own_user_here(proc: _procs.Proc) -> bool:
    """A process of the module's user in the module's PID namespace: only such a process can
    prove membership by a group, session or marker."""
    return proc.uid == os.geteuid() and not other_pid_namespace(proc.pid)


def _weak_proof(proc: _procs.Proc, ident: LaunchIdentity) -> Optional[str]:
    if ident.pgid and proc.pgid == ident.pgid and ident.pgid != os.getpgrp():
        return "in the launch's process group %d" % ident.pgid
    if ident.sid and proc.sid == ident.sid and ident.sid != os.getsid(0):
        return "in the launch's session %d" % ident.sid
    if ident.launch_id:
        marker = _procs.marker_of(proc.pid) or {}
        if marker.get(_procs.MARKER_LAUNCH_ID) == ident.launch_id:
            return "carries %s=%s" % (_procs.MARKER_LAUNCH_ID, ident.launch_id)
    return None


def ownership(pid: int, ident: LaunchIdentity) -> Optional[str]:
    """Why `pid` belongs to the launch, or None (see the module docstring for the rule)."""
    proc = _procs.read_proc(pid)
    if proc is None:
        return None
    roots = _roots(ident)
    for root, what in roots:
        if pid == root:
            return what
    if roots:
        above = _procs.ancestors(pid)
        for root, what in roots:
            if root in above:
                return "a descendant of %s %d" % (what, root)
    if not _own_user_here(proc):
        return None
    return _weak_proof(proc, ident)


def iso(epoch: Optional[float]) -> Optional[str]:
    """An epoch as UTC ISO 8601 (what operators compare with their logs)."""
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def describe_owner(pid: int) -> Dict[str, Any]:
    """A port holder for an operator: the one process description (_redact) plus its start
    time and instance marker."""
    proc = _procs.read_proc(pid)
    if proc is None:
        return {"pid": pid, "name": None, "user": None, "cmdline": None, "start_time": None, "started": None}
    marker = _procs.marker_of(pid) or {}
    return _redact.describe_process(proc, start_time=proc.start_time, started=iso(proc.start_time),
                                    instance=marker.get(_procs.MARKER_INSTANCE),
                                    launch_id=marker.get(_procs.MARKER_LAUNCH_ID))


# --- one port ------------------------------------------------------------------------------

UNREADABLE_OWNER = "(owner not readable: another user's process)"


Holder = Tuple[int, float]  # (pid, start time): the process, not only its number


@dataclass
class PortOwners:
    """Who listens on a launch's port: its own processes and the foreign ones."""

    listeners: List[Dict[str, Any]]
    foreign: List[Dict[str, Any]]  # processes (or unreadable sockets) that are not this launch
    # every process this scan named as holding a socket on the port; empty when any holder
    # could not be named (another user's socket, a start time unread): nothing to re-check
    holders: FrozenSet[Holder] = field(default_factory=frozenset)

    @property
    def ours(self) -> List[Dict[str, Any]]:
        """The listeners this launch holds."""
        return [entry for entry in self.listeners if any(o["ours"] for o in entry["owners"])]

    def clashing(self, host: str) -> List[Dict[str, Any]]:
        """Foreign holders whose socket collides with `host` on the port: only they can take
        the port from this launch. `::1` does not collide with `127.0.0.1`."""
        return [o for o in self.foreign if _ports.address_conflict(o.get("family"), o.get("address"), host)]

    def sockets_of(self, pid: int) -> Set[Tuple[str, str]]:
        """(family, address) of the port's sockets this scan found `pid` holding."""
        return {(e["family"], e["address"]) for e in self.listeners if pid in e.get("pids", ())}

    def to_state(self) -> Dict[str, Any]:
        return {"listeners": self.listeners, "foreign": self.foreign,
                "holders": sorted([pid, start] for pid, start in self.holders)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "PortOwners":
        return cls(list(state["listeners"]), list(state["foreign"]),
                   frozenset((int(h[0]), float(h[1])) for h in state.get("holders") or []))


def _entry(listener: _ports.Listener, ident: LaunchIdentity, foreign: List[Dict[str, Any]],
           seen: set) -> Dict[str, Any]:
    entry = listener.to_dict()
    owners = []
    for pid in listener.pids:
        why = ownership(pid, ident)
        info = dict(describe_owner(pid), ours=why is not None, why=why)
        owners.append(info)
        if why is None and (pid, listener.address) not in seen:
            seen.add((pid, listener.address))
            foreign.append(dict(info, address=listener.address, family=listener.family))
    if not listener.pids and listener.uid is not None and listener.uid == os.geteuid():
        # the module's user's socket that no process holds: one being closed (a close() while
        # a poll still references it keeps it listed); it takes nothing from the launch
        entry["closing"] = True
    elif not listener.pids:
        foreign.append({"pid": None, "user": None, "address": listener.address,
                        "family": listener.family, "cmdline": UNREADABLE_OWNER})
    entry["owners"] = owners
    return entry


def _holders(listeners: List[_ports.Listener]) -> FrozenSet[Holder]:
    """The named holders with their start times; empty when one cannot be named."""
    out = set()
    for listener in listeners:
        if not listener.pids:
            return frozenset()
        for pid in listener.pids:
            start = _procs.start_time_of(pid)
            if start is None:
                return frozenset()
            out.add((pid, start))
    return frozenset(out)


# How long to wait before scanning again for a socket whose owner the scan did not find.
UNNAMED_RESCAN_S = 0.05


def port_owners(port: int, ident: LaunchIdentity, sleep: Any = time.sleep) -> PortOwners:
    """Every listener on `port`, each holder described and judged (one scan of the fd tables).
    A socket without a named owner is scanned once more first: psutil reads the processes' fds
    before the socket table, so a socket created in between (a server binding its port as the
    scan passes - the launch being waited for) has no owner in that scan, and an unnamed owner
    counts as foreign. Another user's socket stays unnamed and foreign."""
    found = _ports.listeners([port])
    if any(not listener.pids for listener in found):
        sleep(UNNAMED_RESCAN_S)
        found = _ports.listeners([port])
    foreign: List[Dict[str, Any]] = []
    seen: set = set()
    entries = [_entry(listener, ident, foreign, seen) for listener in found]
    return PortOwners(entries, foreign, _holders(found))


def _still_held(last: PortOwners, port: int) -> bool:
    """Does every holder `last` named still listen on exactly the port's addresses it did?"""
    if not last.holders:
        return False
    return all(_ports.sockets_of(pid, start, port) == last.sockets_of(pid) for pid, start in last.holders)


def current(port: int, ident: LaunchIdentity, last: Optional[PortOwners]) -> PortOwners:
    """The owners of `port` now: `last` while it found the launch listening and every holder it
    named is the same process, still on the same addresses (psutil reads only their fds), else a
    new scan. New sockets on addresses that do not collide with the launch's go unseen then."""
    # The launch's listening socket lets no one bind a colliding address (uvicorn: no SO_REUSEPORT).
    if last is not None and last.ours and _still_held(last, port):
        return last
    return port_owners(port, ident)
