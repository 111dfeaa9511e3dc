"""Teardown target selection: which processes to stop, each with the reasons it was chosen.

A process becomes a target only for a stated reason ("own what you kill"): launch record
(main pid, supervisor, process group, session), the instance marker in its environment, an
sglang title / command line, a listener on a managed port, an operator pattern, a compute
process on a managed GPU (only with foreign_gpu_processes=kill), or being a descendant of a
target. Protections are applied last and always win: the module's own
ancestors, PID 1, kernel threads, processes in another PID namespace (a container's, unless the
launch record names them), protected names, other users' processes (unless all_users).

Everything here is pure over a `World` (a snapshot of the process table, environments,
listeners and GPUs), so the selection rules are unit-testable with synthetic processes and never
race a signal.
"""
from __future__ import annotations

import fnmatch
import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import describe_process

# Names that must never be signalled: GPU daemons (killing them can hang the GPU), remote
# access and init. Globs, matched against comm and the basename of argv[0].
DEFAULT_PROTECT = ("nvidia-persistenced", "nv-hostengine", "dcgm*", "sshd", "systemd", "init")
FOREIGN_MODES = ("fail", "kill", "ignore")
# A group/session member that started before the launch cannot belong to it (pgid/sid reuse).
_START_SLACK = 1.0

EnvReader = Callable[[int], Optional[Dict[str, str]]]
NsReader = Callable[[int], Optional[str]]
NS_WHY = "in another PID namespace"


@dataclass
class OpenFiles:
    """A process's working directory and its open files."""

    cwd: Optional[str]
    fds: List[Tuple[int, str, bool]]      # (fd, path, opened for writing)


FilesReader = Callable[[int], OpenFiles]


def read_open_files(pid: int, proc: Optional[_procs.Proc] = None) -> OpenFiles:
    """cwd and open files (regular files: psutil's open_files) of a process. Why: setproctitle
    (every sglang child) overwrites /proc/PID/environ, so the marker is invisible on schedulers
    and escaped workers; the launch's log (their stdout/stderr) and TMPDIR (their cwd) still tie
    them to the launch. Nothing when gone or not readable (another user's, as non-root)."""
    lib = _procs.require()
    try:
        handle = _procs.handle_of(proc) if proc is not None and proc.pid == pid else lib.Process(pid)
    except (lib.Error, ValueError):
        return OpenFiles(None, [])
    try:
        cwd: Optional[str] = handle.cwd() or None
    except lib.Error:
        cwd = None
    try:
        files = handle.open_files()
    except lib.Error:
        files = []
    # mode "r" is read-only; "w", "a", "r+", "a+" can write (O_WRONLY / O_RDWR)
    return OpenFiles(cwd, [(f.fd, f.path, getattr(f, "mode", "r") != "r") for f in files])


@dataclass
class InstanceFiles:
    """Files that identify one launch: its log (written through stdout/stderr) and TMPDIR."""
    name: str
    log_path: Optional[str]
    tmpdir: Optional[str]


