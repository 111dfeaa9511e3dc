"""PRIVATE to llmops.sglang. cgroup v2 containment: one cgroup per instance, the authoritative
member list for teardown (a process cannot leave its cgroup without privileges, whatever it does
to its title, environment, session or parent).

Layout: <cgroup2 mount>/llmops-sglang.slice/<instance>/, mode 0700, owned by the module's user.
Both layouts are found from /proc/self/mountinfo: pure v2 (/sys/fs/cgroup) and hybrid
(/sys/fs/cgroup/unified).

Paths are never compared with /proc/PID/cgroup (that file names cgroups relative to the reader's
cgroup namespace, which need not be the mount's root): membership is read from the cgroup's own
cgroup.procs files, and an instance cgroup is told apart from a later one of the same name by its
inode number (the kernel's cgroup id, not reused while the host is up).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import stat
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

if TYPE_CHECKING:  # imported where members are pinned: choosing a backend compiles neither
    from ansible_collections.llmops.sglang.plugins.module_utils._host._pidfd import Handle

SLICE = "llmops-sglang.slice"
MOUNTINFO = "/proc/self/mountinfo"
# Longest single wait between two looks at cgroup.events when poll() gives no notification.
POLL_S = 0.02


def v2_mount(mountinfo: str = MOUNTINFO) -> Optional[str]:
    """Mount point of the cgroup2 hierarchy in this mount namespace, or None (v1-only hosts)."""
    try:
        with open(mountinfo, "r", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        pre, sep, post = line.partition(" - ")
        if sep and post.split(" ", 1)[0] == "cgroup2":
            fields = pre.split(" ")
            if len(fields) >= 5:
                # mountinfo escapes spaces and friends as octal (\040)
                return fields[4].encode().decode("unicode_escape")
    return None


def slice_path(mount: str) -> str:
    return os.path.join(mount, SLICE)


def instance_path(mount: str, name: str) -> str:
    return os.path.join(slice_path(mount), name)


def cgroup_id(path: str) -> int:
    """The kernel's id of the cgroup (its directory's inode number on cgroup2)."""
    return os.lstat(path).st_ino


def _check_owned_dir(path: str) -> None:
    """Refuse a cgroup directory another user could have prepared (owner, symlink, not a dir)."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise SglangError("cgroup path %s exists and is not a directory" % path, reason="unsafe_cgroup", path=path)
    if st.st_uid != os.geteuid():
        raise SglangError("cgroup %s exists owned by uid %d, not by this module's user (uid %d); refusing it"
                          % (path, st.st_uid, os.geteuid()), reason="unsafe_cgroup", path=path)


def check_owned(path: str) -> None:
    """SglangError(unsafe_cgroup) unless `path` is a real directory owned by this user."""
    _check_owned_dir(path)


def _mkdir_owned(path: str, mode: int) -> None:
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    _check_owned_dir(path)
    os.chmod(path, mode)


def _os_error(action: str, path: str, exc: OSError) -> SglangError:
    return SglangError("cannot %s %s: %s" % (action, path, exc.strerror or exc), reason="containment_unavailable",
                       path=path)


# The claim of an instance cgroup (see create): who made it, as an extended attribute of the
# cgroup's directory (cgroupfs keeps user.* xattrs of its owner).
CLAIM_XATTR = "user.llmops_sglang.claim"
# Longest wait for another launcher's look at the slice (a few syscalls, never a spawn).
CLAIM_WAIT_S = 10.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# path -> (descriptor holding the claim lock, cgroup id): the claims this process holds.
_HELD: Dict[str, Tuple[int, int]] = {}


def _flock(fd: int, wait_s: float) -> bool:
    """LOCK_EX on `fd` within `wait_s` seconds (0: one try)."""
    until = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= until:
                return False
            time.sleep(0.005)


