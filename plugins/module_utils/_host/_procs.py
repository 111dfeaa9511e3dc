"""The process layer: a snapshot of the process table from psutil.

Everything that decides "is this ours?" works from a `Proc` taken here, so probe, teardown and
ready agree on what a process is. The creation time is the identity against PID reuse: psutil
fixes it when it lists a process (`Process.create_time()`, epoch seconds from the clock ticks of
/proc/PID/stat), and `start_time` is that value rounded to the tick (0.01 s), as launch records
store it.

A table row reads only the command line when it is listed (what decides whether a process can
be sglang at all) and the rest on first use, each field on its own: state, name, the parent
(psutil's ppid(), which also checks the pid against reuse), group and session, uid, start time,
the kernel-thread flag. The probe and the launcher need those for a handful of processes out of thousands; a full
psutil row for every process cost three reads of /proc/PID/stat each. Even the psutil.Process
of a listed row is made on first use (its creation reads /proc/PID/stat for the identity: 60 %
of a table pass): the row's identity is then fixed, after checking that the process the pid
names now is the listed one - it started before its command line was read (so it held the pid
then), or, for one started in the same clock tick, still runs that command line. A row whose
pid has exited, or names a later process, by then reads as gone.

Read from /proc by hand only what psutil has no API for, each said where it is done: the PID
namespace and the raw fd links (device files, sockets, every holder).
"""
from __future__ import annotations

import os
import pwd
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import mask_cmdline

try:
    import psutil
except ImportError:  # the modules fail first with missing_library (_depsearch.require)
    psutil = None
HAS_PSUTIL = psutil is not None

PROC = "/proc"
MARKER_INSTANCE = "LLMOPS_SGLANG_INSTANCE"
MARKER_LAUNCH_ID = "LLMOPS_SGLANG_LAUNCH_ID"
MARKER_STATE_DIR = "LLMOPS_SGLANG_STATE_DIR"

# psutil's reader of every process's parent in one pass (behind Process.children()); private.
_ONE_PASS_PARENTS = "_ppid_map"
# One clock tick (start times in /proc/PID/stat count them), plus float slack.
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") + 0.001
# A full row, for a single process (read_proc, children_of).
_ATTRS = ["ppid", "name", "status", "cmdline"]
# psutil's status names -> the state letters of ps(1) and /proc/PID/stat, which callers compare.
_STATE = {"running": "R", "sleeping": "S", "disk-sleep": "D", "stopped": "T", "tracing-stop": "t",
          "zombie": "Z", "dead": "X", "wake-kill": "K", "waking": "W", "idle": "I", "parked": "P",
          "locked": "L", "waiting": "W"}


def require() -> Any:
    """psutil, or a clear error (modules check first: this is the library's own guard)."""
    if psutil is None:
        raise SglangError("the Python library psutil is required on the managed host (it reads the process "
                          "table): install python3-psutil or use the sglang venv's python", reason="missing_library")
    return psutil


