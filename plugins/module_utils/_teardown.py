"""The teardown engine: plan, SIGTERM, wait, SIGKILL, wait, verify (ports, GPUs), clean files.

`make_plan` decides everything (targets, signals, files) without side effects, so check mode,
diff mode and the real run are built from the same plan. `execute` acts on it and proves the
result: no target alive (a zombie counts as gone), no listener on the managed ports, no target
listed on the managed GPUs. Anything else fails the task with the evidence.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils import _gpus, _ports, _procs, _record, _shm
from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._targets import Scope, Selection, Target, World, select

POLL = 0.05          # process exit polling: GPU memory is free ~0.6 s after SIGKILL on an H200
GPU_POLL = 0.2       # NVML / nvidia-smi are slower to query than /proc
# Paths an operator may never name in purge_paths: emptying them would hit everyone.
_PURGE_DENY = {"/", "/dev", "/dev/shm", "/tmp", "/var", "/var/tmp", "/home", "/root", "/etc", "/usr",
               "/proc", "/sys", "/run", "/boot", "/opt", "/lib", "/bin", "/sbin"}


@dataclass
class Options:
    grace_period: float = 30.0
    timeout: float = 60.0
    shm_cleanup: bool = True
    shm_dir: str = _shm.SHM_DIR
    purge_paths: List[str] = field(default_factory=list)
    gpu_backend: str = "auto"
    remove_record: bool = True


def validate_options(opts: Options, state_dir: Optional[str]) -> None:
    if opts.grace_period < 0:
        raise SglangError("grace_period must be >= 0 (got %s)" % opts.grace_period, reason="bad_option")
    if opts.timeout < 0:
        raise SglangError("timeout must be >= 0 (got %s)" % opts.timeout, reason="bad_option")
    if opts.gpu_backend not in _gpus.BACKENDS:
        raise SglangError("gpu_backend must be one of %s" % ", ".join(_gpus.BACKENDS), reason="bad_option")
    for path in opts.purge_paths:
        if not isinstance(path, str) or not os.path.isabs(path):
            raise SglangError("purge path %r must be absolute" % (path,), reason="bad_purge_path")
        norm = os.path.normpath(path)
        if norm in _PURGE_DENY or norm == os.path.normpath(opts.shm_dir) or (
                state_dir and norm == os.path.normpath(state_dir)):
            raise SglangError("purge path %s would empty a shared directory; name a subdirectory "
                              "(e.g. /dev/shm/sglang_hs)" % path, reason="bad_purge_path")


# --- plan -------------------------------------------------------------------------------------

@dataclass
class SignalStep:
    kind: str          # "group" | "pid"
    ident: int         # pgid or pid
    pids: List[int]

    def to_dict(self, sig: str) -> Dict[str, object]:
        return {"signal": sig, "kind": self.kind, "id": self.ident, "pids": sorted(self.pids)}


@dataclass
class Plan:
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

    @property
    def targets(self) -> Dict[int, Target]:
        return self.selection.targets


def signal_steps(targets: Dict[int, Target], procs: Dict[int, _procs.Proc],
                 own_pids: Set[int]) -> List[SignalStep]:
    """Group signals where the WHOLE group is targets (catches forks between plan and signal);
    single pids otherwise: a nohup server shares its group with the operator's shell."""
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


def _file_candidates(opts: Options, ignore: Set[int]) -> Tuple[List[_shm.ShmEntry], List[_shm.ShmEntry]]:
    """Known /dev/shm patterns + children of purge paths; a holder that is a target (about to
    die) does not count, any other live holder keeps the file."""
    roots = ([opts.shm_dir] if opts.shm_cleanup else []) + list(opts.purge_paths)
    if not roots:
        return [], []
    held = _shm.open_or_mapped(roots)
    held = {path: {p for p in pids if p not in ignore and _procs.is_alive(p)} for path, pids in held.items()}
    held = {path: pids for path, pids in held.items() if pids}
    entries: List[_shm.ShmEntry] = []
    if opts.shm_cleanup:
        entries.extend(_shm.scan(opts.shm_dir, _shm.PATTERNS, held))
    for path in opts.purge_paths:
        if os.path.isdir(path) and not os.path.islink(path):
            entries.extend(_shm.purge_entries(path, held))
    return [e for e in entries if not e.holders], [e for e in entries if e.holders]