def lock_holders(path: str) -> List[int]:
    """Pids holding a flock on the directory `path` (/proc/locks): the launcher of a launch in
    progress. Read without locking, so a look (check mode) never blocks a real claimant."""
    try:
        st = os.lstat(path)
        with open("/proc/locks", "r", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    want = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 11672 00:26:576 0 EOF" ("->" marks a blocked waiter)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want and fields[4].isdigit():
            pids.append(int(fields[4]))
    return sorted(set(p for p in pids if p > 0))


def claimant(path: str) -> Dict[str, Any]:
    """What the launch that made the cgroup wrote about itself ({} when nothing is readable)."""
    try:
        raw = os.getxattr(path, CLAIM_XATTR, follow_symlinks=False)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, AttributeError):
        return {}
    return data if isinstance(data, dict) else {}


def claimant_text(path: str) -> str:
    """`, claimed by launcher pid P for state dir S`, or "" when nothing is known."""
    info = claimant(path)
    pid = " pid %d" % info["pid"] if isinstance(info.get("pid"), int) else ""
    state = " for state dir %s" % info["state_dir"] if isinstance(info.get("state_dir"), str) else ""
    return ", claimed by launcher%s%s" % (pid, state) if pid or state else ""


def _in_progress(path: str, name: str, holders: List[int]) -> str:
    who = "launcher pid %s" % ", ".join(map(str, holders)) if holders else "another launcher"
    return ("cgroup %s is being claimed right now by %s%s: another launch of instance %r is starting"
            % (path, who, claimant_text(path), name))


def _members_problem(path: str, name: str) -> Optional[str]:
    busy = members(path)
    if not busy:
        return None
    return ("cgroup %s already holds %d process(es) (pids %s)%s: another launch of instance %r is still running"
            % (path, len(busy), ", ".join(str(p) for p in busy[:10]), claimant_text(path), name))


def busy_problem(path: str, name: str) -> Optional[str]:
    """Why the existing instance cgroup `path` is taken (None when it is free): processes in it,
    or a launch that claimed it and has not finished starting (its launcher holds the claim).
    The claim is read first: a launcher lets go only once its supervisor is inside, so no launch
    can slip between the two looks."""
    holders = [p for p in lock_holders(path) if p != os.getpid() or path not in _HELD]
    return _members_problem(path, name) or (_in_progress(path, name, holders) if holders else None)


def _busy(path: str, name: str, problem: str) -> SglangError:
    return SglangError(problem + "; stop it with sglang_teardown first", reason="cgroup_busy", path=path,
                       pids=members(path), claimant=claimant(path))


def _take_over(path: str, name: str) -> None:
    """Under the slice lock: an existing instance cgroup is free only when no process is in it
    and no launcher holds its claim; then it is removed (a new launch gets a new cgroup id)."""
    _check_owned_dir(path)
    release(path)  # a claim this process still holds from an earlier launch of its own
    fd = os.open(path, _DIR_FLAGS)
    try:
        # the claim first: a launcher lets go of it only once its supervisor is inside, so
        # holding it now means the members read next are all there will be
        claimed = not _flock(fd, 0)
        problem = _members_problem(path, name) or (_in_progress(path, name, lock_holders(path)) if claimed else None)
        if problem:
            raise _busy(path, name, problem)
        if not remove(path):
            raise _busy(path, name, "cgroup %s could not be removed and made fresh (a process joined it "
                                    "meanwhile%s)" % (path, claimant_text(path)))
    finally:
        os.close(fd)