def instance_files(state_dir: Optional[str]) -> List[InstanceFiles]:
    """Log and TMPDIR of every launch record in the state dir (ours and the other instances')."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host._record import is_record_file, read_json

    out: List[InstanceFiles] = []
    if not state_dir or not os.path.isdir(state_dir):
        return out
    for entry in sorted(os.listdir(state_dir)):
        if not is_record_file(entry):  # <name>.exit.json, .timeline.json, .good.json are no records
            continue
        try:
            data = read_json(os.path.join(state_dir, entry))
        except SglangError:
            continue
        if not data:
            continue
        name = data.get("name") or entry[:-5]
        log_path, tmpdir = data.get("log_path"), data.get("tmpdir")
        out.append(InstanceFiles(str(name), log_path if isinstance(log_path, str) and log_path else None,
                                 tmpdir if isinstance(tmpdir, str) and tmpdir else None))
    return out


# --- scope ------------------------------------------------------------------------------------

@dataclass
class Scope:
    """What the operator asked to tear down (validated by `build_scope`)."""
    name: Optional[str] = None
    state_dir: Optional[str] = None
    ports: List[int] = field(default_factory=list)
    gpus: Optional[List[int]] = None          # None: every GPU; []: none
    patterns: List["re.Pattern[str]"] = field(default_factory=list)
    sglang_processes: bool = True             # the title / command-line sweep
    all_users: bool = False
    protect: List[str] = field(default_factory=lambda: list(DEFAULT_PROTECT))
    foreign_gpu_processes: str = "fail"


def validate_pattern(text: str, own_cmdlines: Iterable[str]) -> "re.Pattern[str]":
    """A pattern must be a regex that cannot match everything: `pkill -f sglang` over ssh also
    killed the operator's own shell, so one that matches "" or this module's own command line
    is refused."""
    if not isinstance(text, str) or not text.strip():
        raise SglangError("pattern %r is empty: it would match every process" % (text,), reason="bad_pattern")
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise SglangError("pattern %r is not a valid regular expression: %s" % (text, exc), reason="bad_pattern")
    if pattern.search("") is not None:
        raise SglangError("pattern %r matches the empty string, so it would match every process"
                          % text, reason="bad_pattern")
    for line in own_cmdlines:
        if line and pattern.search(line):
            raise SglangError("pattern %r matches this module's own command line (%s): it is too broad"
                              % (text, line), reason="bad_pattern")
    return pattern


_GPU_INDEX = re.compile(r"[0-9]+")


def validate_gpus(values: Optional[Iterable[object]]) -> Optional[List[int]]:
    """GPU indexes: ASCII digits only (str.isdigit also takes "\u00b2", which int() refuses, and
    "\u0663", which int() reads as 3). Spaces around an index ("0, 1" split by Ansible) are fine."""
    if values is None:
        return None
    out: List[int] = []
    for value in values:
        text = str(value).strip(" ") if not isinstance(value, bool) else ""
        if not _GPU_INDEX.fullmatch(text):
            raise SglangError("GPU index %r is not a non-negative integer (ASCII digits)" % (value,),
                              reason="bad_gpus")
        out.append(int(text))
    return sorted(set(out))


def validate_ports(values: Iterable[object]) -> List[int]:
    out: List[int] = []
    for value in values or []:
        try:
            out.append(_ports.validate_port(value))
        except ValueError as exc:
            raise SglangError(str(exc), reason="bad_port")
    return sorted(set(out))


def build_scope(name: Optional[str], state_dir: Optional[str], ports: Iterable[object],
                gpus: Optional[Iterable[object]], patterns: Iterable[str], sglang_processes: bool,
                all_users: bool, protect: Iterable[str], foreign_gpu_processes: str,
                own_cmdlines: Iterable[str]) -> Scope:
    """Validate every scope option up front: bad input fails before anything is signalled."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host._record import validate_name

    if name is not None:
        try:
            validate_name(name)
        except SglangError as exc:
            raise SglangError(exc.msg, reason="bad_name")
    own = list(own_cmdlines)
    compiled = [validate_pattern(p, own) for p in (patterns or [])]
    extra = list(protect or [])
    for entry in extra:
        if not isinstance(entry, str) or not entry.strip():
            raise SglangError("protect entry %r is empty" % (entry,), reason="bad_protect")
    if foreign_gpu_processes not in FOREIGN_MODES:
        raise SglangError("foreign_gpu_processes must be one of %s" % ", ".join(FOREIGN_MODES),
                          reason="bad_option")
    scope = Scope(name=name, state_dir=state_dir, ports=validate_ports(ports), gpus=validate_gpus(gpus),
                  patterns=compiled, sglang_processes=bool(sglang_processes), all_users=bool(all_users),
                  protect=list(DEFAULT_PROTECT) + [e for e in extra if e not in DEFAULT_PROTECT],
                  foreign_gpu_processes=foreign_gpu_processes)
    if not (scope.name or scope.ports or scope.patterns or scope.sglang_processes
            or (scope.gpus and foreign_gpu_processes == "kill")):
        raise SglangError("the scope is empty: give name, ports, patterns, or enable sglang_processes",
                          reason="empty_scope")
    return scope


# --- the world the selection works on -------------------------------------------------------