def _record_files(scope: Scope) -> List[str]:
    """The instance's record and exit file, those that exist now."""
    if not (scope.name and scope.state_dir):
        return []
    return [p for p in (_record.record_path(scope.state_dir, scope.name),
                        _record.exit_path(scope.state_dir, scope.name)) if os.path.exists(p)]


def make_plan(scope: Scope, opts: Options, world: Optional[World] = None) -> Plan:
    world = world or World.capture(scope, opts.gpu_backend)
    record = None
    record_files = _record_files(scope)
    if scope.name and scope.state_dir:
        record = _record.read_record(scope.state_dir, scope.name)
    selection = select(scope, world, record)
    steps = signal_steps(selection.targets, world.procs, world.own_pids)
    files, kept = _file_candidates(opts, set(selection.targets))
    tmpdir, note = _tmpdir_of(record, scope.state_dir, scope.name)
    return Plan(scope, selection, world, record, steps, files, kept, tmpdir, note, record_files)


def check_preconditions(plan: Plan) -> None:
    """Refuse BEFORE any signal: scope conflicts, foreign GPU users (foreign_gpu_processes=fail)."""
    sel = plan.selection
    if sel.conflicts:
        raise SglangError("refusing to tear down: " + "; ".join(sel.conflicts), reason="scope_conflict")
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

def _send(pid: int, start_time: float, sig: int) -> str:
    """Signal one process only if it is still the one we planned for. A pidfd pins the
    identity between the start-time check and the signal, so a reused pid is never hit."""
    fd: Optional[int] = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return "gone"
    except (AttributeError, OSError):
        fd = None
    try:
        if not _procs.is_alive(pid, start_time):
            return "gone"
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return "sent"
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "permission denied"
    finally:
        if fd is not None:
            os.close(fd)


def _alive(target: Target) -> bool:
    return _procs.is_alive(target.proc.pid, target.proc.start_time)


def _deliver(steps: List[SignalStep], targets: Dict[int, Target], sig: int, errors: List[str]) -> List[Dict[str, object]]:
    """Send `sig` to the steps; a group is re-checked first and split into pids when a
    non-target joined it meanwhile."""
    sent: List[Dict[str, object]] = []
    name = signal.Signals(sig).name
    live = [pid for step in steps for pid in step.pids if _alive(targets[pid])]
    if not live:
        return sent
    procs = _procs.snapshot() if any(s.kind == "group" for s in steps) else {}
    known = set(targets)
    for step in steps:
        pids = [pid for pid in step.pids if _alive(targets[pid])]
        if not pids:
            continue
        if step.kind == "group":
            members = {p.pid for p in procs.values() if p.pgid == step.ident and not p.is_zombie}
            strangers = {m for m in members if m not in known and not (_procs.ancestors(m, procs) & known)}
            if members and not strangers:
                try:
                    os.killpg(step.ident, sig)
                    sent.append(step.to_dict(name))
                    continue
                except ProcessLookupError:
                    continue
                except PermissionError as exc:
                    errors.append("killpg(%d, %s): %s" % (step.ident, name, exc))
        for pid in pids:
            outcome = _send(pid, targets[pid].proc.start_time, sig)
            if outcome == "sent":
                sent.append(SignalStep("pid", pid, [pid]).to_dict(name))
            elif outcome != "gone":
                errors.append("kill(%d, %s): %s" % (pid, name, outcome))
    return sent


def _wait_gone(targets: Dict[int, Target], pending: Set[int], deadline: float, ended: Dict[int, str],
               label: str) -> None:
    while pending:
        for pid in list(pending):
            if not _alive(targets[pid]):
                pending.discard(pid)
                ended.setdefault(pid, label)
        if not pending or time.monotonic() >= deadline:
            return
        time.sleep(POLL)


def _adopt_new_children(targets: Dict[int, Target], plan: Plan) -> List[int]:
    """Children forked after the plan (a server spawning during shutdown) go too."""
    procs = _procs.snapshot()
    kids = _procs.children_map(procs)
    added: List[int] = []
    stack = [pid for pid in targets if _alive(targets[pid])]
    while stack:
        parent = stack.pop()
        for child in kids.get(parent, []):
            proc = procs.get(child)
            if child in targets or proc is None or proc.is_zombie or child in plan.world.own_pids:
                continue
            targets[child] = Target(proc, ["child of %d (appeared during teardown)" % parent])
            added.append(child)
            stack.append(child)
    return added