@dataclass
class Proc:
    """A process as the table lists it (see the module docstring for what is read when)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    comm: str
    state: str
    uid: int
    start_time: float
    cmdline: List[str] = field(default_factory=list)
    kthread: bool = False       # a kernel thread (kthreadd and its children)

    @property
    def user(self) -> str:
        return username(self.uid)

    @property
    def title(self) -> str:
        """What `ps` shows: the cmdline joined, or [comm] for kernel threads."""
        return " ".join(self.cmdline) if self.cmdline else "[%s]" % self.comm

    @property
    def is_zombie(self) -> bool:
        return self.state in ("Z", "X")

    def to_dict(self) -> Dict[str, object]:
        return {
            "pid": self.pid, "ppid": self.ppid, "pgid": self.pgid, "sid": self.sid,
            "name": self.comm, "state": self.state, "user": self.user, "uid": self.uid,
            "start_time": self.start_time, "cmdline": mask_cmdline(self.cmdline),
        }


class _Row(Proc):
    """A process as psutil listed it: the command line from the listing, the other fields read
    on first use through the row's psutil handle (given, or made on first use by _identify,
    which checks that the pid still names the listed process). Its creation time is fixed with
    the handle, so `start_time` stays that process's even if the pid is reused later; the
    parent comes from psutil's ppid(), which checks the pid against reuse. A row whose process
    has exited (or whose pid was reused) reads state X (gone), uid -1, group and session 0, and
    start time 0.0 when it was never identified. Signals never trust a row: they go through
    pidfds checked against `start_time` (_pidfd)."""

    # The dataclass __init__ would assign the lazy fields: this one sets the listed ones only.
    # pylint: disable=super-init-not-called
    def __init__(self, handle: Any, cmdline: List[str], info: Optional[Dict[str, Any]] = None,
                 pid: Optional[int] = None, read_at: Optional[float] = None) -> None:
        self._handle_obj = handle  # None: made on first use (_handle), for `pid`
        self.pid = handle.pid if handle is not None else int(pid or 0)
        self.cmdline = cmdline
        self._read_at = read_at  # CLOCK_BOOTTIME just before the listing read the command line
        self._ppid: Optional[int] = None
        self._comm: Optional[str] = None
        self._state: Optional[str] = None
        self._pgid: Optional[int] = None
        self._sid: Optional[int] = None
        self._uid: Optional[int] = None
        self._start: Optional[float] = None
        self._kthread: Optional[bool] = None
        if info is not None:
            self._set_stat(info)

    @property
    def _handle(self) -> Any:
        """The psutil handle, made on first use for a row listed without one (_identify)."""
        if self._handle_obj is None:
            self._handle_obj = _identify(self.pid, self.cmdline, self._read_at)
        return self._handle_obj

    def _set_stat(self, info: Dict[str, Any]) -> None:
        if "ppid" in info:
            self._ppid = int(info.get("ppid") or 0)
        self._comm = info.get("name") or ""
        self._state = _STATE.get(info.get("status") or "", "?")

    def _read_state(self) -> None:
        if self._state is None:
            try:
                self._state = _STATE.get(self._handle.status(), "?")
            except psutil.Error:   # exited since it was listed
                self._mark_gone()

    def _read_comm(self) -> None:
        if self._comm is None:
            try:
                self._comm = self._handle.name() or ""
            except psutil.ZombieProcess:
                self._comm = ""
            except psutil.Error:   # exited since it was listed
                self._mark_gone()

    def _read_ppid(self) -> None:
        if self._ppid is None:
            try:
                self._ppid = int(self._handle.ppid() or 0)
            except psutil.Error:   # exited, or its pid reused, since it was listed
                self._mark_gone()

    def _mark_gone(self) -> None:
        """State X (gone); the fields not read yet keep their empty values."""
        self._state = "X"
        self._comm = "" if self._comm is None else self._comm
        self._ppid = 0 if self._ppid is None else self._ppid

    def _read_group(self) -> None:
        if self._pgid is None:
            try:
                self._pgid, self._sid = os.getpgid(self.pid), os.getsid(self.pid)  # syscalls: no psutil API needed
            except OSError:   # exited since it was listed
                self._pgid, self._sid = 0, 0

    @property  # type: ignore[override]
    def ppid(self) -> int:
        self._read_ppid()
        return self._ppid  # type: ignore[return-value]

    @ppid.setter
    def ppid(self, value: int) -> None:
        self._ppid = value

    @property  # type: ignore[override]
    def comm(self) -> str:
        self._read_comm()
        return self._comm  # type: ignore[return-value]

    @comm.setter
    def comm(self, value: str) -> None:
        self._comm = value

    @property  # type: ignore[override]
    def state(self) -> str:
        self._read_state()
        return self._state  # type: ignore[return-value]

    @state.setter
    def state(self, value: str) -> None:
        self._state = value

    @property  # type: ignore[override]
    def pgid(self) -> int:
        self._read_group()
        return self._pgid  # type: ignore[return-value]

    @pgid.setter
    def pgid(self, value: int) -> None:
        self._pgid = value

    @property  # type: ignore[override]
    def sid(self) -> int:
        self._read_group()
        return self._sid  # type: ignore[return-value]

    @sid.setter
    def sid(self, value: int) -> None:
        self._sid = value

    @property  # type: ignore[override]
    def uid(self) -> int:
        if self._uid is None:
            try:
                self._uid = int(self._handle.uids().effective)
            except psutil.NoSuchProcess:      # exited since it was listed
                self._uid = -1
                self._mark_gone()
            except psutil.Error:
                self._uid = -1
        return self._uid

    @uid.setter
    def uid(self, value: int) -> None:
        self._uid = value

    @property  # type: ignore[override]
    def start_time(self) -> float:
        if self._start is None:
            try:
                self._start = round(self._handle.create_time(), 2)
            except psutil.Error:   # gone before it was identified: matches no live process
                self._start = 0.0
                self._mark_gone()
        return self._start

    @start_time.setter
    def start_time(self, value: float) -> None:
        self._start = value

    @property  # type: ignore[override]
    def kthread(self) -> bool:
        if self._kthread is None:
            # kthreadd (pid 2, no parent) and its children, without a command line: psutil has
            # no API for the PF_KTHREAD flag. In a PID namespace no kernel thread is visible.
            self._kthread = not self.cmdline and not self.is_zombie and \
                ((self.pid == 2 and self.ppid == 0) or self.ppid == 2)
        return self._kthread

    @kthread.setter
    def kthread(self, value: bool) -> None:
        self._kthread = value


def _argv(raw: Optional[List[str]]) -> List[str]:
    """psutil's cmdline without the empty trailing arguments a setproctitle title leaves (the
    rest of the old argv area, NUL- or space-padded)."""
    argv = list(raw or [])
    while argv and argv[-1] == "":
        argv.pop()
    return argv


def _row(handle: Any, info: Dict[str, Any]) -> Optional[Proc]:
    """A full row from psutil's info for `handle` (read_proc, children_of); None when the
    process is gone."""
    try:
        pgid, sid = os.getpgid(handle.pid), os.getsid(handle.pid)   # syscalls: no psutil API needed
    except OSError:
        return None
    row = _Row(handle, _argv(info.get("cmdline")), info)
    row.pgid, row.sid = pgid, sid
    return row


def _cmdline_of(reader: Any) -> Optional[List[str]]:
    """reader.cmdline() as a row holds it ([] for a zombie or one not readable); None when the
    process is gone."""
    try:
        return _argv(reader.cmdline())
    except psutil.ZombieProcess:
        return []
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return []


class _Gone:
    """The handle of a row whose process exited, or whose pid names a later process, before the
    row was identified: every read raises NoSuchProcess, as psutil's own does for an exited
    process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):   # copy, pickle and friends probe for these: not a read
            raise AttributeError(name)

        def gone(*_args: Any, **_kwargs: Any) -> Any:
            raise psutil.NoSuchProcess(self.pid)
        return gone