@dataclass
class World:
    """The host as a teardown selects on it: processes, environments, sockets, GPUs, files."""

    procs: Dict[int, _procs.Proc]
    environ: EnvReader
    listeners: List[_ports.Listener]
    gpu_report: _gpus.GpuReport
    device_holders: Dict[int, List[str]]
    own_pids: Set[int]          # this module and its ancestors
    euid: int
    files: FilesReader = read_open_files
    instances: List[InstanceFiles] = field(default_factory=list)
    own_pidns: Optional[str] = None        # None: namespaces are not compared (synthetic worlds)
    pidns: NsReader = _procs.pid_namespace
    device_scan: Optional[Dict[str, object]] = None   # how much of the host the fuser view covers
    port_scan: Optional[Dict[str, object]] = None     # how much the naming of port holders covers

    @classmethod
    def capture(cls, scope: Scope, gpu_backend: str = "auto", timeout: Optional[float] = None) -> "World":
        """The host now. `timeout` (seconds) bounds the fuser view's walk over fd links."""
        t0 = time.monotonic()
        procs = _procs.snapshot(lazy=False)  # attribution reads every row's uid
        want_gpus = scope.gpus is None or bool(scope.gpus)
        report = _gpus.query_gpus(gpu_backend) if want_gpus else _gpus.GpuReport("none", [], "gpus: []")
        own_pidns = _procs.own_pid_namespace()
        # The fuser view is only informative: skipped when GPUs are not managed, and otherwise
        # bounded by the timeout and read only where a target could be (see _fuser_pids).
        scan = None
        if want_gpus:
            pids = _fuser_pids(procs, scope.all_users, os.geteuid(), own_pidns)
            deadline = None if timeout is None else t0 + max(timeout, 0.0)
            scan = _gpus.scan_device_holders(pids, deadline, left_out=len(procs) - len(pids))
        # The port holders likewise: another user's processes only with all_users (they are
        # never targets otherwise), and not past the timeout.
        listeners, port_scan = [], None
        if scope.ports:
            listeners, holder_scan = _ports.scan_listeners(
                scope.ports, users=None if scope.all_users else {os.geteuid()},
                deadline=None if timeout is None else t0 + max(timeout, 0.0), complete_all=scope.all_users)
            port_scan = holder_scan.to_dict()
        return cls(procs=procs, environ=_cached_environ(procs), listeners=listeners, gpu_report=report,
                   device_holders=scan.holders if scan else {},
                   files=lambda pid: read_open_files(pid, procs.get(pid)),
                   own_pids=_procs.ancestors(os.getpid(), procs), euid=os.geteuid(),
                   instances=instance_files(scope.state_dir), own_pidns=own_pidns,
                   device_scan=scan.to_dict() if scan else None, port_scan=port_scan)


def _socket_owner(listener: _ports.Listener, euid: int) -> str:
    """Who holds a listener whose holders were not read, as far as the kernel's table says."""
    if listener.uid is None or listener.uid == euid:
        return "whose owner cannot be read (another user's process?)"
    return ("of user %s (the socket's owner; another user's processes are read and stopped only with "
            "all_users)" % _procs.username(listener.uid))


def _fuser_pids(procs: Mapping[int, _procs.Proc], all_users: bool, euid: int, own_pidns: Optional[str]) -> List[int]:
    """The processes whose fd links the fuser view reads: only those that could be targets
    (the module's user unless all_users, this PID namespace). Another user's million fds must
    not stretch a teardown (and their processes are never targets without all_users)."""
    out = []
    for pid, proc in sorted(procs.items()):
        if proc.is_zombie or (not all_users and proc.uid != euid):
            continue
        if own_pidns is not None and _procs.pid_namespace(pid) not in (None, own_pidns):
            continue
        out.append(pid)
    return out


def _cached_environ(procs: Optional[Dict[int, _procs.Proc]] = None) -> EnvReader:
    """Environments read once per pid, through the snapshot's own handles where it has the pid."""
    cache: Dict[int, Optional[Dict[str, str]]] = {}
    listed = procs or {}

    def read(pid: int) -> Optional[Dict[str, str]]:
        if pid not in cache:
            proc = listed.get(pid)
            cache[pid] = _procs.environ_of(proc) if proc is not None else _procs.read_environ(pid)
        return cache[pid]
    return read


# --- the result of selection ------------------------------------------------------------------

