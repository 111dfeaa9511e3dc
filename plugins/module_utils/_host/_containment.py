"""PRIVATE to llmops.sglang. Which containment a launch gets, and teardown by cgroup.

Backends:
  systemd where PID 1 is systemd: a transient unit per instance (see _containment_systemd); the
          unit's cgroup holds the supervisor from its exec on, so the server and everything it
          forks is a member.
  cgroup  the instance gets its own cgroup v2 directory (see _cgroup); the supervisor joins it
          before the server exists, so the server and every process it ever forks is a member,
          whatever it does to its session, parent, title or environment.
  none    no cgroup; members are found as before (launch record, process group, session,
          environment marker, titles, TMPDIR, log fd).

Teardown of a contained instance (`stop`) signals only processes listed in the instance's cgroup
at the moment of signalling, each through a pidfd checked as a member after it was opened; the
cgroup is recognised by the id recorded at launch, so a later cgroup of the same name (another
state dir's instance, a relaunch) is never touched through an older record.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._core import _poll
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment_systemd as _systemd
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

if TYPE_CHECKING:  # pidfds are opened by _cgroup.pin_members; a probe or a launch never compiles them
    from ansible_collections.llmops.sglang.plugins.module_utils._host._pidfd import Handle

BACKENDS = ("auto", "systemd", "cgroup", "none")
CONTAINED = ("cgroup", "systemd")
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# While waiting for the grace period, look for members forked after the SIGTERM this often.
RESCAN_S = 0.1
CMDLINE_LIMIT = 200


# --- choosing ---------------------------------------------------------------------------------

def _systemd_status() -> Tuple[bool, str]:
    return _systemd.available()


def _cgroup_status() -> Tuple[bool, str]:
    return _cgroup.writable(_cgroup.v2_mount())


def choose(requested: str) -> Tuple[str, str]:
    """(backend, why) for a launch. auto: systemd when PID 1 is systemd and this user can start
    system units (root, systemd-run, cgroup v2), else cgroup when cgroup v2 is writable by this
    user, else none. A named backend that is not
    available raises SglangError(containment_unavailable) saying why; nothing is created here."""
    if requested not in BACKENDS:
        raise SglangError("containment must be one of %s, got %r" % (", ".join(BACKENDS), requested),
                          reason="bad_option")
    if requested == "none":
        return "none", "containment none was requested: members are found by the launch record, session, " \
                       "marker and titles"
    sd_ok, sd_why = _systemd_status()
    if requested == "systemd":
        if not sd_ok:
            raise SglangError("containment systemd is not available: %s" % sd_why, reason="containment_unavailable")
        return "systemd", sd_why
    cg_ok, cg_why = _cgroup_status()
    if requested == "cgroup":
        if not cg_ok:
            raise SglangError("containment cgroup is not available: %s" % cg_why, reason="containment_unavailable")
        return "cgroup", cg_why
    if sd_ok:
        return "systemd", "auto: %s" % sd_why
    sd_note = "systemd not used (%s)" % sd_why if _systemd.pid1_is_systemd() else "PID 1 is not systemd"
    if cg_ok:
        return "cgroup", "auto: %s; %s" % (sd_note, cg_why)
    return "none", "auto: %s; cgroup not used (%s): members are found by the launch record, session, marker " \
                   "and titles" % (sd_note, cg_why)


# --- launch side --------------------------------------------------------------------------------

def boot_id() -> Optional[str]:
    try:
        with open(BOOT_ID, "r", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _mount_or_fail() -> str:
    mount = _cgroup.v2_mount()
    ok, why = _cgroup.writable(mount)
    if not ok or mount is None:
        raise SglangError("containment cgroup is not available: %s" % why, reason="containment_unavailable")
    return mount


def launch_problem(name: str, backend: str) -> Optional[str]:
    """Why a launch with `backend` would be refused, checked without creating anything (check
    mode): the instance cgroup (or unit) belongs to another user or still holds processes, or
    another user holds the slice's claim lock (no cgroup could be claimed after the teardown)."""
    if backend == "systemd":
        unit = _systemd.unit_name(_record.validate_name(name))
        state = _systemd.active_state(unit)
        if state in _systemd.BUSY:
            return "unit %s is %s: another launch of instance %r is still running" % (unit, state, name)
        return None
    if backend != "cgroup":
        return None
    mount = _cgroup.v2_mount()
    ok, why = _cgroup.writable(mount)
    if not ok or mount is None:
        return "containment cgroup is not available: %s" % why
    path = _cgroup.instance_path(mount, _record.validate_name(name))
    stuck = _cgroup.slice_problem(mount)
    if stuck:
        return stuck
    if not os.path.lexists(path):
        return None
    try:
        _cgroup.check_owned(path)
    except SglangError as exc:
        return exc.msg
    return _cgroup.busy_problem(path, name)


