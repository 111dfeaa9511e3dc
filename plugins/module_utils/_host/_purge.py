"""PRIVATE to llmops.sglang. Deleting files as root in directories other users can reach.

Everything here works on directory file descriptors. A directory is opened once, component by
component with O_NOFOLLOW, checked (owner, mode) through its descriptor, and from then on
listed and emptied relative to that descriptor (unlinkat/rmdirat, a descriptor walk for
subdirectories): a path swapped for a symlink after the check leads nowhere. A path string is
never used again after the check.

Which paths may be purged at all is decided on the path as given and on its resolved form
(`check_purge_path`): system trees such as /var or /usr are refused with everything under them,
shared roots such as /tmp or /dev/shm only as themselves. The resolved form is judged, never
used: what is opened and emptied is always the path as given, walked with O_NOFOLLOW.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host._procs import username

# Nothing under these may be purged (the system's own files and every user's home), except
# below the shared scratch roots in _SCRATCH.
_SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
                 "/sbin", "/sys", "/usr", "/var")
_SCRATCH = ("/dev/shm", "/var/tmp")
# These may hold a purge directory but may not be one (emptying them hits everyone).
_SHARED_ROOTS = ("/", "/tmp", "/var/tmp", "/dev/shm", "/home", "/root", "/mnt", "/media", "/opt", "/srv")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# Intermediate components need only search permission: O_PATH where the platform has it.
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _as_given(path: str) -> str:
    """The operator's path, normalised lexically only (`//`, `.`, `..`, trailing `/`): never
    resolved. It is what is opened and emptied; with no symlink allowed on the way (see
    open_checked) the lexical form names the same directory the kernel would walk to."""
    norm = os.path.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def _deny_reason(real: str, state_dir: Optional[str], shm_dir: Optional[str]) -> Optional[str]:
    if real in _SHARED_ROOTS:
        return "is a shared root"
    if any(_under(real, tree) for tree in _SYSTEM_TREES) and not any(
            _under(real, s) and real != s for s in _SCRATCH):
        return "lies in a system directory tree"
    if os.path.dirname(real) == "/home":
        return "is a user's home directory"
    for label, other in (("the state dir", state_dir), ("the shm dir", shm_dir)):
        if not other:
            continue
        other_real = os.path.realpath(other)
        if _under(other_real, real):
            return "contains %s %s" % (label, other)
        if label == "the state dir" and _under(real, other_real):
            return "lies in %s %s" % (label, other)
    return None


def check_purge_path(path: object, state_dir: Optional[str], shm_dir: Optional[str]) -> str:
    """The operator-named purge path as given (lexically normalised, NOT resolved), or
    SglangError(bad_purge_path / unsafe_purge_path).

    The deny-list is judged on both the path as given and its resolved form: refused when either
    is a shared root, lies in a system tree (/var/lib is as wrong as /var), is a user's home
    (/home/NAME), contains the state dir or shm dir, or lies in the state dir (other instances'
    records and TMPDIRs). The resolved form is only ever judged, never returned: a symlink that
    is there for a moment while this runs (the path may not exist yet) must not choose what root
    empties. Whatever is deleted later is reached by walking the returned path with O_NOFOLLOW
    (open_checked), which refuses a symlink anywhere on the way."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise SglangError("purge path %r must be absolute" % (path,), reason="bad_purge_path")
    given = _as_given(path)
    try:
        real = os.path.realpath(given)
    except OSError as exc:  # a symlink on the way changed while it was being resolved
        raise SglangError("purge path %s changed while it was checked (%s); refusing it"
                          % (path, exc.strerror or exc), reason="unsafe_purge_path", path=path)
    for judged in (given, real):
        why = _deny_reason(judged, state_dir, shm_dir)
        if why:
            shown = path if judged == given else "%s (resolves to %s)" % (path, judged)
            raise SglangError("purge path %s %s; name a directory of its own (e.g. /dev/shm/sglang_hs)"
                              % (shown, why), reason="bad_purge_path", path=path)
    _refuse_links(given)
    return given


def _refuse_links(path: str) -> None:
    """A purge path has no symlink anywhere on its way (a clear refusal now, before anything
    is stopped; the O_NOFOLLOW walk that deletes refuses one planted later just as well)."""
    here = os.sep
    for part in [p for p in path.split(os.sep) if p]:
        here = os.path.join(here, part)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise SglangError("purge path %s: %s is a symlink (owned by %s); refusing to follow it (name the "
                              "directory itself)" % (path, here, username(st.st_uid)),
                              reason="unsafe_purge_path", path=path)


@dataclass
class CheckedDir:
    """A directory opened and checked once; `fd` is None when it does not exist."""
    path: str
    fd: Optional[int]
    dev: int = 0

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _unsafe(path: str, why: str) -> SglangError:
    return SglangError("refusing to delete in %s: %s" % (path, why), reason="unsafe_purge_path", path=path, why=why)


def _owner_ok(st: os.stat_result, euid: int) -> bool:
    return st.st_uid in (0, euid)


def _describe(st: os.stat_result) -> str:
    return "owner %s, mode %04o" % (username(st.st_uid), stat.S_IMODE(st.st_mode))


