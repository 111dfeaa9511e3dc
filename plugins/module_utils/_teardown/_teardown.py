"""The teardown engine: plan, SIGTERM, wait, SIGKILL, wait, verify (ports, GPUs), clean files.

`make_plan` decides everything (targets, signals, files) without side effects, so check mode,
diff mode and the real run are built from the same plan. `execute` acts on it and proves the
result: no target alive (a zombie counts as gone), no listener on the managed ports, no target
listed on the managed GPUs. Anything else fails the task with the evidence.

Every destructive step acts on what was checked, not on a name: the plan holds a pidfd per
target (a recycled pid never receives a signal) and a descriptor per directory it deletes in
(a path swapped for a symlink leads nowhere). Processes that appear under a target during the
teardown join it only if they pass the same rules as planned ones.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment_systemd as _systemd
from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._host import _pidfd
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _purge
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._host import _shm
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core import _poll
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import (
    Scope, Selection, Target, World, adoption_refusal, contain, select)

POLL = 0.05          # process exit polling: GPU memory is free ~0.6 s after SIGKILL on an H200
GPU_POLL = 0.2       # NVML / nvidia-smi are slower to query than /proc


@dataclass
class Options:
    """How a teardown signals, waits and cleans up."""

    grace_period: float = 30.0
    timeout: float = 60.0
    shm_cleanup: bool = True
    shm_dir: str = _shm.SHM_DIR
    purge_paths: List[str] = field(default_factory=list)
    gpu_backend: str = "auto"
    takeover: List[str] = field(default_factory=list)  # other instances this teardown may stop, by name


def validate_options(opts: Options, state_dir: Optional[str]) -> None:
    """Refuse bad options before anything is looked at; purge paths are replaced by their
    normalised form AS GIVEN, never the resolved one (the deny-list judges both; what is
    emptied is walked with O_NOFOLLOW, so it holds no symlink and holders match it)."""
    if opts.grace_period < 0:
        raise SglangError("grace_period must be >= 0 (got %s)" % opts.grace_period, reason="bad_option")
    if opts.timeout < 0:
        raise SglangError("timeout must be >= 0 (got %s)" % opts.timeout, reason="bad_option")
    if opts.gpu_backend not in _gpus.BACKENDS:
        raise SglangError("gpu_backend must be one of %s" % ", ".join(_gpus.BACKENDS), reason="bad_option")
    for name in opts.takeover:
        try:
            _record.validate_name(name)
        except SglangError as exc:
            raise SglangError("takeover: %s" % exc.msg, reason="bad_option")
    opts.purge_paths = [_purge.check_purge_path(path, state_dir, opts.shm_dir) for path in opts.purge_paths]


# --- plan -------------------------------------------------------------------------------------

@dataclass
class SignalStep:
    """One signal delivery: to a process group, or to a single pid."""

    kind: str          # "group" | "pid"
    ident: int         # pgid or pid
    pids: List[int]

    def to_dict(self, sig: str) -> Dict[str, object]:
        return {"signal": sig, "kind": self.kind, "id": self.ident, "pids": sorted(self.pids)}


@dataclass
class Dirs:
    """The directories files are deleted in, each opened and checked once (see _purge)."""
    shm: Optional[_purge.CheckedDir] = None
    purge: List[_purge.CheckedDir] = field(default_factory=list)

    def close(self) -> None:
        for checked in ([self.shm] if self.shm else []) + self.purge:
            checked.close()


@dataclass
class Plan:
    """Everything a teardown decided before it signals anything."""

    scope: Scope
    selection: Selection
    world: World
    record: Optional[Dict[str, object]]
    steps: List[SignalStep]
    files: List[_shm.ShmEntry]            # would be removed (holders other than targets: none)
    kept: List[_shm.ShmEntry]             # held by a live process that stays
    tmpdir: Optional[str]
    tmpdir_note: Optional[str]
    record_files: List[str]
    handles: Dict[int, _pidfd.Handle] = field(default_factory=dict)   # targets alive when planned
    dirs: Dirs = field(default_factory=Dirs)
    contained: bool = False               # the record names a cgroup: it is the member list
    cgroup: Optional[str] = None          # the launch's own cgroup, when it still exists
    members: List[Dict[str, object]] = field(default_factory=list)    # its processes when planned
    damaged: Optional[Dict[str, object]] = None  # the damaged launch record, kept aside (record_damaged)

    @property
    def targets(self) -> Dict[int, Target]:
        return self.selection.targets

    @property
    def live(self) -> Set[int]:
        """Targets that were alive when planned (a pidfd could be taken on them)."""
        return set(self.handles)

    def close(self) -> None:
        """Release the pidfds and directory descriptors (idempotent)."""
        for handle in self.handles.values():
            handle.close()
        self.dirs.close()


def signal_steps(targets: Dict[int, Target], procs: Dict[int, _procs.Proc],
                 own_pids: Set[int]) -> List[SignalStep]:
    """A "group" step where the WHOLE group is targets (its members are signalled one by one
    through their pidfds, and processes forked into the group meanwhile are adopted while a
    planned member lives); "pid" steps otherwise: a nohup server shares its group with the
    operator's shell."""
    steps: List[SignalStep] = []
    by_group: Dict[int, List[int]] = {}
    for pid, target in targets.items():
        by_group.setdefault(target.proc.pgid, []).append(pid)
    for pgid, pids in sorted(by_group.items()):
        members = [p.pid for p in procs.values() if p.pgid == pgid and not p.is_zombie]
        whole = pgid > 1 and all(m in targets for m in members) and not (set(members) & own_pids)
        if whole:
            steps.append(SignalStep("group", pgid, sorted(pids)))
        else:
            steps.extend(SignalStep("pid", pid, [pid]) for pid in sorted(pids))
    return steps