def prepare(name: str, backend: str, why: str = "", state_dir: Optional[str] = None) -> Dict[str, Any]:
    """The record fields of the containment, creating the instance cgroup for `cgroup` (fresh
    and empty, or SglangError cgroup_busy / unsafe_cgroup / containment_unavailable). The cgroup
    (or the unit) is CLAIMED for this launch: a second launch of the same name, from any state
    dir, is refused naming this one until `release` (and after it, while its members live)."""
    if backend == "none":
        return {"containment": "none", "containment_why": why, "cgroup": None}
    if backend == "cgroup":
        owner = {"state_dir": state_dir, "pid": os.getpid(), "claimed_at": round(time.time(), 3)}
        path = _cgroup.create(_mount_or_fail(), _record.validate_name(name), owner)
        return {"containment": "cgroup", "containment_why": why, "cgroup": path, "cgroup_id": _cgroup.cgroup_id(path),
                "boot_id": boot_id()}
    if backend == "systemd":
        ok, sd_why = _systemd.available()
        if not ok:
            raise SglangError("containment systemd is not available: %s" % sd_why, reason="containment_unavailable")
        unit = _systemd.unit_name(_record.validate_name(name))
        problem = launch_problem(name, "systemd")
        if problem:
            raise SglangError(problem + "; stop it with sglang_teardown first", reason="cgroup_busy", unit=unit)
        # A failed run of the unit must not keep the name taken. Never `stop`: another launch may
        # have started the unit since the look above, and stopping it would kill its server.
        _systemd.reset_failed(unit)
        # The claim is systemd-run itself (it refuses a unit name that exists); the unit's
        # description names its claimant, so a second one is refused naming the first and a
        # failed launch discards only a unit carrying its own claim.
        claim = "claim %s, state dir %s, launcher pid %d" % (uuid.uuid4().hex[:12], state_dir or "?", os.getpid())
        # cgroup and cgroup_id exist once the unit runs (systemd makes the cgroup): see unit_started
        return {"containment": "systemd", "containment_why": why, "unit": unit, "cgroup": None, "cgroup_id": None,
                "boot_id": boot_id(), "claim": claim}
    raise SglangError("containment backend must be none, cgroup or systemd for a launch, got %r" % (backend,),
                      reason="bad_option")


def unit_started(fields: Dict[str, Any]) -> None:
    """Fill in the cgroup of a unit just started (systemd made it, with a fresh id)."""
    path = _systemd.cgroup_path(fields["unit"])
    if path is None or not os.path.isdir(path):
        raise SglangError("unit %s runs but has no cgroup v2 directory" % fields["unit"],
                          reason="containment_failed", unit=fields["unit"])
    fields.update(cgroup=path, cgroup_id=_cgroup.cgroup_id(path))


def discard(fields: Dict[str, Any]) -> None:
    """Kill whatever is in a launch's cgroup and remove it (a launch that failed after the spawn),
    and only when it is still this launch's claim: a cgroup or unit another launch holds (a
    second claimant's failure) is never touched."""
    path = fields.get("cgroup")
    if fields.get("containment") == "systemd" and fields.get("unit"):
        if not _systemd.is_ours(fields["unit"], fields.get("claim")):
            return
        _systemd.kill(fields["unit"], "SIGKILL")
        if isinstance(path, str):
            _cgroup.wait_empty(path, time.monotonic() + 5.0)
        _systemd.release(fields["unit"])
        return
    if fields.get("containment") != "cgroup" or not isinstance(path, str):
        return
    if not _cgroup.holds(path, fields.get("cgroup_id")):
        return
    if _cgroup.populated(path):
        _cgroup.kill(path)
        _cgroup.wait_empty(path, time.monotonic() + 5.0)
    _cgroup.remove(path)  # before the claim goes: nobody can take the name in between


def release(fields: Dict[str, Any]) -> None:
    """The launch is over (its supervisor is inside its cgroup, or it failed and was discarded):
    this process's claim goes; the cgroup's members keep it taken while they live."""
    path = fields.get("cgroup")
    if fields.get("containment") == "cgroup" and isinstance(path, str):
        _cgroup.release(path)


# --- reading a record -----------------------------------------------------------------------------

def is_contained(record: Optional[Dict[str, Any]]) -> bool:
    """True for records of a contained launch. Records from before containment (no field) and
    containment none are found and torn down the old way."""
    return bool(record) and record.get("containment") in CONTAINED  # type: ignore[union-attr]