@dataclass
class Target:
    """A process to stop, and every reason it was chosen."""

    proc: _procs.Proc
    reasons: List[str] = field(default_factory=list)
    via_port: bool = False       # chosen as (a descendant of) a managed-port listener

    def add(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def to_dict(self) -> Dict[str, object]:
        p = self.proc
        return describe_process(p, pgid=p.pgid, sid=p.sid, start_time=p.start_time, reasons=list(self.reasons))


@dataclass
class Selection:
    """The chosen targets and what was seen but spared, with why."""

    targets: Dict[int, Target] = field(default_factory=dict)
    spared: List[Dict[str, object]] = field(default_factory=list)        # would match, protected
    other_instances: List[Dict[str, object]] = field(default_factory=list)
    other_namespaces: List[Dict[str, object]] = field(default_factory=list)  # matched, in a container
    foreign_gpu: List[Dict[str, object]] = field(default_factory=list)
    device_file_holders: List[Dict[str, object]] = field(default_factory=list)
    record_notes: List[str] = field(default_factory=list)
    conflicts: List[str] = field(default_factory=list)                   # fail before any signal
    never: Dict[int, str] = field(default_factory=dict)    # pid -> why it was refused: never adopted later
    named: Set[int] = field(default_factory=set)           # pids the launch record names (start time checked)
    outside_cgroup: List[Dict[str, object]] = field(default_factory=list)  # record heuristics, not members
    foreign_listeners: List[Dict[str, object]] = field(default_factory=list)  # beside the instance's address
    other_instance_targets: Dict[int, str] = field(default_factory=dict)  # pid -> the other instance on a port

    def refuse(self, proc: _procs.Proc, would_be: List[str], why: str, world: "World") -> None:
        """Record a process a reason selected but a protection refused (once per pid)."""
        if proc.pid in self.never:
            return
        self.never[proc.pid] = why
        if why == NS_WHY:
            self.other_namespaces.append(describe_process(proc, would_be=would_be, pid_namespace=world.pidns(proc.pid)))
        else:
            self.spared.append(describe_process(proc, would_be=would_be, why_not=why))


def protected_by(proc: _procs.Proc, protect: Iterable[str]) -> Optional[str]:
    """The protect entry matching comm or argv[0]'s basename, if any."""
    names = [proc.comm]
    if proc.cmdline:
        names.append(os.path.basename(proc.cmdline[0].split(" ")[0]))
    for entry in protect:
        if any(fnmatch.fnmatchcase(n, entry) for n in names):
            return entry
    return None


def is_kernel_thread(proc: _procs.Proc) -> bool:
    """PF_KTHREAD; else kthreadd (pid 2) and its children, without a command line. In a PID
    namespace pid 2 is an ordinary process (kernel threads are not visible there)."""
    return proc.kthread or (not proc.cmdline and (proc.pid == 2 or proc.ppid == 2))


def other_namespace(proc: _procs.Proc, world: "World") -> bool:
    """True when the process lives in another PID namespace than this module (a container)."""
    if world.own_pidns is None:
        return False
    ns = world.pidns(proc.pid)
    return ns is not None and ns != world.own_pidns


def why_never(proc: _procs.Proc, scope: Scope, world: World, named: Iterable[int] = ()) -> Optional[str]:
    """Why this process can never be a target (protections that override every reason).
    `named`: pids the launch record names, the only ones taken in another PID namespace."""
    if proc.pid == 1:
        return "PID 1"
    if is_kernel_thread(proc):
        return "kernel thread"
    if proc.pid in world.own_pids:
        return "this module or one of its ancestors"
    if proc.pid not in named and other_namespace(proc, world):
        return NS_WHY
    entry = protected_by(proc, scope.protect)
    if entry:
        return "protected name (%s)" % entry
    if not scope.all_users and proc.uid != world.euid:
        return "owned by %s (all_users is false)" % proc.user
    return None


def _marker_relation(env: Optional[Mapping[str, str]], scope: Scope) -> Optional[str]:
    """'own' when the process carries this instance's marker, 'other' for another instance's
    marker, None when unmarked. A marker naming another state dir is another instance too:
    two checkouts may both call their server "default"."""
    if not env or _procs.MARKER_INSTANCE not in env:
        return None
    if scope.name is None:
        return "other"
    if env.get(_procs.MARKER_INSTANCE) != scope.name:
        return "other"
    their_dir = env.get(_procs.MARKER_STATE_DIR)
    if their_dir and scope.state_dir and os.path.realpath(their_dir) != os.path.realpath(scope.state_dir):
        return "other"
    return "own"


def _carries_launch(env: Optional[Mapping[str, str]], launch_id: object) -> bool:
    return bool(env) and isinstance(launch_id, str) and bool(launch_id) and \
        env.get(_procs.MARKER_LAUNCH_ID) == launch_id  # type: ignore[union-attr]


def _record_candidates(record: Optional[Mapping[str, object]], world: World, notes: List[str],
                       named: Set[int], exited: bool = False) -> Dict[int, List[str]]:
    """Processes the launch record names: main pid and supervisor (pid AND start time must
    match: PID reuse), and members of its process group and session.

    A group or session id is only as good as its leader: it counts while the recorded process
    with that pid is alive with its recorded start time (then the id cannot have been reused),
    else only for members carrying this launch's marker. Once the launch's exit file exists the
    ids count for nothing. `named` receives the verified record pids."""
    found: Dict[int, List[str]] = {}
    if not record:
        return found
    starts: List[float] = []
    for key, start_key, label in (("pid", "start_time", "launch record main process"),
                                  ("supervisor_pid", "supervisor_start_time", "launch record supervisor")):
        pid, start = record.get(key), _procs.record_start(record, start_key)
        if not isinstance(pid, int) or pid <= 1:
            continue
        proc = world.procs.get(pid)
        if isinstance(start, (int, float)):
            starts.append(float(start))
        if proc is None or proc.is_zombie:
            notes.append("%s %d is gone" % (label, pid))
        elif not isinstance(start, (int, float)):
            notes.append("%s %d has no recorded start time: not a target (PID reuse cannot be ruled out)"
                         % (label, pid))
        elif abs(proc.start_time - float(start)) >= 0.05:
            notes.append("%s %d was reused by another process (start time differs): not a target" % (label, pid))
        else:
            found.setdefault(pid, []).append("%s (pid %d)" % (label, pid))
            named.add(pid)
    launched = record.get("launched_at")
    if isinstance(launched, (int, float)):
        starts.append(float(launched))
    earliest = min(starts) - _START_SLACK if starts else None
    launch_id = record.get("launch_id")
    for key, label in (("pgid", "process group"), ("sid", "session")):
        value = record.get(key)
        if not isinstance(value, int) or value <= 1:
            continue
        if exited:
            notes.append("%s %d of the launch record is not used: the launch's exit file exists" % (label, value))
            continue
        leader_ok = value in named
        if not leader_ok:
            notes.append("%s %d: its leader is not the recorded process (gone or reused); only members "
                         "carrying this launch's marker count" % (label, value))
        for proc in world.procs.values():
            if getattr(proc, key) != value or proc.is_zombie:
                continue
            if earliest is not None and proc.start_time < earliest:
                continue  # older than the launch: the id was reused, not ours
            if not leader_ok and not _carries_launch(world.environ(proc.pid), launch_id):
                continue
            found.setdefault(proc.pid, []).append("%s %d of the launch record" % (label, value))
    return found


Attribution = Dict[int, Tuple[str, Optional[str], List[str]]]


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/")


def _file_evidence(files: OpenFiles, instances: List[InstanceFiles]) -> List[Tuple[str, str]]:
    """(instance, reason) for each launch whose log this process writes or whose TMPDIR it uses."""
    out: List[Tuple[str, str]] = []
    for inst in instances:
        if inst.tmpdir and files.cwd and _under(files.cwd, inst.tmpdir):
            out.append((inst.name, "working directory is the TMPDIR of instance %s" % inst.name))
        for fd, path, writable in files.fds:
            if inst.log_path and writable and path == inst.log_path:
                # writable only: `tail -f` on the log reads it and is not a server
                out.append((inst.name, "writes the launch log of instance %s (fd %d)" % (inst.name, fd)))
                break
    return out


def attribute(scope: Scope, world: World) -> Attribution:
    """pid -> (relation, instance, reasons) with relation own | other | unmarked | unknown.

    The marker in the environment decides first. setproctitle wipes /proc/PID/environ of every
    sglang child, so an sglang-looking process without a marker is attributed by the launch
    files it holds (log for writing, cwd in TMPDIR), else by its nearest attributed ancestor;
    an orphan with neither is "unknown" (it cannot be tied to any instance)."""
    out: Attribution = {}
    pending: List[int] = []
    instances = world.instances if scope.name else []
    for proc in world.procs.values():
        if not scope.all_users and proc.uid != world.euid:
            continue
        env = world.environ(proc.pid)
        # a zombie's environment reads empty: only then is its state worth a read
        if not env and proc.is_zombie:
            continue
        relation = _marker_relation(env, scope) if env else None
        if relation == "own":
            out[proc.pid] = ("own", scope.name, ["instance marker %s=%s in its environment"
                                                 % (_procs.MARKER_INSTANCE, scope.name)])
            continue
        if relation == "other":
            out[proc.pid] = ("other", (env or {}).get(_procs.MARKER_INSTANCE), [])
            continue
        evidence = _file_evidence(world.files(proc.pid), instances) if instances else []
        # The launch's files only SUPPORT a process that already looks like sglang: an operator's
        # shell cd'd into the TMPDIR, or a tool appending to the log, is not a server.
        mine = [reason for inst, reason in evidence if inst == scope.name] if _procs.sglang_reason(proc) else []
        others = [inst for inst, _reason in evidence if inst != scope.name]
        if mine:
            out[proc.pid] = ("own", scope.name, mine)
        elif others:
            out[proc.pid] = ("other", others[0], [])    # protective only: never a reason to stop it
        elif env:
            out[proc.pid] = ("unmarked", None, [])
        else:
            pending.append(proc.pid)
    for pid in pending:
        relation: Tuple[str, Optional[str], List[str]] = ("unknown", None, [])
        seen: Set[int] = {pid}
        parent = world.procs[pid].ppid
        while parent > 1 and parent not in seen:
            seen.add(parent)
            if parent in out and out[parent][0] != "unknown":
                relation = (out[parent][0], out[parent][1], [])
                break
            proc = world.procs.get(parent)
            if proc is None:
                break
            parent = proc.ppid
        out[pid] = relation
    return out


def select(scope: Scope, world: World, record: Optional[Mapping[str, object]] = None,
           exited: bool = False) -> Selection:
    """Choose the targets. Order matters: direct reasons, then descendants, then GPU users
    (so a scheduler child of a target is a target, not a foreign GPU user). `exited`: the
    launch's exit file exists (its group and session ids no longer mean anything)."""
    sel = Selection()
    candidates: Dict[int, List[str]] = {}
    port_pids: Set[int] = set()
    pattern_hits: Dict[int, str] = {}
    other: Dict[int, str] = {}

    def propose(pid: int, reason: str) -> None:
        candidates.setdefault(pid, [])
        if reason not in candidates[pid]:
            candidates[pid].append(reason)

    for pid, reasons in _record_candidates(record, world, sel.record_notes, sel.named, exited).items():
        for reason in reasons:
            propose(pid, reason)

    attribution = attribute(scope, world)
    for pid, (relation, instance, reasons) in attribution.items():
        for reason in reasons if relation == "own" else []:
            propose(pid, reason)
        if relation == "other" and scope.name is not None:
            other[pid] = instance or "?"

    for proc in world.procs.values():
        # the command line first: the state (a read) only of a process it selects
        why = _procs.sglang_reason(proc) if scope.sglang_processes else None
        hit = _procs.matches_any(proc, scope.patterns) if scope.patterns else None
        if not (why or hit) or proc.is_zombie:
            continue  # a zombie is gone already: its memory and ports are released
        relation = attribution.get(proc.pid, ("unknown", None, []))[0]
        # With a name, a process of another instance is never swept by title: only
        # unmarked (hand-started, like the incident's nohup server) or unattributable ones.
        if why and not (scope.name is not None and relation == "other"):
            propose(proc.pid, why)
        if hit:
            pattern_hits[proc.pid] = hit.split(" ", 2)[-1]  # the pattern's repr
            propose(proc.pid, hit)

    # A listener that is never a target blocks the teardown only where it collides with the
    # instance's bind address (unknown without a record: then every one does); one beside it
    # (::1 with IPV6_V6ONLY next to 0.0.0.0) cannot be the instance and is only reported.
    host = record.get("host") if record else None
    host = host if isinstance(host, str) else None
    port_listeners: Dict[int, List[_ports.Listener]] = {}
    for listener in world.listeners:
        for pid in listener.pids:
            port_pids.add(pid)
            port_listeners.setdefault(pid, []).append(listener)
            propose(pid, "listens on managed port %d (%s %s)" % (listener.port, listener.family, listener.address))
        if listener.pids:
            continue
        owner = _socket_owner(listener, world.euid)
        if _ports.address_conflict(listener.family, listener.address, host):
            sel.conflicts.append("port %d (%s %s) has a listener %s"
                                 % (listener.port, listener.family, listener.address, owner))
        else:
            sel.foreign_listeners.append(dict(listener.to_dict(), pid=None, why="%s; its address does not collide "
                                              "with the instance's %s" % (owner, host)))

    # Direct targets: apply protections and the other-instance rule.
    for pid in sorted(candidates):
        proc = world.procs.get(pid)
        if proc is None:
            continue
        blocked = why_never(proc, scope, world, sel.named)
        if blocked is None and pid in other and pid not in port_pids:
            blocked = "marked as another instance"
        if blocked:
            sel.refuse(proc, candidates[pid], blocked, world)
            entry = protected_by(proc, scope.protect)
            if pid in pattern_hits and entry:
                sel.conflicts.append("pattern %s selects pid %d (%s) but protect entry %r protects it"
                                     % (pattern_hits[pid], pid, proc.comm, entry))
            if pid in port_pids:
                clash = [l for l in port_listeners[pid] if _ports.address_conflict(l.family, l.address, host)]
                if clash:
                    sel.conflicts.append("pid %d (%s, user %s) listens on a managed port but is never a target: %s"
                                         % (pid, proc.comm, proc.user, blocked))
                else:
                    sel.foreign_listeners.extend(
                        describe_process(proc, port=l.port, family=l.family, address=l.address, why_not=blocked)
                        for l in port_listeners[pid])
            continue
        target = Target(proc, list(candidates[pid]), via_port=pid in port_pids)
        if pid in other:
            target.add("belongs to instance %s (conflict on a managed port)" % other[pid])
            sel.other_instance_targets[pid] = other[pid]  # refused before any signal unless taken over
        sel.targets[pid] = target

    _add_descendants(sel, scope, world, other)
    _classify_gpu_users(sel, scope, world, other)

    for pid, instance in sorted(other.items()):
        proc = world.procs.get(pid)
        if proc is None or pid in sel.targets:
            continue
        sel.never.setdefault(pid, "marked as another instance")
        if _procs.sglang_reason(proc) or pid in candidates:
            sel.other_instances.append(describe_process(proc, instance=instance))
    return sel


# Reasons that find a process by what it is or does now (a managed port, a title or command line,
# an operator pattern, a GPU with foreign_gpu_processes=kill), as opposed to what the launch
# record and its files say about it (pid, group, session, marker, TMPDIR, log).
_DIRECT = ("listens on managed port", "sglang process ", "command line: ", "matches pattern ", "belongs to instance ")
OUTSIDE_WHY = "outside the instance's cgroup (found only by the launch record's heuristics)"


def _direct(reason: str) -> bool:
    return reason.startswith(_DIRECT) or reason.endswith("foreign_gpu_processes=kill")


def _parent_of(reason: str) -> Optional[int]:
    if not reason.startswith("child of "):
        return None
    head = reason[len("child of "):].split(" ", 1)[0]
    return int(head) if head.isdigit() else None


def contain(sel: Selection, members: Iterable[int]) -> None:
    """Narrow a selection to a contained launch: its cgroup's members are stopped through the
    cgroup, so they leave the per-process targets; a target outside the cgroup stays only when a
    direct reason (port, title, pattern, GPU kill) or a parent that stays found it. The rest were
    found by the record's heuristics alone: the cgroup is authoritative, they are reported in
    `outside_cgroup` and never signalled (nor adopted later). Members are no foreign GPU users."""
    inside = set(members)
    outside = {pid: t for pid, t in sel.targets.items() if pid not in inside}
    kept = {pid for pid, t in outside.items() if any(_direct(r) for r in t.reasons)}
    grew = True
    while grew:
        grew = False
        for pid, target in outside.items():
            if pid not in kept and any(_parent_of(r) in kept for r in target.reasons):
                kept.add(pid)
                grew = True
    sel.targets = {pid: t for pid, t in outside.items() if pid in kept}
    for pid, target in sorted(outside.items()):
        if pid not in kept:
            sel.never[pid] = OUTSIDE_WHY
            sel.outside_cgroup.append(describe_process(target.proc, would_be=list(target.reasons)))
    sel.foreign_gpu = [f for f in sel.foreign_gpu if f["pid"] not in inside]


def adoption_refusal(proc: _procs.Proc, scope: Scope, world: World, via_port: bool) -> Optional[str]:
    """Why a process that appeared under a target after the plan may not join it: the same
    protections as at planning (read fresh: this process was not in the plan's snapshot)."""
    blocked = why_never(proc, scope, world)
    if blocked is None and not via_port and _marker_relation(_procs.read_environ(proc.pid), scope) == "other":
        blocked = "marked as another instance"
    return blocked


def _add_descendants(sel: Selection, scope: Scope, world: World, other: Dict[int, str]) -> None:
    # the parents of the processes below the targets only (a listed table reads no others)
    kids = _procs.subtree_map(sel.targets, world.procs)
    stack = list(sel.targets)
    while stack:
        parent = stack.pop()
        via_port = sel.targets[parent].via_port
        for child in kids.get(parent, []):
            proc = world.procs.get(child)
            if proc is None or proc.is_zombie:
                continue
            if child in sel.targets:
                sel.targets[child].add("child of %d" % parent)
                continue
            blocked = why_never(proc, scope, world, sel.named)
            if blocked is None and child in other and not via_port:
                blocked = "marked as another instance"
            if blocked:
                sel.refuse(proc, ["child of %d" % parent], blocked, world)
                continue
            sel.targets[child] = Target(proc, ["child of %d" % parent], via_port=via_port)
            stack.append(child)


def _gib(mib: Optional[int]) -> Optional[float]:
    return None if mib is None else round(mib / 1024.0, 2)


def _classify_gpu_users(sel: Selection, scope: Scope, world: World, other: Dict[int, str]) -> None:
    """Compute processes on the managed GPUs: targets get a reason, the rest are foreign
    (refused by default). One in another PID namespace (a container) is always foreign, even
    with foreign_gpu_processes=kill. The fuser view is reported, never used to choose a target."""
    if scope.gpus == []:
        return
    on_gpus = world.gpu_report.pids_on(scope.gpus)
    listed = set(world.gpu_report.pids_on(None))
    added: List[int] = []
    for pid, per_gpu in sorted(on_gpus.items()):
        usage = ", ".join("GPU %d: %s GiB" % (i, _gib(m)) for i, m in sorted(per_gpu.items()))
        if pid in sel.targets:
            sel.targets[pid].add("compute process on managed GPU (%s)" % usage)
            continue
        proc = world.procs.get(pid)
        if proc is None or proc.is_zombie:
            continue
        entry = describe_process(proc, gpus={str(i): _gib(m) for i, m in sorted(per_gpu.items())})
        in_other_ns = other_namespace(proc, world) and pid not in sel.named
        if in_other_ns:
            entry["pid_namespace"] = world.pidns(pid)
            sel.never.setdefault(pid, NS_WHY)
        if scope.foreign_gpu_processes == "kill":
            blocked = NS_WHY if in_other_ns else why_never(proc, scope, world, sel.named)
            if blocked is None:
                sel.targets[pid] = Target(proc, ["compute process on managed GPU (%s), foreign_gpu_processes=kill"
                                                 % usage])
                added.append(pid)
                continue
            entry["why_not"] = blocked
            sel.never.setdefault(pid, blocked)
        sel.foreign_gpu.append(entry)
    if added:
        # Their own children (e.g. other workers of that job) go with them.
        saved = dict(sel.targets)
        sel.targets = {pid: saved[pid] for pid in added}
        _add_descendants(sel, scope, world, other)
        for pid, target in saved.items():
            sel.targets.setdefault(pid, target)
    for pid, files in sorted(world.device_holders.items()):
        if pid in listed:
            continue
        proc = world.procs.get(pid)
        if proc is None:
            continue
        sel.device_file_holders.append(describe_process(proc, files=files, target=pid in sel.targets))