def _wchan(pid: int) -> str:
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


def _remove_files(plan: Plan, opts: Options) -> Tuple[List[Dict[str, object]], List[Dict[str, object]], List[str]]:
    """Re-scan after the processes are gone: only files no live process holds are removed."""
    files, kept = _file_candidates(opts, set())
    removed: List[Dict[str, object]] = []
    errors: List[str] = []
    for entry in files:
        err = _shm.remove(entry)
        if err:
            errors.append("%s: %s" % (entry.path, err))
        else:
            removed.append({"path": entry.path, "size": entry.size})
    return removed, [_kept(e) for e in kept], errors


def _kept(entry: _shm.ShmEntry) -> Dict[str, object]:
    holders = []
    for pid in entry.holders:
        proc = _procs.read_proc(pid)
        holders.append({"pid": pid, "name": proc.comm if proc else "?", "user": proc.user if proc else "?"})
    return {"path": entry.path, "size": entry.size, "held_by": holders}


def summary(plan: Plan) -> Dict[str, object]:
    sel = plan.selection
    return {
        "targets": [sel.targets[pid].to_dict() for pid in sorted(sel.targets)],
        "other_instances": sel.other_instances,
        "device_file_holders": sel.device_file_holders,
        "foreign_gpu_processes": sel.foreign_gpu,
        "skipped": sel.skipped,
        "record": {"notes": sel.record_notes, "files": plan.record_files, "tmpdir": plan.tmpdir,
                   "tmpdir_note": plan.tmpdir_note},
    }


def _live_targets(plan: Plan) -> Dict[int, Target]:
    return {pid: t for pid, t in plan.targets.items() if _alive(t)}


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
    result["changed"] = bool(live or plan.files or plan.tmpdir or plan.record_files)
    return result


def diff_of(plan: Plan, result: Dict[str, object]) -> Dict[str, str]:
    live = _live_targets(plan)
    before_procs = ["process %d %s" % (pid, t.to_dict()["cmdline"]) for pid, t in sorted(live.items())]
    survivors = {s["pid"] for s in result.get("survivors", [])}  # type: ignore[union-attr]
    files = [e.path for e in plan.files] + ([plan.tmpdir] if plan.tmpdir else []) + plan.record_files
    removed = {f["path"] for f in result.get("shm_removed", [])}  # type: ignore[union-attr]
    if result.get("tmpdir_removed"):
        removed.add(result["tmpdir_removed"])  # type: ignore[arg-type]
    removed.update(result.get("record_removed") or [])  # type: ignore[arg-type]
    after_procs = [line for line, pid in zip(before_procs, sorted(live)) if pid in survivors]
    after_files = [f for f in files if f not in removed]
    return {"before": "\n".join(before_procs + ["file " + f for f in files]) + "\n",
            "after": "\n".join(after_procs + ["file " + f for f in after_files]) + "\n"}