def resolve(record: Optional[Dict[str, Any]]) -> Tuple[Optional[str], List[str]]:
    """(path of the record's own cgroup, notes), path None when there is nothing to act on.

    The path acted on is derived from the record's name and this host's cgroup2 mount, never
    taken from the record as written; it must be the very cgroup the launch created (same boot,
    same cgroup id). Another owner raises SglangError(unsafe_cgroup): nothing is signalled."""
    if record is None or not is_contained(record):
        return None, ["the record has no cgroup (containment none, or written before containment existed)"]
    name = record.get("name")
    mount = _cgroup.v2_mount()
    if not isinstance(name, str) or mount is None:
        return None, ["no cgroup v2 hierarchy is mounted or the record names no instance"]
    notes: List[str] = []
    if record.get("containment") == "systemd":
        unit = _systemd.unit_name(_record.validate_name(name))
        if record.get("unit") != unit:
            notes.append("the record names unit %r; the instance's is %s" % (record.get("unit"), unit))
        found = _systemd.cgroup_path(unit)
        if found is None:
            return None, notes + ["unit %s has no cgroup: nothing of the launch is left" % unit]
        path = found
    else:
        path = _cgroup.instance_path(mount, _record.validate_name(name))
    if record.get("cgroup") != path:
        notes.append("the record names cgroup %r; this host keeps the instance's at %s" % (record.get("cgroup"), path))
    rec_boot = record.get("boot_id")
    if rec_boot and boot_id() and rec_boot != boot_id():
        return None, notes + ["the record is from an earlier boot: its cgroup no longer exists"]
    if not os.path.lexists(path):
        return None, notes + ["cgroup %s does not exist: nothing of the launch is left in it" % path]
    _cgroup.check_owned(path)
    rec_id = record.get("cgroup_id")
    if not isinstance(rec_id, int) or rec_id != _cgroup.cgroup_id(path):
        return None, notes + ["cgroup %s is not the one this launch created (id %s, recorded %r): it belongs to a "
                              "later launch and is left alone" % (path, _cgroup.cgroup_id(path), rec_id)]
    return path, notes


def _describe(pid: int) -> Dict[str, Any]:
    proc = _procs.read_proc(pid)
    if proc is None:
        return {"pid": pid, "name": "?", "cmdline": "", "user": "?"}
    return _redact.describe_process(proc, limit=CMDLINE_LIMIT)


