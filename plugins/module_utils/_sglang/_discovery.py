"""Running sglang servers: processes grouped into servers (main, ranks, detokenizer, ...).

One pass over the process table (`_procs.snapshot`: command lines only); the other fields, and
environments, are read only for sglang processes, their relatives, python processes (the
instance marker can only be there) and the processes below a main. A member is grouped
with its main by ancestry, else by instance launch id, else by session/process group; one
whose parent is not in its server (reparented to init or a subreaper) is `orphaned`, and
members whose main is gone form a server with `main: null` (leftovers of a dead server).
Titled processes (sglang::*) have no readable environment - setproctitle overwrites
/proc/PID/environ - so their marker is unknown; an escaped one is tied back to its server
through the listening socket they share.
"""
from __future__ import annotations

import os
import pwd
import re
import stat
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import _venv_root_of
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import mask_cmdline, masked_argv, redact_env

if TYPE_CHECKING:  # imported where used: a host without servers never compiles the port reader
    from ansible_collections.llmops.sglang.plugins.module_utils._host._ports import Listener

try:
    import psutil
except ImportError:  # the probe says what it could not read; without psutil no holder is trusted
    psutil = None

# Environment variables worth showing for a server.
_ENV_PREFIXES = ("SGLANG_", "SGL_", "NCCL_", "LLMOPS_SGLANG_", "TORCH_", "HF_")
_ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "TMPDIR", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
             "no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY")
# Title prefixes -> role; matches the 15-char `comm` too (sglang::schedul).
_ROLES = (("sglang::sched", "scheduler"), ("sglang::detok", "detokenizer"),
          ("sglang::data_p", "data_parallel_controller"), ("sglang::token", "tokenizer_worker"))
_RANK = re.compile(r"((?:DP|TP|PP|EP)\d+)")
DEFAULT_PORT = 30000


@dataclass
class Member:
    """One process of a server, with its role and why it belongs there."""

    proc: _procs.Proc
    role: str
    reason: str
    orphaned: bool = False

    def to_dict(self) -> Dict[str, Any]:
        p = self.proc
        title = p.cmdline[0] if p.cmdline and p.cmdline[0].startswith("sglang::") else p.comm
        return {
            "pid": p.pid, "ppid": p.ppid, "pgid": p.pgid, "sid": p.sid, "role": self.role,
            "rank": "_".join(_RANK.findall(title)) or None, "user": p.user, "state": p.state,
            "start_time": p.start_time, "orphaned": self.orphaned, "reason": self.reason,
            "cmdline": masked_argv(p.cmdline, p.comm),
        }


@dataclass
class Server:
    """An sglang server: its main process (None for leftovers of a dead one) and members."""

    main: Optional[_procs.Proc]
    members: List[Member] = field(default_factory=list)
    marker: Dict[str, str] = field(default_factory=dict)
    env: Dict[str, str] = field(default_factory=dict)
    exe: Optional[str] = None
    listeners: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        if self.main is not None:
            return str(self.main.pid)
        anchor = self.members[0].proc if self.members else None
        return "orphans-sid-%s" % (anchor.sid if anchor else "?")

    @property
    def pids(self) -> List[int]:
        return sorted(m.proc.pid for m in self.members)

    @property
    def argv(self) -> List[str]:
        return mask_cmdline(self.main.cmdline) if self.main is not None else []

    def args(self) -> Dict[str, Any]:
        return parse_args(self.argv)

    def port(self) -> Optional[int]:
        if self.main is None:
            return None
        try:
            return int(self.args().get("port", DEFAULT_PORT))
        except (TypeError, ValueError):
            return None

    def to_dict(self, now: Optional[float] = None, env_users: Optional[Iterable[str]] = None) -> Dict[str, Any]:
        """`env` only for a server of `env_users` (default: the user running this module):
        root reads every user's environment, and must not hand it out."""
        now = time.time() if now is None else now
        main = self.main
        anchor = main or (self.members[0].proc if self.members else None)
        argv0 = main.cmdline[0] if main is not None and main.cmdline else None
        viewers = set(env_users) if env_users is not None else {_procs.username(os.geteuid())}
        env_shown = anchor is not None and anchor.user in viewers
        return {
            "id": self.id,
            "pid": main.pid if main else None,
            "main": main is not None,
            "instance": self.marker.get(_procs.MARKER_INSTANCE),
            "launch_id": self.marker.get(_procs.MARKER_LAUNCH_ID),
            "state_dir": self.marker.get(_procs.MARKER_STATE_DIR),
            "user": anchor.user if anchor else None,
            "start_time": anchor.start_time if anchor else None,
            "age_seconds": round(now - anchor.start_time, 1) if anchor else None,
            "interpreter": {"cmdline": argv0, "exe": self.exe,
                            "venv": _venv_root_of(argv0) if argv0 and os.path.isabs(argv0) else None},
            "argv": self.argv,
            "args": self.args(),
            "port": self.port(),
            "listeners": self.listeners,
            "listening_ports": sorted({int(l["port"]) for l in self.listeners}),
            "other_namespace": _other_namespace(anchor.pid) if anchor else False,
            "env": self.env if env_shown else None,
            "env_hidden": not env_shown,
            "pids": self.pids,
            "members": [m.to_dict() for m in sorted(self.members, key=_member_order)],
            "orphaned": [m.proc.pid for m in self.members if m.orphaned],
        }