def _identify(pid: int, listed: List[str], read_at: Optional[float] = None) -> Any:
    """The psutil handle of a row listed without one; psutil.Process fixes the identity
    (creation time) now. It is the listed process if it started before the listing read its
    command line (`read_at`, CLOCK_BOOTTIME): alive then and now, it held the pid at that read,
    whatever it has exec'd or retitled itself to since. One started in the same clock tick (or
    without `read_at`) must still run the listed command line, or have been listed without one
    (read in the middle of its exec, or not readable: nothing to contradict). Else the pid
    names a later process: the row is gone."""
    lib = require()
    try:
        handle = lib.Process(pid)
        started = handle.create_time() - lib.boot_time()   # = start ticks / CLK_TCK, since boot
    except (lib.Error, ValueError):
        return _Gone(pid)
    if read_at is not None and started + _TICK < read_at:
        return handle
    return handle if not listed or _cmdline_of(handle) == listed else _Gone(pid)


def _boottime() -> float:
    """Seconds since boot, the clock of a process's start time in /proc/PID/stat."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _cmdline_reader(lib: Any) -> Any:
    """What reads one pid's command line without making a psutil.Process (whose creation reads
    /proc/PID/stat first): psutil's own platform reader, the parser psutil.Process.cmdline()
    uses; psutil.Process where a psutil lacks it."""
    platform = getattr(getattr(lib, "_psplatform", None), "Process", None)
    return platform if callable(platform) else lib.Process


def _fresh_iter(attrs: Optional[List[str]]) -> Iterator[Any]:
    """psutil.process_iter over a cleared cache: psutil 6+ drops (for that pass) a cached entry
    whose pid was reused, so a process new since the last pass could be missed."""
    lib = require()
    clear = getattr(lib.process_iter, "cache_clear", None)
    if clear is not None:
        clear()
    return lib.process_iter(attrs=attrs, ad_value=None)


def boot_time() -> float:
    return float(require().boot_time())


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> Optional[str]:
    """This boot's id: a start time is comparable across runs only within one boot."""
    try:
        with open(BOOT_ID) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def boot_frame() -> Dict[str, Any]:
    """What a file that keeps start times for a later run stores beside them: the boot time
    they count from (psutil's epoch start time is the start's clock ticks since boot plus the
    kernel's btime, which a clock step - NTP, a resumed or migrated VM - moves) and the boot."""
    return {"boot_time": boot_time(), "boot_id": boot_id()}