def members_of(record: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The processes in the record's cgroup now (pid, name, user, cmdline): check mode and plans.
    Empty for an uncontained record or a cgroup that is gone or not this launch's."""
    path, _notes = resolve(record)
    if path is None:
        return []
    return [_describe(pid) for pid in _cgroup.members(path)]


def outside_members(record: Optional[Dict[str, Any]], pids: Iterable[int]) -> List[int]:
    """Of `pids` (processes the heuristics attribute to the recorded instance), the live ones that
    are not in its cgroup: escaped from containment, or started beside it. Empty when the record is
    not contained."""
    if not is_contained(record):
        return []
    path, _notes = resolve(record)
    inside = set(_cgroup.members(path)) if path else set()
    return sorted(pid for pid in set(pids) if pid not in inside and _procs.is_alive(pid))


def probe_view(record: Optional[Dict[str, Any]], pids: Iterable[int] = ()) -> Dict[str, Any]:
    """What the probe reports for one recorded instance: containment (and why), cgroup, unit,
    the live members, and `outside_members` of `pids` (what the heuristics attribute to the
    instance). Never raises: a cgroup that cannot be trusted is a note."""
    view: Dict[str, Any] = {"containment": (record or {}).get("containment", "none"),
                            "containment_why": (record or {}).get("containment_why"),
                            "cgroup": (record or {}).get("cgroup"), "unit": (record or {}).get("unit"),
                            "members": [], "outside_members": [], "notes": []}
    if not is_contained(record):
        return view
    try:
        path, notes = resolve(record)
    except SglangError as exc:
        view["notes"] = [exc.msg]
        return view
    view["notes"] = notes
    view["members"] = _cgroup.members(path) if path else []
    view["outside_members"] = outside_members(record, pids)
    return view


# --- teardown -------------------------------------------------------------------------------------

def _send(handles: Dict[int, Handle], pids: Iterable[int], sig: int) -> List[int]:
    return sorted(pid for pid in pids if handles[pid].send(sig) == "sent")


def _continue_stopped(handles: Dict[int, Handle], pids: Iterable[int]) -> None:
    """A stopped member (state T) acts on SIGTERM only once continued."""
    for pid in pids:
        proc = _procs.read_proc(pid)
        if proc is not None and proc.state in ("T", "t"):
            handles[pid].send(signal.SIGCONT)


def _grace(path: str, handles: Dict[int, Handle], info: Dict[int, Dict[str, Any]],
           sent: List[int], until: float) -> bool:
    """Wait for `populated 0` until `until`; members forked meanwhile get their SIGTERM too."""
    while True:
        if _cgroup.wait_empty(path, min(until, time.monotonic() + RESCAN_S)):
            return True
        if time.monotonic() >= until:
            return False
        new = {pid: h for pid, h in _cgroup.pin_members(path).items() if pid not in handles}
        for pid, handle in new.items():
            handles[pid] = handle
            info[pid] = dict(_describe(pid), appeared="after SIGTERM")
        sent.extend(_send(handles, new, signal.SIGTERM))


def _kill(record: Dict[str, Any], path: str) -> str:
    if record.get("containment") == "systemd":
        unit = _systemd.unit_name(record["name"])
        if _systemd.kill(unit, "SIGKILL"):
            return "systemctl kill --signal=SIGKILL"
    return _cgroup.kill(path)


def _remove(record: Dict[str, Any], path: str, deadline: float) -> bool:
    """rmdir the cgroup; for a unit, stop and forget it, and systemd removes its cgroup."""
    if record.get("containment") != "systemd":
        return _cgroup.remove(path)
    _systemd.release(_systemd.unit_name(record["name"]))
    return not _poll.until(lambda: os.path.exists(path), lambda there: not there, deadline, _cgroup.POLL_S)


def stop(record: Optional[Dict[str, Any]], grace_period: float, deadline: float) -> Dict[str, Any]:
    """Stop a contained instance by its cgroup: SIGTERM to every member, wait for `populated 0`
    up to `grace_period` seconds, then cgroup.kill (systemctl kill for a unit) and wait up to
    `deadline` (a time.monotonic() value), then rmdir (unit stopped: systemd removes the cgroup).
    Only members of the record's own cgroup are ever signalled.

    Returns: containment, cgroup, changed (a process was signalled), members (pid, name, user,
    cmdline, ended: SIGTERM | SIGKILL | alive), killed_with, empty, removed, survivors, notes,
    timings (seconds: signal = finding, pinning and SIGTERMing the members; term = until empty or
    the grace period's end, signal included; kill; remove; total). An empty or missing cgroup is
    changed=false."""
    t0 = time.monotonic()
    result: Dict[str, Any] = {"containment": record.get("containment", "none") if record else "none",
                              "cgroup": None, "changed": False, "members": [], "killed_with": None, "empty": True,
                              "removed": False, "survivors": [], "notes": [], "timings": {}}
    path, notes = resolve(record)
    result["notes"] = notes
    if path is None:
        result["timings"] = {"total": round(time.monotonic() - t0, 4)}
        return result
    result["cgroup"] = path
    handles = _cgroup.pin_members(path)
    try:
        info = {pid: _describe(pid) for pid in handles}
        sent = _send(handles, list(handles), signal.SIGTERM)
        _continue_stopped(handles, sent)
        t_sent = time.monotonic()
        empty = _grace(path, handles, info, sent, min(t0 + max(grace_period, 0.0), deadline))
        # populated 0 is set in the kernel's exit path just before a process becomes a zombie
        # (when its pidfd turns readable): once empty, every member has ended
        ended = {pid: "gone before SIGTERM" for pid in handles if pid not in sent}
        ended.update({pid: "SIGTERM" for pid, h in handles.items() if pid in sent and (empty or h.exited())})
        t1 = time.monotonic()
        if not empty:
            for pid, handle in _cgroup.pin_members(path).items():
                if pid in handles:
                    handle.close()
                    continue
                handles[pid] = handle
                info[pid] = dict(_describe(pid), appeared="after SIGTERM")
            result["killed_with"] = _kill(record, path)  # type: ignore[arg-type]
            empty = _cgroup.wait_empty(path, deadline)
        t2 = time.monotonic()
        for pid, handle in handles.items():
            ended.setdefault(pid, "SIGKILL" if empty or handle.exited() else "alive")
        survivors = sorted(_cgroup.members(path)) if not empty else []
        removed = empty and _remove(record, path, max(deadline, time.monotonic() + 1.0))  # type: ignore[arg-type]
        t3 = time.monotonic()
    finally:
        for handle in handles.values():
            handle.close()
    result.update(
        changed=bool(sent or result["killed_with"]),
        members=[dict(info[pid], ended=ended[pid]) for pid in sorted(info)],
        empty=empty, removed=removed, survivors=[_describe(pid) for pid in survivors],
        timings={"signal": round(t_sent - t0, 4), "term": round(t1 - t0, 4), "kill": round(t2 - t1, 4),
                 "remove": round(t3 - t2, 4), "total": round(t3 - t0, 4)})
    return result