def _tmpdir_of(record: Optional[Dict[str, object]], state_dir: Optional[str],
               name: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """The instance's own TMPDIR (ZMQ sockets live there), only where we are sure it is ours."""
    if not name or not state_dir:
        return None, None
    conventional = _record.tmpdir_path(state_dir, name)
    path = record.get("tmpdir") if record else None
    if not isinstance(path, str) or not path:
        path = conventional
    if not os.path.lexists(path):
        return None, None
    real, base = os.path.realpath(path), os.path.realpath(state_dir)
    if os.path.islink(path) or not os.path.isdir(path):
        return None, "tmpdir %s is not a plain directory: kept" % path
    if not (real.startswith(base + os.sep) or os.path.basename(real) == "%s.tmp" % name):
        return None, "tmpdir %s is outside the state dir: kept" % path
    return path, None


def open_dirs(opts: Options, euid: int) -> Dirs:
    """Open and check the shm dir and every purge dir, or raise SglangError(unsafe_purge_path)
    before anything is signalled (check mode too, so a play can refuse before stopping)."""
    dirs = Dirs()
    try:
        if opts.shm_cleanup:
            dirs.shm = _purge.open_checked(os.path.realpath(opts.shm_dir), euid, shared_ok=True)
        for path in opts.purge_paths:
            dirs.purge.append(_purge.open_checked(path, euid))
    except BaseException:
        dirs.close()
        raise
    return dirs


def _file_candidates(dirs: Dirs, scope: Scope, euid: int, ignore: Set[int]
                     ) -> Tuple[List[_shm.ShmEntry], List[_shm.ShmEntry]]:
    """Known /dev/shm patterns (only the module user's files unless all_users) + children of
    purge dirs; a holder that is a target (about to die) does not count, any other live holder
    keeps the file. The /proc walk for holders runs only when there is something to delete."""
    entries: List[_shm.ShmEntry] = []
    if dirs.shm is not None and dirs.shm.fd is not None:
        entries.extend(_shm.scan_checked(dirs.shm, _shm.PATTERNS, {}, owner=None if scope.all_users else euid))
    for checked in dirs.purge:
        entries.extend(_shm.purge_checked(checked, {}))
    if not entries:
        return [], []
    opened = [d for d in ([dirs.shm] if dirs.shm else []) + dirs.purge if d.fd is not None]
    held = _shm.open_or_mapped([d.path for d in opened], skip=ignore)
    held = {path: {p for p in pids if _procs.is_alive(p)} for path, pids in held.items()}
    held = {path: pids for path, pids in held.items() if pids}
    for entry in entries:
        entry.holders = _shm.holders(entry.path, held)
    return [e for e in entries if not e.holders], [e for e in entries if e.holders]


def _record_files(scope: Scope) -> List[str]:
    """The instance's record and exit file, those that exist now."""
    if not (scope.name and scope.state_dir):
        return []
    return [p for p in (_record.record_path(scope.state_dir, scope.name),
                        _record.exit_path(scope.state_dir, scope.name)) if os.path.exists(p)]


def _launch_exited(scope: Scope, record: Optional[Dict[str, object]]) -> bool:
    """The launch's exit file exists (the supervisor writes it when the server has exited)."""
    if not (record and scope.name and scope.state_dir):
        return False
    launch_id = record.get("launch_id")
    path = _record.exit_path(scope.state_dir, scope.name)
    return _record.read_launch_exit(path, launch_id if isinstance(launch_id, str) else None) is not None


def open_handles(targets: Dict[int, Target]) -> Dict[int, _pidfd.Handle]:
    """A pidfd per target, verified against the planned start time; a target already gone
    gets none (and is never signalled)."""
    handles: Dict[int, _pidfd.Handle] = {}
    for pid, target in targets.items():
        handle = _pidfd.open_handle(pid, target.proc.start_time)
        if handle is not None:
            handles[pid] = handle
    return handles


def _read_record(scope: Scope, check_mode: bool) -> Tuple[Optional[Dict[str, object]], Optional[Dict[str, object]]]:
    """(the instance's launch record, what was damaged). A damaged record (zero bytes, cut short)
    is kept aside for inspection (renamed; check mode: only named) and read as no record: the
    instance is still found by its marker, ports and cgroup (_recovered_cgroup)."""
    if not (scope.name and scope.state_dir):
        return None, None
    damaged = _record.damaged_record(scope.state_dir, scope.name, check_mode) \
        if os.path.isdir(scope.state_dir) else None
    if damaged is not None:
        return None, damaged
    return _record.read_record(scope.state_dir, scope.name), None


def _marked_ours(pid: int, scope: Scope) -> bool:
    """The process carries this instance's marker (name and state dir)."""
    env = _procs.read_environ(pid) or {}
    their_dir = env.get(_procs.MARKER_STATE_DIR)
    return (env.get(_procs.MARKER_INSTANCE) == scope.name and bool(their_dir) and bool(scope.state_dir)
            and os.path.realpath(their_dir or "") == os.path.realpath(scope.state_dir or ""))


def _recovered_cgroup(scope: Scope) -> Optional[Dict[str, object]]:
    """Without a launch record (missing, or set aside as damaged), the containment it would have
    named: the instance's own cgroup (its path follows from the name), when it exists, belongs to
    root or the module's user, and every process in it carries this instance's marker - or it is
    empty (then it is only removed). Another state dir's instance of the same name is never taken."""
    mount = _cgroup.v2_mount()
    if not scope.name or mount is None:
        return None
    found: List[Tuple[str, str, Optional[str]]] = []
    if _systemd.pid1_is_systemd():
        unit = _systemd.unit_name(scope.name)
        path = _systemd.cgroup_path(unit)
        if path and os.path.isdir(path):
            found.append(("systemd", path, unit))
    path = _cgroup.instance_path(mount, scope.name)
    if not found and os.path.isdir(path) and not os.path.islink(path):
        found.append(("cgroup", path, None))
    if not found:
        return None
    backend, path, unit = found[0]
    _cgroup.check_owned(path)  # another owner: unsafe_cgroup, before any signal
    if not all(_marked_ours(pid, scope) for pid in _cgroup.members(path)):
        return None
    return {"name": scope.name, "containment": backend, "unit": unit, "cgroup": path,
            "cgroup_id": _cgroup.cgroup_id(path), "boot_id": _containment.boot_id(),
            "containment_why": "recovered without a launch record: the instance's cgroup, every member marked"}


def make_plan(scope: Scope, opts: Options, world: Optional[World] = None, check_mode: bool = False) -> Plan:
    euid = world.euid if world else os.geteuid()
    dirs = open_dirs(opts, euid)
    handles: Dict[int, _pidfd.Handle] = {}
    try:
        world = world or World.capture(scope, opts.gpu_backend, timeout=opts.timeout)
        record, damaged = _read_record(scope, check_mode)
        record_files = _record_files(scope)
        selection = select(scope, world, record, _launch_exited(scope, record))
        if damaged is not None:
            selection.record_notes.append(_record.damaged_text(scope.name or "", damaged))
        if record is None:  # the cgroup the record would name, when it is provably this instance's
            record = _recovered_cgroup(scope)
            if record is not None:
                selection.record_notes.append("no launch record: the instance's cgroup %s was found by its name "
                                              "and its members' marker" % record["cgroup"])
        contained = _containment.is_contained(record)
        cgroup, members = _cgroup_of(record, selection) if contained else (None, [])
        handles = open_handles(selection.targets)
        steps = signal_steps(selection.targets, world.procs, world.own_pids)
        member_pids = {int(m["pid"]) for m in members}  # type: ignore[call-overload]
        files, kept = _file_candidates(dirs, scope, world.euid, set(selection.targets) | member_pids)
        tmpdir, note = _tmpdir_of(record, scope.state_dir, scope.name)
    except BaseException:
        for handle in handles.values():
            handle.close()
        dirs.close()
        raise
    return Plan(scope, selection, world, record, steps, files, kept, tmpdir, note, record_files, handles, dirs,
                contained, cgroup, members, damaged)


def _cgroup_of(record: Optional[Dict[str, object]], selection: Selection
               ) -> Tuple[Optional[str], List[Dict[str, object]]]:
    """The contained launch's cgroup and members (the authoritative list); the selection keeps
    only what direct reasons found outside it. A cgroup of another owner raises unsafe_cgroup
    here, before any signal."""
    path, notes = _containment.resolve(record)
    selection.record_notes.extend(notes)
    members = _containment.members_of(record) if path else []
    contain(selection, [int(m["pid"]) for m in members])
    return path, members


TEARDOWN_PLAYBOOK = "ansible-playbook playbooks/teardown.yml -e sglang_name=%s"


def _other_instances(plan: Plan, takeover: List[str]) -> List[Dict[str, object]]:
    """The other instances among the targets (found on a managed port) that `takeover` does not
    name: name, state dir, pids - what the refusal names."""
    found: Dict[Tuple[str, str], List[int]] = {}
    for pid, name in sorted(plan.selection.other_instance_targets.items()):
        if name in takeover:
            continue
        marker = _procs.marker_of(pid) or {}
        found.setdefault((name, marker.get(_procs.MARKER_STATE_DIR) or "?"), []).append(pid)
    return [{"name": n, "state_dir": d, "pids": p} for (n, d), p in sorted(found.items())]


def _other_instance_error(plan: Plan, others: List[Dict[str, object]]) -> SglangError:
    ports = ", ".join(str(p) for p in plan.scope.ports) or "a managed port"
    named = []
    for other in others:
        command = TEARDOWN_PLAYBOOK % other["name"]
        if other["state_dir"] not in ("?", plan.scope.state_dir):
            command += " -e sglang_state_dir=%s" % other["state_dir"]
        named.append("instance %r (pids %s, state dir %s) - stop it with `%s` (or an ad hoc "
                     "llmops.sglang.sglang_teardown with name=%s state_dir=%s)" % (
                         other["name"], ", ".join(map(str, other["pids"])), other["state_dir"], command,
                         other["name"], other["state_dir"]))
    return SglangError("refusing to tear down: %s is held by another instance, which a teardown of %r never "
                       "stops: %s; or name it in the teardown's takeover (takeover: [%s]) to let this run stop it. "
                       "Nothing was stopped" % (ports, plan.scope.name, "; ".join(named),
                                                ", ".join(str(o["name"]) for o in others)),
                       reason="other_instance", other_instances_on_ports=others)


def check_preconditions(plan: Plan, takeover: Optional[List[str]] = None) -> None:
    """Refuse BEFORE any signal: scope conflicts, another instance on a managed port (unless
    taken over by name), foreign GPU users (foreign_gpu_processes=fail)."""
    sel = plan.selection
    if sel.conflicts:
        raise SglangError("refusing to tear down: " + "; ".join(sel.conflicts), reason="scope_conflict")
    others = _other_instances(plan, list(takeover or []))
    if others:
        raise _other_instance_error(plan, others)
    # with kill, a foreign user that is protected (or another user's) still blocks
    refuse = plan.scope.foreign_gpu_processes == "fail" or any("why_not" in f for f in sel.foreign_gpu)
    if sel.foreign_gpu and refuse:
        named = []
        for f in sel.foreign_gpu:
            usage = ", ".join("GPU %s: %s GiB" % kv for kv in f["gpus"].items())
            named.append("pid %s (user %s, %s, %s)" % (f["pid"], f["user"], f["cmdline"], usage))
        raise SglangError("refusing to tear down: %d process(es) that are not targets compute on the managed GPUs: "
                          "%s. Set foreign_gpu_processes=kill to stop them, ignore to leave them, or narrow "
                          "gpus" % (len(named), "; ".join(named)), reason="foreign_gpu_processes")


# --- act --------------------------------------------------------------------------------------

def _deliver(steps: List[SignalStep], handles: Dict[int, _pidfd.Handle], sig: int,
             errors: List[str]) -> List[Dict[str, object]]:
    """Send `sig` to every planned process of the steps through its own pidfd. No killpg: a
    group id can outlive its members and be reused; processes forked into the group meanwhile
    are adopted (with the same rules) instead."""
    sent: List[Dict[str, object]] = []
    name = signal.Signals(sig).name
    for step in steps:
        reached = []
        for pid in step.pids:
            handle = handles.get(pid)
            if handle is None:
                continue
            outcome = handle.send(sig)
            if outcome == "sent":
                reached.append(pid)
            elif outcome != "gone":
                errors.append("kill(%d, %s): %s" % (pid, name, outcome))
        if reached:
            sent.append({"signal": name, "kind": step.kind, "id": step.ident, "pids": sorted(reached)})
    return sent


def _continue(sent: List[Dict[str, object]], handles: Dict[int, _pidfd.Handle],
              errors: List[str]) -> List[Dict[str, object]]:
    """SIGCONT right after SIGTERM to the processes it reached, as systemd does: a stopped
    (SIGSTOP, job control) process cannot run its SIGTERM handler, its graceful shutdown, until
    it is continued; a running one ignores SIGCONT. Without it a stopped server sat out the whole
    grace period and was SIGKILLed."""
    steps = [SignalStep(str(s["kind"]), int(s["id"]), list(s["pids"]))  # type: ignore[call-overload]
             for s in sent if s["signal"] == "SIGTERM"]
    return _deliver(steps, handles, signal.SIGCONT, errors)


def _wait_gone(handles: Dict[int, _pidfd.Handle], pending: Set[int], deadline: float, ended: Dict[int, str],
               label: str) -> None:
    """Until every pending target has exited or the deadline; pidfds wake the wait on exit.

    Not psutil.wait_procs: for a process that is not our child it polls whether the pid exists,
    so a zombie whose parent has not reaped it (exited: its ports and memory are free) reads as
    alive until the deadline, a pid reused meanwhile reads as the target still running, and it
    sleeps in steps instead of waking on the exit. A pidfd turns readable exactly when the
    planned process exits."""
    while pending:
        for pid in list(pending):
            if handles[pid].exited():
                pending.discard(pid)
                ended.setdefault(pid, label)
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            return
        _pidfd.wait_exit([handles[p] for p in pending], min(POLL, left))


def _adopt(plan: Plan, targets: Dict[int, Target], handles: Dict[int, _pidfd.Handle]) -> List[int]:
    """Processes that appeared under a live target after the plan (a server forking during
    shutdown, a worker forked into a whole-target process group) join the teardown, if they pass
    the rules every planned target passed. A pid the plan refused is never adopted.

    Parent and group links are read first, the parents' (or group anchors') liveness checked
    after: a parent still alive then was alive when its child was read, so the relation is
    real and the group id cannot have been reused."""
    links = _procs.links()
    kids: Dict[int, List[int]] = {}
    for pid, (ppid, _pgid) in links.items():
        kids.setdefault(ppid, []).append(pid)
    live = {pid for pid, h in handles.items() if pid in targets and not h.exited()}
    whole_groups = {s.ident for s in plan.steps if s.kind == "group"}
    anchored = {targets[pid].proc.pgid for pid in live} & whole_groups
    sel = plan.selection
    added: List[int] = []
    queue: List[Tuple[int, int, str]] = [(child, parent, "child of %d" % parent)
                                         for parent in sorted(live) for child in kids.get(parent, [])]
    queue += [(pid, pgid, "member of process group %d" % pgid) for pid, (_ppid, pgid) in sorted(links.items())
              if pgid in anchored and pid not in targets]
    while queue:
        pid, via, relation = queue.pop(0)
        if pid in targets or pid in sel.never:
            continue
        proc = _procs.read_proc(pid)
        if proc is None or proc.is_zombie:
            continue
        reason = "%s (appeared during teardown)" % relation
        parent = targets.get(via)
        via_port = bool(parent and parent.via_port)
        why = adoption_refusal(proc, plan.scope, plan.world, via_port=via_port)
        if why:
            sel.refuse(proc, [reason], why, plan.world)
            continue
        handle = _pidfd.open_handle(pid, proc.start_time)
        if handle is None:
            continue      # already gone
        targets[pid] = Target(proc, [reason], via_port=via_port)
        handles[pid] = handle
        added.append(pid)
        queue.extend((child, pid, "child of %d" % pid) for child in kids.get(pid, []))
    return added


def _wchan(pid: int) -> str:
    """Where a D-state process sleeps in the kernel: psutil has no API for wchan."""
    try:
        with open("/proc/%d/wchan" % pid) as fh:
            return fh.read().strip() or "0"
    except OSError:
        return "?"


def _gpu_holders(plan: Plan, pids: Set[int], backend: str) -> Tuple[Dict[int, Dict[int, Optional[int]]], _gpus.GpuReport]:
    report = _gpus.query_gpus(backend)
    on = report.pids_on(plan.scope.gpus)
    return {pid: usage for pid, usage in on.items() if pid in pids}, report


def _gpus_after(report: _gpus.GpuReport, indexes: Optional[List[int]]) -> List[Dict[str, object]]:
    return [{"index": g.index, "uuid": g.uuid, "memory_used_mib": g.memory_used_mib,
             "memory_total_mib": g.memory_total_mib, "processes": [p.to_dict() for p in g.processes]}
            for g in report.gpus if indexes is None or g.index in indexes]


def _remove_files(plan: Plan) -> Tuple[List[Dict[str, object]], List[Dict[str, object]], List[str]]:
    """Re-list after the processes are gone, through the descriptors checked when planning:
    only files no live process holds are removed."""
    files, kept = _file_candidates(plan.dirs, plan.scope, plan.world.euid, set())
    removed: List[Dict[str, object]] = []
    errors: List[str] = []
    for entry in files:
        err = _shm.remove(entry)
        if err:
            errors.append("%s: %s" % (entry.path, err))
        else:
            removed.append({"path": entry.path, "size": entry.size})
    return removed, [_kept(e) for e in kept], errors


def _remove_instance_files(plan: Plan, errors: List[str]) -> Tuple[Optional[str], List[str]]:
    """The instance TMPDIR and, re-listed now (the supervisor writes <name>.exit.json as the
    server dies, after planning), the record and exit file: through descriptors of the state dir."""
    tmpdir_removed = None
    euid = plan.world.euid
    if plan.tmpdir:
        real = os.path.join(os.path.realpath(os.path.dirname(plan.tmpdir)), os.path.basename(plan.tmpdir))
        try:
            done, problems = _purge.remove_dir(real, euid)
        except SglangError as exc:
            done, problems = False, [exc.msg]
        errors.extend(problems)
        tmpdir_removed = plan.tmpdir if done else None
    record_removed: List[str] = []
    paths = _record_files(plan.scope)
    if not paths:
        return tmpdir_removed, record_removed
    try:
        state = _purge.open_checked(os.path.realpath(os.path.dirname(paths[0])), euid)
    except SglangError as exc:
        errors.append(exc.msg)
        return tmpdir_removed, record_removed
    try:
        for path in paths:
            problems = _purge.remove_at(state.fd, os.path.basename(path), state.dev, owner=euid) \
                if state.fd is not None else []
            if problems:
                errors.extend("%s: %s" % (os.path.dirname(path), p) for p in problems)
            else:
                record_removed.append(path)
    finally:
        state.close()
    return tmpdir_removed, record_removed


def _kept(entry: _shm.ShmEntry) -> Dict[str, object]:
    holders = []
    for pid in entry.holders:
        proc = _procs.read_proc(pid)
        holders.append({"pid": pid, "name": proc.comm if proc else "?", "user": proc.user if proc else "?"})
    return {"path": entry.path, "size": entry.size, "held_by": holders}


CGROUP_REASON = "member of the instance's cgroup %s"


def member_targets(members: List[Dict[str, object]], cgroup: Optional[str], known: Set[int],
                   procs: Optional[Dict[int, _procs.Proc]] = None) -> List[Dict[str, object]]:
    """The cgroup's members in the shape of `targets` (they are stopped through the cgroup, not
    one by one, but they are what the teardown stops): one count for the result, the diff and
    the summary. `known` pids are already listed as per-process targets."""
    out: List[Dict[str, object]] = []
    for member in members:
        pid = int(member["pid"])  # type: ignore[call-overload]
        if pid in known:
            continue
        proc = (procs or {}).get(pid)
        entry: Dict[str, object] = {"pid": pid, "name": member.get("name"), "cmdline": member.get("cmdline"),
                                    "user": member.get("user"), "pgid": proc.pgid if proc else None,
                                    "sid": proc.sid if proc else None,
                                    "start_time": proc.start_time if proc else None,
                                    "reasons": [CGROUP_REASON % cgroup]}
        out.append(entry)
    return out


def _all_targets(per_process: List[Dict[str, object]], members: List[Dict[str, object]]) -> List[Dict[str, object]]:
    return sorted(per_process + members, key=lambda t: int(t["pid"]))  # type: ignore[call-overload]


def summary(plan: Plan) -> Dict[str, object]:
    sel = plan.selection
    own = [sel.targets[pid].to_dict() for pid in sorted(sel.targets)]
    return {
        "targets": _all_targets(own, member_targets(plan.members, plan.cgroup, set(sel.targets), plan.world.procs)),
        "other_instances": sel.other_instances,
        "other_namespaces": sel.other_namespaces,
        "device_file_holders": sel.device_file_holders,
        "device_file_holders_scan": plan.world.device_scan,
        "port_holders_scan": plan.world.port_scan,
        "foreign_gpu_processes": sel.foreign_gpu,
        "spared": sel.spared,
        "outside_cgroup": sel.outside_cgroup,
        "foreign_listeners": sel.foreign_listeners,
        "record": {"notes": sel.record_notes, "files": plan.record_files, "tmpdir": plan.tmpdir,
                   "tmpdir_note": plan.tmpdir_note},
        "record_damaged": plan.damaged,
    }


def _live_targets(plan: Plan) -> Dict[int, Target]:
    """Targets alive when planned (the ones a real run signals)."""
    return {pid: t for pid, t in plan.targets.items() if pid in plan.live}


def check_mode_result(plan: Plan) -> Dict[str, object]:
    """What a real run would do, from the same plan, changing nothing."""
    live = _live_targets(plan)
    result = summary(plan)
    result.update({
        "signals": [s.to_dict("SIGTERM") for s in plan.steps if set(s.pids) & set(live)],
        "killed": [], "survivors": [], "d_state": [], "gpus_after": [],
        "shm_removed": [{"path": e.path, "size": e.size} for e in plan.files],
        "shm_kept": [_kept(e) for e in plan.kept],
        "tmpdir_removed": plan.tmpdir, "record_removed": plan.record_files,
    })
    if plan.contained:
        pids = sorted(int(m["pid"]) for m in plan.members)  # type: ignore[call-overload]
        if pids:
            result["signals"].insert(0, {"signal": "SIGTERM", "kind": "cgroup", "id": plan.cgroup,  # type: ignore[attr-defined]
                                         "pids": pids})
        result["containment"] = {"cgroup": plan.cgroup, "members": plan.members, "removed": False,
                                 "killed_with": None, "timings": {}}
    result["changed"] = bool(live or plan.members or plan.files or plan.tmpdir or plan.record_files)
    # the processes a real run would stop: the same count as the diff's and the SIGTERM steps'
    result["stopped"] = len(set(live) | {int(m["pid"]) for m in plan.members})  # type: ignore[call-overload]
    return result


def diff_of(plan: Plan, result: Dict[str, object]) -> Dict[str, str]:
    live = _live_targets(plan)
    procs = {pid: str(t.to_dict()["cmdline"]) for pid, t in live.items()}
    procs.update({int(m["pid"]): "%s (cgroup %s)" % (m["cmdline"], plan.cgroup)  # type: ignore[call-overload]
                  for m in plan.members})
    before_procs = ["process %d %s" % (pid, line) for pid, line in sorted(procs.items())]
    survivors = {s["pid"] for s in result.get("survivors", [])}  # type: ignore[union-attr]
    files = [e.path for e in plan.files] + ([plan.tmpdir] if plan.tmpdir else []) + plan.record_files
    removed = {f["path"] for f in result.get("shm_removed", [])}  # type: ignore[union-attr]
    if result.get("tmpdir_removed"):
        removed.add(result["tmpdir_removed"])  # type: ignore[arg-type]
    removed.update(result.get("record_removed") or [])  # type: ignore[arg-type]
    after_procs = [line for line, pid in zip(before_procs, sorted(procs)) if pid in survivors]
    after_files = [f for f in files if f not in removed]
    return {"before": "\n".join(before_procs + ["file " + f for f in files]) + "\n",
            "after": "\n".join(after_procs + ["file " + f for f in after_files]) + "\n"}


@dataclass
class Run:
    """What the acting phases share: the targets (planned and adopted) with their pidfds, how
    each one ended, what is still alive, the signals sent and the errors met."""
    targets: Dict[int, Target]
    handles: Dict[int, _pidfd.Handle]
    ended: Dict[int, str] = field(default_factory=dict)
    pending: Set[int] = field(default_factory=set)
    errors: List[str] = field(default_factory=list)
    signals: List[Dict[str, object]] = field(default_factory=list)
    timings: Dict[str, float] = field(default_factory=dict)
    cg: Optional[Dict[str, object]] = None
    deadline: float = 0.0     # end of `timeout` after the grace period (SIGKILL, ports, GPUs)


def execute(plan: Plan, opts: Options) -> Dict[str, object]:
    """Stop the targets and prove it: the result, or SglangError with the reason set by the
    phase that found the failure and the whole result as details. Releases the plan's
    descriptors (and the pidfds of processes adopted on the way) when done."""
    run = Run(targets=dict(plan.targets), handles=dict(plan.handles))
    try:
        if plan.contained:
            _stop_contained(plan, opts, run)
        _term(plan, opts, run)
        _kill(plan, opts, run)
        survivors, d_state = _leftovers(run)
        ports_after, gpu_left, report = _verify_phase(plan, opts, run)
        ok = not survivors and not ports_after and not gpu_left and not run.errors
        files = _clean(plan, ok, run)
        result = _result(plan, run, survivors, d_state, files)
        result.update(ports_after=ports_after, gpu_processes_left=gpu_left,
                      gpus_after=_gpus_after(report, plan.scope.gpus) if report else [])
        _raise_on_failure(result, opts, run.errors)
        return result
    finally:
        for pid, handle in run.handles.items():
            if pid not in plan.handles:
                handle.close()
        plan.close()


def _verify_phase(plan: Plan, opts: Options, run: Run
                  ) -> Tuple[List[Dict[str, object]], Dict[int, Dict[int, Optional[int]]], Optional[_gpus.GpuReport]]:
    """Phase 3: ports and GPUs free of every target, within the same deadline as SIGKILL."""
    t = time.monotonic()
    stopped = set(run.targets) | (run.cg["pids"] if run.cg else set())  # type: ignore[operator]
    found = _verify(plan, opts, stopped, run.deadline)
    run.timings["verify"] = round(time.monotonic() - t, 3)
    return found


_CGROUP_ENDED = {"gone before SIGTERM": "already-gone"}


def _stop_cgroup(plan: Plan, opts: Options) -> Dict[str, object]:
    """Stop a contained launch through its cgroup (_containment.stop) and put the outcome in the
    shapes of the per-process engine: killed, signals, survivors, plus the containment summary."""
    cg = _containment.stop(plan.record, opts.grace_period,
                           time.monotonic() + opts.grace_period + opts.timeout)
    path = cg["cgroup"]
    reason = "member of the instance's cgroup %s" % path
    killed: List[Dict[str, object]] = []
    termed: List[int] = []
    for member in cg["members"]:
        ended = str(member["ended"])
        if ended == "alive":
            continue
        if ended in ("SIGTERM", "SIGKILL"):
            termed.append(int(member["pid"]))
        killed.append({"pid": member["pid"], "name": member["name"], "cmdline": member["cmdline"],
                       "user": member["user"], "reason": reason, "signal": _CGROUP_ENDED.get(ended, ended)})
    signals: List[Dict[str, object]] = []
    if termed:
        signals.append({"signal": "SIGTERM", "kind": "cgroup", "id": path, "pids": sorted(termed)})
    if cg["killed_with"]:
        signals.append({"signal": "SIGKILL", "kind": "cgroup", "id": path, "via": cg["killed_with"],
                        "pids": sorted(int(m["pid"]) for m in cg["members"] if m["ended"] == "SIGKILL")})
    survivors = []
    for survivor in cg["survivors"]:
        proc = _procs.read_proc(int(survivor["pid"]))
        survivors.append(dict(survivor, state=proc.state if proc else "?", reasons=[reason]))
    return {"killed": killed, "signals": signals, "survivors": survivors, "changed": bool(cg["changed"]),
            "pids": {int(m["pid"]) for m in cg["members"]},
            "containment": {"cgroup": path, "members": cg["members"], "removed": cg["removed"],
                            "killed_with": cg["killed_with"], "notes": cg["notes"], "timings": cg["timings"]}}


def _stop_contained(plan: Plan, opts: Options, run: Run) -> None:
    """Phase 0 (contained launches): the cgroup is the member list; stop it first."""
    run.cg = _stop_cgroup(plan, opts)
    run.signals += run.cg["signals"]  # type: ignore[arg-type]
    run.timings["cgroup"] = run.cg["containment"]["timings"].get("total", 0.0)  # type: ignore[index]


def _term(plan: Plan, opts: Options, run: Run) -> None:
    """Phase 1: SIGTERM (then SIGCONT) through the pidfds, adopt what appeared under a target,
    wait up to the grace period."""
    for pid in run.targets:
        if pid not in run.handles or run.handles[pid].exited():
            run.ended[pid] = "already-gone"
    run.pending = {pid for pid in run.targets if pid not in run.ended}
    t = time.monotonic()
    if run.pending:
        sent = _deliver(plan.steps, run.handles, signal.SIGTERM, run.errors)
        run.signals += sent + _continue(sent, run.handles, run.errors)
        new = _adopt(plan, run.targets, run.handles)
        if new:
            run.pending.update(new)
            sent = _deliver([SignalStep("pid", pid, [pid]) for pid in sorted(new)], run.handles,
                            signal.SIGTERM, run.errors)
            run.signals += sent + _continue(sent, run.handles, run.errors)
        _wait_gone(run.handles, run.pending, t + opts.grace_period, run.ended, "SIGTERM")
    run.timings["term"] = round(time.monotonic() - t, 3)


def _kill(plan: Plan, opts: Options, run: Run) -> None:
    """Phase 2: SIGKILL to what outlived the grace period (adopting late children first), wait
    up to `timeout`; the same deadline bounds the verification."""
    t = time.monotonic()
    run.deadline = t + opts.timeout
    if run.pending:
        run.pending.update(_adopt(plan, run.targets, run.handles))
        planned = {pid for step in plan.steps for pid in step.pids}
        steps = [SignalStep(s.kind, s.ident, [p for p in s.pids if p in run.pending]) for s in plan.steps]
        steps += [SignalStep("pid", pid, [pid]) for pid in sorted(run.pending - planned)]
        run.signals += _deliver([s for s in steps if s.pids], run.handles, signal.SIGKILL, run.errors)
        _wait_gone(run.handles, run.pending, run.deadline, run.ended, "SIGKILL")
    run.timings["kill"] = round(time.monotonic() - t, 3)


def _leftovers(run: Run) -> Tuple[List[Dict[str, object]], List[Dict[str, object]]]:
    """Targets alive after SIGKILL and the timeout (and the cgroup's), those in D state apart."""
    survivors: List[Dict[str, object]] = list(run.cg["survivors"]) if run.cg else []  # type: ignore[call-overload]
    d_state: List[Dict[str, object]] = []
    for pid in sorted(run.pending):
        proc = _procs.read_proc(pid)
        entry = run.targets[pid].to_dict()
        entry["state"] = proc.state if proc else "?"
        if proc is not None and proc.state == "D":
            entry["wchan"] = _wchan(pid)
            d_state.append(entry)
        survivors.append(entry)
    return survivors, d_state


@dataclass
class Cleaned:
    """Files a teardown removed or kept, and what failed."""

    removed: List[Dict[str, object]]
    kept: List[Dict[str, object]]
    errors: List[str]
    tmpdir_removed: Optional[str] = None
    record_removed: List[str] = field(default_factory=list)


def _clean(plan: Plan, ok: bool, run: Run) -> Cleaned:
    """Phase 4: files no live process holds; the instance's own files only after a success."""
    t = time.monotonic()
    removed, kept, file_errors = _remove_files(plan)
    cleaned = Cleaned(removed, kept, file_errors)
    if ok:
        cleaned.tmpdir_removed, cleaned.record_removed = _remove_instance_files(plan, cleaned.errors)
    run.timings["cleanup"] = round(time.monotonic() - t, 3)
    return cleaned


def _result(plan: Plan, run: Run, survivors: List[Dict[str, object]], d_state: List[Dict[str, object]],
            files: Cleaned) -> Dict[str, object]:
    killed: List[Dict[str, object]] = list(run.cg["killed"]) if run.cg else []  # type: ignore[call-overload]
    for pid, target in sorted(run.targets.items()):
        if pid in run.ended:
            entry = target.to_dict()
            killed.append({"pid": pid, "name": entry["name"], "cmdline": entry["cmdline"], "user": entry["user"],
                           "reason": "; ".join(target.reasons), "signal": run.ended[pid]})
    result = summary(plan)
    members = list(run.cg["containment"]["members"]) if run.cg else []  # type: ignore[index]
    cgroup = run.cg["containment"]["cgroup"] if run.cg else None  # type: ignore[index]
    result["targets"] = _all_targets([run.targets[pid].to_dict() for pid in sorted(run.targets)],
                                     member_targets(members, cgroup, set(run.targets), plan.world.procs))
    # what this teardown ended (a target already gone when it acted is no process it stopped)
    result["stopped"] = sum(1 for k in killed if k["signal"] in ("SIGTERM", "SIGKILL"))
    result.update({
        "killed": killed, "survivors": survivors, "d_state": d_state, "signals": run.signals,
        "shm_removed": files.removed, "shm_kept": files.kept, "tmpdir_removed": files.tmpdir_removed,
        "record_removed": files.record_removed, "errors": run.errors + files.errors, "timings": run.timings,
    })
    if run.cg is not None:
        result["containment"] = run.cg["containment"]
    result["changed"] = bool(run.signals or files.removed or files.tmpdir_removed or files.record_removed
                             or (run.cg and run.cg["changed"]))
    return result


def _raise_on_failure(result: Dict[str, object], opts: Options, signal_errors: List[str]) -> None:
    """The first failure that explains the rest, raised with the whole result as details."""
    d_state = result["d_state"]
    survivors = result["survivors"]
    ports_after = result["ports_after"]
    gpu_left = result["gpu_processes_left"]
    if d_state:
        raise SglangError("%d target(s) stuck in uninterruptible sleep (D) after SIGKILL: %s" % (
            len(d_state), ", ".join("pid %s wchan %s" % (d["pid"], d["wchan"]) for d in d_state)),  # type: ignore
            **dict(result, reason="d_state"))
    if survivors:
        raise SglangError("%d target(s) still alive %.0f s after SIGKILL: %s" % (
            len(survivors), opts.timeout, ", ".join("pid %s (%s)" % (s["pid"], s["name"]) for s in survivors)),  # type: ignore
            **dict(result, reason="survivors"))
    if signal_errors:
        raise SglangError("could not signal every target: " + "; ".join(signal_errors),
                          **dict(result, reason="signal_failed"))
    if ports_after:
        raise SglangError("managed port(s) still have a listener after teardown: " + ", ".join(
            "%s (pids %s)" % (l["port"], l["pids"]) for l in ports_after),  # type: ignore
            **dict(result, reason="port_still_held"))
    if gpu_left:
        raise SglangError("the GPU backend still lists target pid(s) %s on the managed GPUs after %.0f s" % (
            ", ".join(map(str, sorted(gpu_left))), opts.timeout),  # type: ignore[call-overload]
            **dict(result, reason="gpu_not_released"))


def _verify(plan: Plan, opts: Options, pids: Set[int], deadline: float, clock: _poll.Clock = _poll.SYSTEM
            ) -> Tuple[List[Dict[str, object]], Dict[int, Dict[int, Optional[int]]], Optional[_gpus.GpuReport]]:
    """Poll until the ports have no listener and the GPUs list no target, or the deadline."""
    ports_after: List[Dict[str, object]] = []
    # foreign listeners beside the instance's address were never targets: not left by the teardown
    beside = {(f["port"], f["family"], f["address"]) for f in plan.selection.foreign_listeners}

    def listening() -> List[Dict[str, object]]:
        return [l.to_dict() for l in _ports.scan_listeners(plan.scope.ports, deadline=deadline)[0]
                if (l.port, l.family, l.address) not in beside or set(l.pids) & pids]
    if plan.scope.ports:
        ports_after = _poll.until(listening, lambda left: not left, deadline, POLL, clock)
    gpu_left: Dict[int, Dict[int, Optional[int]]] = {}
    report: Optional[_gpus.GpuReport] = None
    if plan.scope.gpus != [] and opts.gpu_backend != "none" and plan.world.gpu_report.backend != "none":
        gpu_left, report = _poll.until(lambda: _gpu_holders(plan, pids, opts.gpu_backend),
                                       lambda held: not held[0], deadline, GPU_POLL, clock)
    return ports_after, gpu_left, report


# --- what an operator must see ----------------------------------------------------------------

def _size(num: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num < 1024 or unit == "GiB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (num, unit)
        num /= 1024.0  # type: ignore[assignment]
    return "%d B" % num  # pragma: no cover


def purge_warnings(plan: Plan, check_mode: bool) -> List[str]:
    """One warning per purge directory the plan empties (files in it): a dump directory being
    emptied is data going away, which an operator must see without -v."""
    out: List[str] = []
    for checked in plan.dirs.purge:
        prefix = checked.path.rstrip(os.sep) + os.sep
        files = [e for e in plan.files if e.path.startswith(prefix)]
        if not files:
            continue
        kept = [e for e in plan.kept if e.path.startswith(prefix)]
        dirs = sum(1 for e in files if e.is_dir)
        what = "%d file%s" % (len(files) - dirs, "" if len(files) - dirs == 1 else "s")
        if dirs:
            what += " and %d director%s" % (dirs, "y" if dirs == 1 else "ies")
        text = "purge_paths: %s %s: %s (%s)" % ("would empty" if check_mode else "emptying", checked.path, what,
                                                _size(sum(e.size for e in files)))
        if kept:
            text += "; %d held open by a live process %s kept" % (len(kept), "would be" if check_mode else "are")
        out.append(text)
    return out