def execute(plan: Plan, opts: Options) -> Dict[str, object]:
    """Stop the targets and prove it. Returns the result; `failed`/`msg`/`reason` set on failure."""
    timings: Dict[str, float] = {}
    targets = dict(plan.targets)
    ended: Dict[int, str] = {}
    errors: List[str] = []
    signals: List[Dict[str, object]] = []

    for pid, target in targets.items():
        if not _alive(target):
            ended[pid] = "already-gone"
    pending = {pid for pid in targets if pid not in ended}

    t = time.monotonic()
    if pending:
        signals += _deliver(plan.steps, targets, signal.SIGTERM, errors)
        _wait_gone(targets, pending, t + opts.grace_period, ended, "SIGTERM")
    timings["term"] = round(time.monotonic() - t, 3)

    t = time.monotonic()
    deadline = t + opts.timeout
    if pending:
        new = _adopt_new_children(targets, plan)
        pending.update(new)
        live = {pid: targets[pid] for pid in pending}
        steps = signal_steps(live, _procs.snapshot(), plan.world.own_pids)
        signals += _deliver(steps, targets, signal.SIGKILL, errors)
        _wait_gone(targets, pending, deadline, ended, "SIGKILL")
    timings["kill"] = round(time.monotonic() - t, 3)

    survivors, d_state = [], []
    for pid in sorted(pending):
        proc = _procs.read_proc(pid)
        entry = targets[pid].to_dict()
        entry["state"] = proc.state if proc else "?"
        if proc is not None and proc.state == "D":
            entry["wchan"] = _wchan(pid)
            d_state.append(entry)
        survivors.append(entry)

    t = time.monotonic()
    ports_after, gpu_left, report = _verify(plan, opts, set(targets), deadline)
    timings["verify"] = round(time.monotonic() - t, 3)

    ok = not survivors and not ports_after and not gpu_left and not errors
    t = time.monotonic()
    removed, kept, file_errors = _remove_files(plan, opts)
    tmpdir_removed = None
    record_removed: List[str] = []
    if ok and opts.remove_record:
        if plan.tmpdir and os.path.isdir(plan.tmpdir):
            shutil.rmtree(plan.tmpdir, ignore_errors=True)
            tmpdir_removed = plan.tmpdir if not os.path.exists(plan.tmpdir) else None
        # Re-list now: the supervisor writes <name>.exit.json as the server dies, after planning.
        for path in _record_files(plan.scope):
            try:
                os.unlink(path)
                record_removed.append(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                file_errors.append("%s: %s" % (path, exc.strerror or exc))
    timings["cleanup"] = round(time.monotonic() - t, 3)

    killed = []
    for pid, target in sorted(targets.items()):
        if pid in ended:
            entry = target.to_dict()
            killed.append({"pid": pid, "name": entry["name"], "cmdline": entry["cmdline"], "user": entry["user"],
                           "reason": "; ".join(target.reasons), "signal": ended[pid]})
    result = summary(plan)
    result["targets"] = [targets[pid].to_dict() for pid in sorted(targets)]
    result.update({
        "killed": killed, "survivors": survivors, "d_state": d_state, "signals": signals,
        "ports_after": ports_after, "gpu_processes_left": gpu_left,
        "gpus_after": _gpus_after(report, plan.scope.gpus) if report else [],
        "shm_removed": removed, "shm_kept": kept, "tmpdir_removed": tmpdir_removed,
        "record_removed": record_removed, "errors": errors + file_errors, "timings": timings,
    })
    result["changed"] = bool(signals or removed or tmpdir_removed or record_removed)
    if d_state:
        result.update(failed=True, reason="d_state", msg="%d target(s) stuck in uninterruptible sleep (D) after "
                      "SIGKILL: %s" % (len(d_state), ", ".join("pid %s wchan %s" % (d["pid"], d["wchan"]) for d in d_state)))
    elif survivors:
        result.update(failed=True, reason="survivors", msg="%d target(s) still alive %.0f s after SIGKILL: %s"
                      % (len(survivors), opts.timeout, ", ".join("pid %s (%s)" % (s["pid"], s["name"]) for s in survivors)))
    elif errors:
        result.update(failed=True, reason="signal_failed", msg="could not signal every target: " + "; ".join(errors))
    elif ports_after:
        result.update(failed=True, reason="port_still_held", msg="managed port(s) still have a listener after "
                      "teardown: " + ", ".join("%s (pids %s)" % (l["port"], l["pids"]) for l in ports_after))
    elif gpu_left:
        result.update(failed=True, reason="gpu_not_released", msg="the GPU backend still lists target pid(s) %s on "
                      "the managed GPUs after %.0f s" % (", ".join(map(str, sorted(gpu_left))), opts.timeout))
    return result


def _verify(plan: Plan, opts: Options, pids: Set[int], deadline: float
            ) -> Tuple[List[Dict[str, object]], Dict[int, Dict[int, Optional[int]]], Optional[_gpus.GpuReport]]:
    """Poll until the ports have no listener and the GPUs list no target, or the deadline."""
    ports_after: List[Dict[str, object]] = []
    while plan.scope.ports:
        ports_after = [l.to_dict() for l in _ports.listeners(plan.scope.ports)]
        if not ports_after or time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    gpu_left: Dict[int, Dict[int, Optional[int]]] = {}
    report: Optional[_gpus.GpuReport] = None
    if plan.scope.gpus != [] and opts.gpu_backend != "none" and plan.world.gpu_report.backend != "none":
        while True:
            gpu_left, report = _gpu_holders(plan, pids, opts.gpu_backend)
            if not gpu_left or time.monotonic() >= deadline:
                break
            time.sleep(GPU_POLL)
    return ports_after, gpu_left, report