def _other_namespace(pid: int) -> bool:
    """Runs in another PID namespace (a container): its paths are not this host's paths."""
    theirs = _procs.pid_namespace(pid)
    return theirs is not None and theirs != _procs.own_pid_namespace()


def _member_order(member: Member) -> Tuple[int, str, int]:
    order = {"main": 0, "launcher": 1, "supervisor": 1}
    return (order.get(member.role, 2), member.role, member.proc.pid)


def parse_args(argv: List[str]) -> Dict[str, Any]:
    """`python -m sglang.launch_server --tp-size 2 --flag` -> {"tp_size": "2", "flag": True}."""
    start = 0
    for i, arg in enumerate(argv):
        if arg in ("sglang.launch_server", "serve"):
            start = i + 1
            break
    out: Dict[str, Any] = {}
    rest = argv[start:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                out[key] = value
            elif i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                out[key] = rest[i + 1]
                i += 1
            else:
                out[key] = True
        i += 1
    return out


def role_of(proc: _procs.Proc) -> str:
    title = proc.cmdline[0] if proc.cmdline else proc.comm
    for prefix, role in _ROLES:
        if title.startswith(prefix) or proc.comm.startswith(prefix):
            return role
    if title.startswith("sglang::"):
        return title[len("sglang::"):].split()[0] or "sglang"
    return "other"


def interesting_env(env: Dict[str, str]) -> Dict[str, str]:
    picked = {k: v for k, v in env.items() if k.startswith(_ENV_PREFIXES) or k in _ENV_KEYS}
    return redact_env(dict(sorted(picked.items())))


def _is_cmdline_main(reason: Optional[str]) -> bool:
    return bool(reason and reason.startswith("command line"))


def _is_python(proc: _procs.Proc) -> bool:
    return bool(proc.cmdline) and bool(re.match(r"^python[0-9.]*$", os.path.basename(proc.cmdline[0])))


def _exe(pid: int) -> Optional[str]:
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return None


def _parent_in(proc: _procs.Proc, pids: Set[int]) -> bool:
    return proc.ppid in pids


def find_servers(procs: Optional[Dict[int, _procs.Proc]] = None, with_ports: bool = True) -> List[Server]:
    """Every sglang server on the host (all users), grouped; see the module docstring."""
    procs = _procs.snapshot() if procs is None else procs
    reasons: Dict[int, str] = {}
    for pid, proc in procs.items():
        reason = _procs.sglang_reason(proc)  # the command line first: the state costs a read
        if reason and not proc.is_zombie:    # a zombie is gone already: holds no port, GPU memory or file
            reasons[pid] = reason
    # Environments: sglang processes, their parents (supervisor/launcher) and python processes.
    env_pids = set(reasons) | {procs[p].ppid for p in reasons if procs[p].ppid in procs}
    env_pids |= {pid for pid, proc in procs.items() if _is_python(proc)}
    envs = {pid: e for pid, e in ((pid, _procs.read_environ(pid)) for pid in env_pids) if e is not None}

    def marker(pid: int) -> Dict[str, str]:
        env = envs.get(pid) or {}
        return {k: env[k] for k in (_procs.MARKER_INSTANCE, _procs.MARKER_LAUNCH_ID,
                                    _procs.MARKER_STATE_DIR) if k in env}

    # Mains: command-line sglang processes whose parent is not one (`sglang serve` wrapper).
    mains = [pid for pid, r in reasons.items()
             if _is_cmdline_main(r) and not _is_cmdline_main(reasons.get(procs[pid].ppid))]
    kids = _procs.subtree_map(mains, procs)
    servers: Dict[int, Server] = {}
    assigned: Dict[int, int] = {}
    for pid in sorted(mains):
        server = Server(main=procs[pid], marker=marker(pid))
        server.members.append(Member(procs[pid], "main", reasons[pid]))
        servers[pid] = server
        assigned[pid] = pid
        # Everything below the main belongs to it (ranks, detokenizer, resource tracker, ...).
        stack = list(kids.get(pid, []))
        while stack:
            child = stack.pop()
            if child in assigned:
                continue
            proc = procs[child]
            role = "launcher" if _is_cmdline_main(reasons.get(child)) else role_of(proc)
            if role == "other" and _procs.is_resource_tracker(proc):
                role = "resource_tracker"
            server.members.append(Member(proc, role, reasons.get(child) or "descendant of server %d" % pid))
            assigned[child] = pid
            stack.extend(kids.get(child, []))
        # The supervising parent carries the same launch marker (sglang_launch's supervisor).
        parent = procs.get(procs[pid].ppid)
        if parent and server.marker and marker(parent.pid).get(_procs.MARKER_LAUNCH_ID) == \
                server.marker.get(_procs.MARKER_LAUNCH_ID) and parent.pid not in assigned:
            server.members.append(Member(parent, "supervisor", "instance marker of the server's parent"))
            assigned[parent.pid] = pid

    by_launch = {s.marker[_procs.MARKER_LAUNCH_ID]: s for s in servers.values()
                 if s.marker.get(_procs.MARKER_LAUNCH_ID)}
    by_group: Dict[int, Server] = {}
    for s in servers.values():
        by_group.setdefault(s.main.pgid, s)  # type: ignore[union-attr]
    orphans: Dict[str, Server] = {}
    # Escaped sglang processes, plus marked python processes that are not under a main.
    strays = [pid for pid in reasons if pid not in assigned]
    strays += [pid for pid in envs if pid not in assigned and pid not in reasons and marker(pid)
               and procs[pid].ppid not in mains]
    for pid in sorted(strays):
        proc = procs[pid]
        mark = marker(pid)
        role = role_of(proc) if pid in reasons else "marked"
        reason = reasons.get(pid) or "instance marker %s=%s" % (
            _procs.MARKER_INSTANCE, mark.get(_procs.MARKER_INSTANCE))
        server = by_launch.get(mark.get(_procs.MARKER_LAUNCH_ID, "")) or by_group.get(proc.pgid)
        if server is None:
            key = mark.get(_procs.MARKER_LAUNCH_ID) or "sid-%d" % proc.sid
            server = orphans.setdefault(key, Server(main=None, marker=mark))
        server.members.append(Member(proc, role, reason))
        assigned[pid] = -1
    out = list(servers.values()) + list(orphans.values())
    socks = _listeners_by_pid(sorted(p for p in assigned)) if with_ports and out else []
    if orphans and socks:
        out = _merge_by_socket(out, socks)
    for server in out:
        member_pids = set(server.pids)
        for member in server.members:
            # A rank/detokenizer whose parent is not in its server escaped: init, a subreaper,
            # or a dead main. The main itself and its supervisor naturally have outside parents.
            if member.role not in ("main", "supervisor") and not _parent_in(member.proc, member_pids):
                member.orphaned = True
        anchor = server.main or server.members[0].proc
        server.exe = _exe(anchor.pid)
        env = envs.get(anchor.pid)
        server.env = interesting_env(env) if env else {}
    if with_ports and out:
        attach_listeners(out, socks)
    return out


def _listeners_by_pid(pids: Iterable[int]) -> List["Listener"]:
    from ansible_collections.llmops.sglang.plugins.module_utils._host._ports import listeners_by_pid

    return listeners_by_pid(pids)


def _merge_by_socket(servers: List[Server], socks: List[Listener]) -> List[Server]:
    """A titled process cannot be tied to its server by environment (setproctitle overwrites
    /proc/PID/environ), but an escaped worker still holding the server's listening socket
    (sglang #15165) is that server's: move it there."""
    owner: Dict[int, Server] = {pid: s for s in servers for pid in s.pids}
    for sock in socks:
        holders = [owner[p] for p in sock.pids if p in owner]
        mains = [s for s in holders if s.main is not None]
        if not mains:
            continue
        for stray in holders:
            if stray.main is None and stray.members:
                mains[0].members.extend(stray.members)
                for member in stray.members:
                    owner[member.proc.pid] = mains[0]
                stray.members = []
    return [s for s in servers if s.members]


def attach_listeners(servers: List[Server], socks: Optional[List[Listener]] = None) -> None:
    """The members' listening sockets (psutil, per member) attached to their servers."""
    owner: Dict[int, Server] = {pid: s for s in servers for pid in s.pids}
    for listener in (socks if socks is not None else _listeners_by_pid(owner)):
        for pid in listener.pids:
            server = owner.get(pid)
            if server is not None:
                entry = listener.to_dict()
                entry["pids"] = [p for p in listener.pids if owner.get(p) is server]
                if entry not in server.listeners:
                    server.listeners.append(entry)


def server_of_pid(servers: Iterable[Server], pid: int) -> Optional[Server]:
    for server in servers:
        if pid in server.pids:
            return server
    return None


class Identity(NamedTuple):
    """Who a process really is: its real, effective and saved uids, its executable and that
    file's mode (setuid/setgid bits)."""
    uids: Tuple[int, ...]
    exe: str
    mode: int


def identity(pid: int) -> Optional[Identity]:
    """The process's Identity, or None when it cannot be read (gone, not permitted, no psutil)."""
    if psutil is None:
        return None
    try:
        uids = tuple(int(u) for u in psutil.Process(pid).uids())
    except psutil.Error:
        return None
    link = "/proc/%d/exe" % pid
    try:
        return Identity(uids, os.readlink(link), os.stat(link).st_mode)
    except OSError:
        return None


def _uid_of(user: str) -> Optional[int]:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return int(user) if user.isdigit() else None


def _not_ours(pid: int, uid: int, user: str) -> Optional[str]:
    """Why process `pid` is not wholly `user`'s, or None. Its effective uid alone is not enough:
    a setuid program another user starts runs with the effective uid of the file's owner."""
    ident = identity(pid)
    if ident is None:
        return "pid %d: its uids and executable cannot be read" % pid
    if any(u != uid for u in ident.uids):
        return "pid %d runs with real/effective/saved uids %s, not all of user %s (uid %d): it was started by " \
               "another user" % (pid, "/".join(str(u) for u in ident.uids), user, uid)
    if ident.mode & (stat.S_ISUID | stat.S_ISGID):
        return "pid %d runs the setuid/setgid program %s, which any user can start" % (pid, ident.exe)
    return None


def credential_refusal(servers: Iterable[Server], socks: List[Listener], user: str,
                       launch_ids: Iterable[str] = ()) -> Optional[str]:
    """None when every process holding these listening sockets is a member of a recognised
    sglang server run by `user` in this PID namespace: only such a listener may receive an
    api key. Otherwise the sentence saying why not, naming the holder (command line masked).

    A member counts only when its server has a command-line main process, or is tied by its
    instance marker to one of `launch_ids` (the launch records): an sglang title is free for any
    process to take. It must also be wholly `user`'s - real, effective and saved uids - and run
    no setuid/setgid program."""
    if not socks:
        return "nothing listens there"
    uid = _uid_of(user)
    records = set(launch_ids)
    by_pid = {m.proc.pid: (s, m) for s in servers for m in s.members}
    for sock in socks:
        if not sock.pids:
            return "the owner of %s:%d is not visible to uid %d (another user's process)" % (
                sock.address, sock.port, os.geteuid())
        for pid in sock.pids:
            server, member = by_pid.get(pid, (None, None))
            if member is None or server is None:
                proc = _procs.read_proc(pid)
                return "pid %d (user %s: %s) is not an sglang server" % (
                    pid, proc.user if proc else "?",
                    _redact.describe_cmdline(proc.cmdline, proc.comm, 200) if proc else "gone")
            if server.main is None and server.marker.get(_procs.MARKER_LAUNCH_ID) not in records:
                return "pid %d (%s) only looks like an sglang process: there is no sglang main process or launch " \
                       "record it belongs to" % (pid, _redact.describe_cmdline(member.proc.cmdline, member.proc.comm, 200))
            if member.proc.user != user:
                return "pid %d is an sglang server of user %s, not of %s" % (pid, member.proc.user, user)
            if uid is None:
                return "user %s does not exist on this host" % user
            problem = _not_ours(pid, uid, user)
            if problem is not None:
                return problem
            theirs = _procs.pid_namespace(pid)
            if theirs is not None and theirs != _procs.own_pid_namespace():
                return "pid %d runs in another PID namespace (%s, a container), not in this one" % (pid, theirs)
    return None