def record_start(record: Mapping[str, Any], key: str = "start_time") -> Optional[float]:
    """A start time an earlier run stored (`key` of a launch record), counted from this run's
    btime: after a clock step every stored start time would otherwise differ from the live
    process's and a running server would read as gone. A record without its frame (written
    before it was stored) or from another boot is taken as it is."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    then = record.get("boot_time")
    if isinstance(then, bool) or not isinstance(then, (int, float)) or record.get("boot_id") != boot_id():
        return float(value)
    return round(float(value) + boot_time() - float(then), 2)


def username(uid: int) -> str:
    """The user database's name for `uid` now (not remembered: a uid can be reused), its number
    when it has none, "?" for an unread uid (-1). Asked only for processes a result names."""
    if uid < 0:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def read_proc(pid: int) -> Optional[Proc]:
    """One process, or None when it is gone (or unreadable)."""
    lib = require()
    try:
        handle = lib.Process(pid)
        return _row(handle, handle.as_dict(attrs=_ATTRS, ad_value=None))
    except (lib.Error, ValueError):
        return None


def pids() -> Iterator[int]:
    return iter(require().pids())


def snapshot(lazy: bool = True) -> Dict[int, Proc]:
    """All processes visible now, keyed by pid (ascending), each with its command line read by
    psutil's parser. `lazy`: the psutil.Process (the identity) is made when a field other than
    the command line is first read (_identify), for callers that read more of a few rows; else
    with the row, for callers that read every row (a teardown's attribution reads each uid)."""
    lib = require()
    reader = lib.Process if not lazy else _cmdline_reader(lib)
    out: Dict[int, Proc] = {}
    for pid in sorted(lib.pids()):
        read_at = _boottime()
        try:
            listed = reader(pid)
            cmdline = _cmdline_of(listed)
        except (lib.Error, ValueError):   # exited since the listing (a zombie is still listed)
            continue
        if cmdline is not None:
            out[pid] = _Row(None if lazy else listed, cmdline, pid=pid, read_at=read_at)
    return out


def links() -> Dict[int, Tuple[int, int]]:
    """pid -> (ppid, pgid) of every live, non-zombie process: the least a pass can read, for
    finding who joined a tree or a group."""
    out: Dict[int, Tuple[int, int]] = {}
    for handle in _fresh_iter(["ppid", "status"]):
        info = handle.info
        if info.get("status") in (None, "zombie", "dead") or info.get("ppid") is None:
            continue
        try:
            out[handle.pid] = (int(info["ppid"]), os.getpgid(handle.pid))
        except OSError:
            continue
    return out


def children_of(pid: int) -> List[Proc]:
    """The live children of one process (psutil's children(): one pass over the parent links,
    no full row per process), as rows; [] when it is gone."""
    lib = require()
    try:
        kids = lib.Process(pid).children()
    except (lib.Error, ValueError):
        return []
    out: List[Proc] = []
    for handle in kids:
        try:
            proc = _row(handle, handle.as_dict(attrs=_ATTRS, ad_value=None))
        except lib.Error:
            continue
        if proc is not None and proc.ppid == pid:
            out.append(proc)
    return out


def fd_targets(pid: int) -> Iterator[Tuple[str, str]]:
    """(fd number, link target) of every open fd of a process: paths, `socket:[inode]`, ...
    Nothing when the process is gone or its fd table is not readable (another user's).
    Read by hand: psutil's open_files() lists regular files only (no /dev/nvidia*, sockets or
    deleted files) and stats and reads fdinfo for each, which host-wide scans cannot afford."""
    fd_dir = os.path.join(PROC, str(pid), "fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        try:
            yield fd, os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue


def all_pids() -> List[int]:
    return list(require().pids())


def start_time_of(pid: int) -> Optional[float]:
    """The start time of a live, non-zombie process (what `Proc.start_time` holds); None when
    there is none."""
    lib = require()
    try:
        handle = lib.Process(pid)
        if handle.status() in ("zombie", "dead"):
            return None
        return round(handle.create_time(), 2)
    except (lib.Error, ValueError):
        return None


def is_alive(pid: int, start_time: Optional[float] = None) -> bool:
    """Alive and not a zombie; with start_time, also the SAME process (PID reuse check)."""
    now = start_time_of(pid)
    if now is None:
        return False
    return start_time is None or abs(now - start_time) < 0.05


def exists(pid: int) -> bool:
    """Is there a process with this number in this module's PID namespace (zombies too)?"""
    return bool(require().pid_exists(pid))


def pid_namespace(pid: int) -> Optional[str]:
    """The PID namespace of a process (`pid:[4026531836]`); None when gone or not readable.
    A container's processes are visible from the host's namespace but live in their own.
    Read by hand: psutil has no API for namespaces."""
    try:
        return os.readlink(os.path.join(PROC, str(pid), "ns", "pid"))
    except OSError:
        return None


def own_pid_namespace() -> Optional[str]:
    try:
        return os.readlink(os.path.join(PROC, "self", "ns", "pid"))
    except OSError:
        return None


def handle_of(proc: Proc) -> Any:
    """The psutil handle of a table row (made once per row), else a new one; its reads raise
    psutil.NoSuchProcess when the process is gone."""
    handle = getattr(proc, "_handle", None)
    return handle if handle is not None else require().Process(proc.pid)


def _environ(get_handle: Any) -> Optional[Dict[str, str]]:
    lib = require()
    try:
        return dict(get_handle().environ())
    except (lib.Error, ValueError):
        return None


def read_environ(pid: int) -> Optional[Dict[str, str]]:
    """The initial environment of a process; None when not readable (other user, gone)."""
    return _environ(lambda: require().Process(pid))


def environ_of(proc: Proc) -> Optional[Dict[str, str]]:
    """read_environ for a process of a snapshot, through the handle it was listed with."""
    return _environ(lambda: handle_of(proc))


def marker_of(pid: int) -> Optional[Dict[str, str]]:
    """The llmops instance marker variables of a process, if any."""
    env = read_environ(pid)
    if not env or MARKER_INSTANCE not in env:
        return None
    return {k: env[k] for k in (MARKER_INSTANCE, MARKER_LAUNCH_ID, MARKER_STATE_DIR) if k in env}


def ancestors(pid: int, procs: Optional[Dict[int, Proc]] = None) -> Set[int]:
    """pid and every ancestor up to init: never teardown targets (ansible, ssh, shell chain)."""
    seen: Set[int] = set()
    current: Optional[int] = pid
    while current and current not in seen:
        seen.add(current)
        proc = procs.get(current) if procs is not None else None
        if proc is None:
            proc = read_proc(current)
        current = proc.ppid if proc else None
    return seen


def children_map(procs: Dict[int, Proc]) -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for proc in procs.values():
        kids.setdefault(proc.ppid, []).append(proc.pid)
    return kids


def subtree_map(roots: Iterable[int], procs: Dict[int, Proc]) -> Dict[int, List[int]]:
    """children_map of the processes of `procs` below `roots` (and the roots themselves),
    without reading every row's parent: for a listed table the parent links come from one pass
    of psutil's own reader behind Process.children(), whatever the number of roots; rows built
    by hand (no psutil handle) give them from every row's parent."""
    roots = [r for r in roots if r in procs]
    if not roots:
        return {}
    if any(not isinstance(procs[r], _Row) for r in roots):
        return children_map(procs)
    below: Set[int] = set(roots)
    stack = list(roots)
    kids = _parent_links(roots, procs)
    while stack:
        for child in kids.get(stack.pop(), []):
            if child not in below and child in procs:
                below.add(child)
                stack.append(child)
    return children_map({pid: procs[pid] for pid in sorted(below)})


def _parent_links(roots: List[int], procs: Dict[int, Proc]) -> Dict[int, List[int]]:
    """ppid -> child pids, enough to walk down from `roots`: psutil's one-pass parent map (what
    Process.children() reads; not a public name, hence the fallback), else each root's
    children(recursive=True) (one such pass per root) with their parents from their rows."""
    lib = require()
    one_pass = getattr(lib, _ONE_PASS_PARENTS, None)
    if callable(one_pass):
        try:
            kids: Dict[int, List[int]] = {}
            for pid, ppid in sorted(one_pass().items()):
                kids.setdefault(ppid, []).append(pid)
            return kids
        except (lib.Error, OSError, ValueError, IndexError):
            pass
    found: Set[int] = set()
    for root in roots:
        try:
            found.update(child.pid for child in handle_of(procs[root]).children(recursive=True))
        except (lib.Error, ValueError):   # the root has exited (or its pid was reused)
            continue
    return children_map({pid: procs[pid] for pid in sorted(found) if pid in procs})


def descendants(pid: int, procs: Dict[int, Proc]) -> Set[int]:
    kids = children_map(procs)
    out: Set[int] = set()
    stack = list(kids.get(pid, []))
    while stack:
        child = stack.pop()
        if child not in out:
            out.add(child)
            stack.extend(kids.get(child, []))
    return out


# --- what counts as an sglang process -----------------------------------------------------

_TITLE = re.compile(r"^sglang::[A-Za-z_]")
# Titles of the sglang prefix that are no server process: sglang-router's launcher sets
# `sglang::router` (setproctitle); a title sweep of a worker's host must never stop the router.
_NOT_SERVER_TITLE = re.compile(r"^sglang::router(?![A-Za-z0-9_])")
_RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"


def _is_python(arg0: str) -> bool:
    base = os.path.basename(arg0)
    return bool(re.match(r"^python[0-9.]*$", base))


def sglang_reason(proc: Proc) -> Optional[str]:
    """Why this process is an sglang server process, or None. Precise on purpose: `tail -f
    sglang.log`, `vim sglang_notes.txt` or a shell whose command line mentions sglang are not."""
    argv = proc.cmdline
    if argv and _TITLE.match(argv[0]):
        if _NOT_SERVER_TITLE.match(argv[0]):
            return None
        return "sglang process title %s" % argv[0].split()[0]
    if not argv and proc.comm.startswith("sglang::"):
        if _NOT_SERVER_TITLE.match(proc.comm):
            return None
        return "sglang process name %s" % proc.comm
    if len(argv) >= 3 and _is_python(argv[0]):
        for i, arg in enumerate(argv[1:-1], start=1):
            if arg == "-m" and argv[i + 1] in ("sglang.launch_server", "sglang.launch_server.py"):
                return "command line: python -m sglang.launch_server"
            if not arg.startswith("-"):
                break
    if len(argv) >= 2 and os.path.basename(argv[0]) == "sglang" and argv[1] == "serve":
        return "command line: sglang serve"
    if len(argv) >= 3 and _is_python(argv[0]) and os.path.basename(argv[1]) == "sglang" and argv[2] == "serve":
        return "command line: sglang serve"
    return None


def is_resource_tracker(proc: Proc) -> bool:
    return any(_RESOURCE_TRACKER in a for a in proc.cmdline)


def matches_any(proc: Proc, patterns: Iterable["re.Pattern[str]"]) -> Optional[str]:
    text = "\0".join(proc.cmdline) if proc.cmdline else proc.comm
    joined = " ".join(proc.cmdline) if proc.cmdline else proc.comm
    for pattern in patterns:
        if pattern.search(joined) or pattern.search(text):
            return "matches pattern %r" % pattern.pattern
    return None
