"""PRIVATE to llmops.sglang. cgroup v2 containment: one cgroup per instance, the authoritative
member list for teardown (a process cannot leave its cgroup without privileges, whatever it does
to its title, environment, session or parent).

Layout: <cgroup2 mount>/llmops-sglang.slice/<instance>/, mode 0700, owned by the module's user.
Both layouts are found from /proc/self/mountinfo: pure v2 (/sys/fs/cgroup) and hybrid
(/sys/fs/cgroup/unified).
"""
from __future__ import annotations

import errno
import os
import select
import signal
import stat
import time
from typing import List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError

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


def _check_owned_dir(path: str) -> None:
    """Refuse a cgroup directory another user could have prepared (owner, symlink, not a dir)."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise SglangError("cgroup path %s exists and is not a directory" % path, reason="unsafe_cgroup", path=path)
    if st.st_uid != os.geteuid():
        raise SglangError("cgroup %s exists owned by uid %d, not by this module's user (uid %d); refusing it"
                          % (path, st.st_uid, os.geteuid()), reason="unsafe_cgroup", path=path)


def _mkdir_owned(path: str, mode: int) -> None:
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    _check_owned_dir(path)
    os.chmod(path, mode)


def create(mount: str, name: str) -> str:
    """Create (or take back, when ours and empty) the instance cgroup; returns its path."""
    _mkdir_owned(slice_path(mount), 0o755)
    path = instance_path(mount, name)
    _mkdir_owned(path, 0o700)
    return path


def writable(mount: Optional[str]) -> Tuple[bool, str]:
    """Can this user create cgroups under the mount? (False, why) when not."""
    if not mount:
        return False, "no cgroup v2 hierarchy is mounted"
    target = slice_path(mount) if os.path.isdir(slice_path(mount)) else mount
    if not os.access(target, os.W_OK):
        return False, "%s is not writable by uid %d" % (target, os.geteuid())
    return True, "cgroup v2 at %s is writable" % mount


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
    """Every process in the cgroup and its descendants (cgroup.procs, recursively)."""
    pids: List[int] = []
    try:
        with open(os.path.join(path, "cgroup.procs"), "r", encoding="ascii") as fh:
            pids.extend(int(x) for x in fh.read().split())
    except FileNotFoundError:
        return []
    for sub in _subdirs(path):
        pids.extend(members(sub))
    return sorted(set(pids))


def populated(path: str) -> bool:
    """cgroup.events `populated` (1 while any process lives in the subtree); gone counts as empty."""
    try:
        with open(os.path.join(path, "cgroup.events"), "r", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "populated":
                    return value.strip() == "1"
    except FileNotFoundError:
        return False
    return False


def _inside(pid: int, rel: str) -> bool:
    here = cgroup_of(pid)
    return here is not None and (here == rel or here.startswith(rel.rstrip("/") + "/"))


def _signal_member(pid: int, rel: str, sig: int) -> bool:
    """Signal `pid` only if it is still inside the cgroup when the signal goes out: the pidfd pins
    the process, so a pid reused after our read of cgroup.procs can never receive it."""
    opener = getattr(os, "pidfd_open", None)
    sender = getattr(signal, "pidfd_send_signal", None)
    if opener is None or sender is None:  # Python < 3.9 / old kernel: check-then-kill
        if not _inside(pid, rel):
            return False
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False
    try:
        fd = opener(pid)
    except (ProcessLookupError, OSError):
        return False
    try:
        if not _inside(pid, rel):
            return False
        sender(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def relative(mount: str, path: str) -> str:
    """The cgroup as /proc/PID/cgroup names it (relative to the hierarchy root)."""
    return "/" + os.path.relpath(path, mount)


def signal_members(mount: str, path: str, sig: int) -> List[int]:
    """Send `sig` to every member still inside the cgroup at the moment of sending."""
    rel = relative(mount, path)
    return [pid for pid in members(path) if _signal_member(pid, rel, sig)]


def kill(mount: str, path: str) -> str:
    """SIGKILL the whole subtree at once (cgroup.kill, kernel >= 5.14; else a member loop)."""
    kill_file = os.path.join(path, "cgroup.kill")
    if os.path.exists(kill_file):
        with open(kill_file, "w", encoding="ascii") as fh:
            fh.write("1\n")
        return "cgroup.kill"
    for _ in range(50):  # members may fork while we loop: repeat until empty
        if not signal_members(mount, path, signal.SIGKILL):
            break
    return "SIGKILL to each member"


def wait_empty(path: str, deadline: float) -> bool:
    """Block until `populated 0` (poll() on cgroup.events wakes on change) or the deadline."""
    events = os.path.join(path, "cgroup.events")
    try:
        fd = os.open(events, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI | select.POLLERR)
        while True:
            if not populated(path):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poller.poll(int(min(left, POLL_S) * 1000) + 1)
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


def cgroup_of(pid: int) -> Optional[str]:
    """The v2 cgroup of a process, relative to the hierarchy root (the `0::` line)."""
    try:
        with open("/proc/%d/cgroup" % pid, "r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n")
    except OSError:
        return None
    return None
