"""Process snapshot read straight from /proc: cheap enough for hosts with thousands of processes.

Everything that decides "is this ours?" works from a `Proc` taken here, so probe, teardown and
ready agree on what a process is. The start time doubles as the identity check against PID reuse.
"""
from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple

PROC = "/proc"
MARKER_INSTANCE = "LLMOPS_SGLANG_INSTANCE"
MARKER_LAUNCH_ID = "LLMOPS_SGLANG_LAUNCH_ID"
MARKER_STATE_DIR = "LLMOPS_SGLANG_STATE_DIR"

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PF_KTHREAD = 0x00200000
_BOOT_TIME: Optional[float] = None
_USERS: Dict[int, str] = {}


@dataclass
class Proc:
    pid: int
    ppid: int
    pgid: int
    sid: int
    comm: str
    state: str
    uid: int
    start_time: float
    cmdline: List[str] = field(default_factory=list)
    kthread: bool = False       # PF_KTHREAD in /proc/PID/stat flags

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
            "start_time": self.start_time, "cmdline": list(self.cmdline),
        }


def boot_time() -> float:
    global _BOOT_TIME
    if _BOOT_TIME is None:
        with open(os.path.join(PROC, "stat")) as fh:
            for line in fh:
                if line.startswith("btime "):
                    _BOOT_TIME = float(line.split()[1])
                    break
            else:
                _BOOT_TIME = 0.0
    return _BOOT_TIME


def username(uid: int) -> str:
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]


def _read(path: str, mode: str = "r") -> Optional[str]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data.decode("utf-8", "replace")


def read_proc(pid: int) -> Optional[Proc]:
    """One process, or None when it is gone (or unreadable)."""
    base = os.path.join(PROC, str(pid))
    stat = _read(os.path.join(base, "stat"))
    if not stat:
        return None
    # comm may contain spaces and parentheses: split on the LAST ')'.
    lpar, rpar = stat.find("("), stat.rfind(")")
    comm = stat[lpar + 1:rpar]
    rest = stat[rpar + 2:].split()
    try:
        uid = os.stat(base).st_uid
    except OSError:
        return None
    raw = _read(os.path.join(base, "cmdline")) or ""
    cmdline = raw.split("\0")
    while cmdline and cmdline[-1] == "":
        cmdline.pop()
    # setproctitle may leave one NUL-free string padded with spaces.
    if len(cmdline) == 1 and cmdline[0].endswith(" "):
        cmdline = [cmdline[0].rstrip()]
    return Proc(
        pid=pid, ppid=int(rest[1]), pgid=int(rest[2]), sid=int(rest[3]), comm=comm,
        state=rest[0], uid=uid,
        start_time=round(boot_time() + int(rest[19]) / float(_CLK_TCK), 2),
        cmdline=cmdline, kthread=bool(int(rest[6]) & _PF_KTHREAD),
    )


def pids() -> Iterator[int]:
    for entry in os.listdir(PROC):
        if entry.isdigit():
            yield int(entry)


def snapshot() -> Dict[int, Proc]:
    """All processes visible now, keyed by pid."""
    out: Dict[int, Proc] = {}
    for pid in pids():
        proc = read_proc(pid)
        if proc is not None:
            out[pid] = proc
    return out


def links() -> Dict[int, Tuple[int, int]]:
    """pid -> (ppid, pgid) of every live, non-zombie process, from /proc/PID/stat alone: a
    third of a snapshot's reads, for finding who joined a tree or a group."""
    out: Dict[int, Tuple[int, int]] = {}
    for pid in pids():
        stat = _read(os.path.join(PROC, str(pid), "stat"))
        if not stat:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 3 and rest[0] not in ("Z", "X"):
            out[pid] = (int(rest[1]), int(rest[2]))
    return out


def fd_targets(pid: int) -> Iterator[Tuple[str, str]]:
    """(fd number, link target) of every open fd of a process: paths, `socket:[inode]`, ...
    Nothing when the process is gone or its fd table is not readable (another user's)."""
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
    return [int(p) for p in os.listdir(PROC) if p.isdigit()]


def is_alive(pid: int, start_time: Optional[float] = None) -> bool:
    """Alive and not a zombie; with start_time, also the SAME process (PID reuse check)."""
    proc = read_proc(pid)
    if proc is None or proc.is_zombie:
        return False
    return start_time is None or abs(proc.start_time - start_time) < 0.05


def pid_namespace(pid: int) -> Optional[str]:
    """The PID namespace of a process (`pid:[4026531836]`); None when gone or not readable.
    A container's processes are visible from the host's namespace but live in their own."""
    try:
        return os.readlink(os.path.join(PROC, str(pid), "ns", "pid"))
    except OSError:
        return None


def own_pid_namespace() -> Optional[str]:
    try:
        return os.readlink(os.path.join(PROC, "self", "ns", "pid"))
    except OSError:
        return None


def read_environ(pid: int) -> Optional[Dict[str, str]]:
    """The initial environment of a process; None when not readable (other user, gone)."""
    try:
        with open(os.path.join(PROC, str(pid), "environ"), "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    env: Dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            key, _sep, value = item.partition(b"=")
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


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
_RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"


def _is_python(arg0: str) -> bool:
    base = os.path.basename(arg0)
    return bool(re.match(r"^python[0-9.]*$", base))


def sglang_reason(proc: Proc) -> Optional[str]:
    """Why this process is an sglang server process, or None. Precise on purpose: `tail -f
    sglang.log`, `vim sglang_notes.txt` or a shell whose command line mentions sglang are not."""
    argv = proc.cmdline
    if argv and _TITLE.match(argv[0]):
        return "sglang process title %s" % argv[0].split()[0]
    if not argv and proc.comm.startswith("sglang::"):
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