def create(mount: str, name: str, owner: Optional[Dict[str, Any]] = None) -> str:
    """A fresh, empty instance cgroup owned by this user, CLAIMED by this process; its path.

    A claim is atomic across launchers (any state dir): the slice is locked while one looks and
    creates, and the new cgroup's own lock is held by this process until `release` (the launch
    has its supervisor inside, or failed), its claimant (`owner`: state dir, this pid) written on
    it. An existing cgroup with members, or with a claim held by a launcher, is another launch of
    this instance: refused with reason cgroup_busy naming it. One with neither is removed and made
    again, so the new launch gets a new cgroup id and a stale record naming the old id can never
    reach the new server."""
    try:
        _mkdir_owned(slice_path(mount), 0o755)
        slice_fd = os.open(slice_path(mount), _DIR_FLAGS)
    except OSError as exc:
        raise _os_error("create", slice_path(mount), exc)
    path = instance_path(mount, name)
    try:
        if not _flock(slice_fd, CLAIM_WAIT_S):
            raise SglangError("cannot claim cgroup %s: another launcher has held %s for %g s"
                              % (path, slice_path(mount), CLAIM_WAIT_S), reason="cgroup_busy", path=path)
        if os.path.lexists(path):
            _take_over(path, name)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            raise SglangError("cgroup %s was created by someone else meanwhile; refusing it" % path,
                              reason="unsafe_cgroup", path=path)
        except OSError as exc:
            raise _os_error("create", path, exc)
        fd = os.open(path, _DIR_FLAGS)
        st = os.fstat(fd)
        _flock(fd, 0)  # nobody else can have it yet: made just now, under the slice lock
        _HELD[path] = (fd, st.st_ino)
        _check_owned_dir(path)
        os.chmod(path, 0o700)
        info = dict(owner or {})
        info.setdefault("pid", os.getpid())
        try:
            os.setxattr(fd, CLAIM_XATTR, json.dumps(info, sort_keys=True).encode("utf-8"))
        except (OSError, AttributeError):
            pass  # no user xattrs here: a refusal names the members and the launcher pid only
    finally:
        os.close(slice_fd)  # closing drops the slice lock
    return path


def release(path: Optional[str]) -> None:
    """Let go of this process's claim on `path` (its members, if any, keep it taken)."""
    held = _HELD.pop(path, None) if isinstance(path, str) else None
    if held is not None:
        os.close(held[0])


def holds(path: Optional[str], cgroup_id: object) -> bool:
    """True when this process claimed `path` and it is still that cgroup (same id)."""
    held = _HELD.get(path) if isinstance(path, str) else None
    if held is None or held[1] != cgroup_id:
        return False
    try:
        return os.lstat(path).st_ino == held[1]  # type: ignore[arg-type]
    except OSError:
        return False


def writable(mount: Optional[str]) -> Tuple[bool, str]:
    """Can this user create instance cgroups under the mount and move processes into them?
    (False, why) when not. Moving a process needs write access to cgroup.procs of the common
    ancestor of where it is and where it goes: the hierarchy's root for the slice used here."""
    if not mount:
        return False, "no cgroup v2 hierarchy is mounted (/proc/self/mountinfo lists no cgroup2)"
    target = slice_path(mount) if os.path.isdir(slice_path(mount)) else mount
    if not os.access(target, os.W_OK):
        return False, "%s is not writable by uid %d" % (target, os.geteuid())
    procs = os.path.join(mount, "cgroup.procs")
    if not os.access(procs, os.W_OK):
        return False, "%s is not writable by uid %d (processes cannot be moved)" % (procs, os.geteuid())
    return True, "cgroup v2 at %s is writable by uid %d" % (mount, os.geteuid())


def join(path: str, pid: int = 0) -> None:
    """Move `pid` (0: the calling process) into the cgroup: before exec, so every child is born in it."""
    with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as fh:
        fh.write("%d\n" % pid)


def _subdirs(path: str) -> List[str]:
    out: List[str] = []
    try:
        with os.scandir(path) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    out.append(entry.path)
    except FileNotFoundError:
        pass
    return out


def members(path: str) -> List[int]:
    """Every process in the cgroup and its descendants (cgroup.procs, recursively); processes of
    a pid namespace this one cannot see read as 0 and are left out (cgroup.kill still gets them)."""
    pids: List[int] = []
    try:
        with open(os.path.join(path, "cgroup.procs"), "r", encoding="ascii") as fh:
            pids.extend(int(x) for x in fh.read().split())
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno == errno.ENODEV:  # removed after the open
            return []
        raise
    for sub in _subdirs(path):
        pids.extend(members(sub))
    return sorted(set(p for p in pids if p > 0))