def open_checked(path: str, euid: int, shared_ok: bool = False) -> CheckedDir:
    """Open `path` (absolute, as given: never resolved) one component at a time with O_NOFOLLOW.

    Every directory on the way must be owned by root or `euid` and writable by nobody else
    unless sticky (/tmp, /dev/shm): otherwise another user could rename the next component.
    The directory itself must be owned by root or `euid` and not group/other-writable;
    `shared_ok` accepts a sticky shared directory (the shm dir itself). A missing component
    means nothing to delete; a symlink or non-directory anywhere is refused."""
    parts = [p for p in path.split("/") if p]
    fd = os.open("/", _WALK_FLAGS)
    walked = "/"
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nxt = os.open(part, _DIR_FLAGS if last else _WALK_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return CheckedDir(path, None)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _unsafe(path, "%s is a symlink or not a directory" % os.path.join(walked, part))
                raise _unsafe(path, "cannot open %s: %s" % (os.path.join(walked, part), exc.strerror or exc))
            os.close(fd)
            fd = nxt
            walked = os.path.join(walked, part)
            st = os.fstat(fd)
            if not _owner_ok(st, euid):
                raise _unsafe(path, "%s belongs to another user (%s)" % (walked, _describe(st)))
            open_to_others = st.st_mode & 0o022
            sticky = st.st_mode & stat.S_ISVTX
            if open_to_others and (last and not shared_ok or not sticky):
                raise _unsafe(path, "%s is writable by other users (%s)" % (walked, _describe(st)))
        st = os.fstat(fd)
        if not parts:
            raise _unsafe(path, "the root directory")
        return CheckedDir(path, fd, st.st_dev)
    except BaseException:
        os.close(fd)
        raise


@dataclass
class Entry:
    """A directory entry as listed through the directory's descriptor."""

    name: str
    is_dir: bool
    uid: int
    size: int


def _lstat_at(dir_fd: int, name: str) -> Optional[os.stat_result]:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _open_subdir(dir_fd: int, name: str, dev: int) -> Optional[int]:
    """A subdirectory opened without following a symlink and without leaving the filesystem
    (a bind mount inside a dump dir is not ours to empty); None when it is neither."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    if os.fstat(fd).st_dev != dev:
        os.close(fd)
        return None
    return fd


def _tree_size(dir_fd: int, dev: int) -> int:
    total = 0
    for name, st in _scan(dir_fd):
        if stat.S_ISDIR(st.st_mode):
            sub = _open_subdir(dir_fd, name, dev)
            if sub is not None:
                try:
                    total += _tree_size(sub, dev)
                finally:
                    os.close(sub)
        else:
            total += st.st_size
    return total


def tree_size(checked: CheckedDir) -> int:
    """Bytes of the files under a checked directory (0 when it does not exist), walked by
    descriptor on its own filesystem."""
    return _tree_size(checked.fd, checked.dev) if checked.fd is not None else 0


def listdir(checked: CheckedDir) -> List[str]:
    """Names in a checked directory (nothing when it does not exist or cannot be read)."""
    if checked.fd is None:
        return []
    try:
        return sorted(os.listdir(checked.fd))
    except OSError:
        return []


def _scan(dir_fd: int, names: Optional[List[str]] = None) -> Iterator[Tuple[str, os.stat_result]]:
    if names is None:
        try:
            names = sorted(os.listdir(dir_fd))
        except OSError:
            return
    for name in names:
        st = _lstat_at(dir_fd, name)
        if st is not None:
            yield name, st


def entries(checked: CheckedDir, names: Optional[List[str]] = None) -> List[Entry]:
    """The children of a checked directory (or only `names` of them), measured without
    following symlinks."""
    if checked.fd is None:
        return []
    out: List[Entry] = []
    for name, st in _scan(checked.fd, names):
        is_dir = stat.S_ISDIR(st.st_mode)
        size = st.st_size
        if is_dir:
            sub = _open_subdir(checked.fd, name, checked.dev)
            size = 0
            if sub is not None:
                try:
                    size = _tree_size(sub, checked.dev)
                finally:
                    os.close(sub)
        out.append(Entry(name, is_dir, st.st_uid, size))
    return out


def _empty(dir_fd: int, dev: int) -> List[str]:
    """Delete everything below `dir_fd` (a descriptor walk); returns what could not go."""
    errors: List[str] = []
    for name, st in _scan(dir_fd):
        errors.extend(remove_at(dir_fd, name, dev, st=st))
    return errors


def remove_at(dir_fd: int, name: str, dev: int, owner: Optional[int] = None,
              st: Optional[os.stat_result] = None) -> List[str]:
    """Delete `name` in the directory `dir_fd` (a directory with everything in it), never
    following a symlink. With `owner`, only when it still belongs to that uid. Returns errors."""
    if "/" in name or name in (".", ".."):
        return ["%s: not a plain name" % name]
    st = st or _lstat_at(dir_fd, name)
    if st is None:
        return []
    if owner is not None and st.st_uid != owner:
        return ["%s: now belongs to %s, kept" % (name, username(st.st_uid))]
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)
            return []
        sub = _open_subdir(dir_fd, name, dev)
        if sub is None:
            return ["%s: a mount point or not a directory any more, kept" % name]
        try:
            errors = _empty(sub, dev)
        finally:
            os.close(sub)
        if errors:
            return ["%s/%s" % (name, e) for e in errors]
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return []
    except OSError as exc:
        return ["%s: %s" % (name, exc.strerror or exc)]
    return []


def remove_dir(path: str, euid: int) -> Tuple[bool, List[str]]:
    """Remove a directory the module owns (the instance TMPDIR) and everything in it, through
    descriptors: the parent is opened and checked like a purge dir, the directory itself must
    belong to `euid`. Returns (removed, errors)."""
    parent = open_checked(os.path.dirname(path), euid)
    try:
        if parent.fd is None:
            return False, []
        name = os.path.basename(path)
        st = _lstat_at(parent.fd, name)
        if st is None:
            return False, []
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != euid:
            return False, ["%s is not a directory of uid %d (%s), kept" % (path, euid, _describe(st))]
        errors = remove_at(parent.fd, name, parent.dev, owner=euid, st=st)
        return not errors, ["%s/%s" % (os.path.dirname(path), e) for e in errors]
    finally:
        parent.close()