def populated(path: str) -> bool:
    """cgroup.events `populated` (1 while any process lives in the subtree); gone counts as empty."""
    try:
        with open(os.path.join(path, "cgroup.events"), "r", encoding="ascii") as fh:
            return _populated_in(fh.read())
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            return False
        raise


def _populated_in(text: str) -> bool:
    for line in text.splitlines():
        key, _sep, value = line.partition(" ")
        if key == "populated":
            return value.strip() == "1"
    return False


def pin_members(path: str) -> Dict[int, Handle]:
    """A pidfd per member, each verified as a member AFTER it was opened: a pid that was reused
    between the read of cgroup.procs and the open is not in the second read (or its pidfd names a
    process that already exited), so a stranger never gets a handle."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _pidfd
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

    handles: Dict[int, Handle] = {}
    for pid in members(path):
        proc = _procs.read_proc(pid)
        if proc is None or proc.is_zombie:
            continue
        handle = _pidfd.open_handle(pid, proc.start_time)
        if handle is not None:
            handles[pid] = handle
    still = set(members(path))
    for pid in [p for p in handles if p not in still]:
        handles.pop(pid).close()
    return handles


def signal_members(path: str, sig: int) -> List[int]:
    """Send `sig` to every member still inside the cgroup at the moment of sending; returns the
    pids reached."""
    handles = pin_members(path)
    try:
        return sorted(pid for pid, handle in handles.items() if handle.send(sig) == "sent")
    finally:
        for handle in handles.values():
            handle.close()


def kill(path: str) -> str:
    """SIGKILL the whole subtree at once (cgroup.kill, kernel >= 5.14; else freeze and a member
    loop). Returns how it was done."""
    kill_file = os.path.join(path, "cgroup.kill")
    if os.path.exists(kill_file):
        try:
            with open(kill_file, "w", encoding="ascii") as fh:
                fh.write("1\n")
            return "cgroup.kill"
        except FileNotFoundError:
            return "cgroup.kill"  # removed meanwhile: it was empty
    return kill_each(path)


def kill_each(path: str) -> str:
    """Kernels without cgroup.kill: freeze the cgroup (no member can fork meanwhile; SIGKILL
    still ends a frozen task), SIGKILL every member, repeat until nothing is left to signal."""
    freeze = os.path.join(path, "cgroup.freeze")
    try:
        with open(freeze, "w", encoding="ascii") as fh:
            fh.write("1\n")
    except OSError:
        pass  # no freezer (kernel < 5.2): the loop below still converges on a finite fork rate
    for _attempt in range(50):
        if not signal_members(path, signal.SIGKILL):
            break
    return "SIGKILL to each member"


def wait_empty(path: str, deadline: float) -> bool:
    """Block until `populated 0` or the deadline: poll() on cgroup.events wakes on its change,
    and no single wait is longer than POLL_S. The polled descriptor is re-read each round, which
    re-arms the notification."""
    events = os.path.join(path, "cgroup.events")
    try:
        fd = os.open(events, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI | select.POLLERR)
        while True:
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                text = os.read(fd, 4096).decode("ascii", "replace")
            except OSError as exc:
                if exc.errno == errno.ENODEV:  # the cgroup was removed: nothing can live in it
                    return True
                raise
            if not _populated_in(text):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poller.poll(max(1, int(min(left, POLL_S) * 1000)))
    finally:
        os.close(fd)


def remove(path: str) -> bool:
    """rmdir the cgroup bottom-up; False when a member still lives in it (EBUSY)."""
    for sub in _subdirs(path):
        if not remove(sub):
            return False
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return False
        raise
    return True
