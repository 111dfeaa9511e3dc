"""The launch record: what one launch started, written atomically (0600) for the next steps.

teardown and ready work from this record, never from a guess made with a fresh `ps`.

The modules run as root on hosts shared with other users, so every directory they write in is
checked first (`ensure_dir`): one that another user owns or can write - or that sits under a
directory where another user can rename it away - is refused with reason `unsafe_dir`. Files
are written through a fresh temporary file (O_EXCL|O_NOFOLLOW, fsync, rename): a symlink planted
at any name root writes to is never followed.
"""
from __future__ import annotations

import errno
import json
import os
import pwd
import re
import stat
import time
from typing import Any, Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

# 1: the first format. 2: + containment, containment_why, cgroup, cgroup_id, boot_id, and unit for
# the systemd backend (a record without them is read as containment none: its server is found
# and stopped the old way).
RECORD_VERSION = 2
# No dots: <name>.json, <name>.exit.json, <name>.tmp, <name>.lock, <name>.restart.lock,
# <name>.payload and <name>-<stamp>.log can then never be another instance's file.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SglangError("instance name %r is invalid: use 1-63 letters, digits, '_' or '-', starting with a "
                          "letter or digit (no dots: the name must not collide with another instance's "
                          "record, exit, TMPDIR, lock or log files)" % (name,), reason="bad_name")
    return name


def default_state_dir() -> str:
    if os.geteuid() == 0:
        return "/var/lib/llmops-sglang"
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "llmops-sglang")


def record_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.json" % validate_name(name))


def is_record_file(filename: str) -> bool:
    """Is `filename` (a base name) a launch record, `<name>.json`? Instance names have no dots,
    so the instance's other JSON files (`<name>.exit.json`, `<name>.timeline.json`, `<name>.good.json`)
    never are."""
    return filename.endswith(".json") and bool(_NAME.fullmatch(filename[:-len(".json")]))


def record_files(state_dir: str) -> List[str]:
    """The launch records in `state_dir` (paths, sorted); none when it cannot be listed."""
    try:
        names = os.listdir(state_dir)
    except OSError:
        return []
    return [os.path.join(state_dir, n) for n in sorted(names) if is_record_file(n)]


def exit_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.exit.json" % validate_name(name))


def tmpdir_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.tmp" % validate_name(name))


def payload_path(state_dir: str, name: str) -> str:
    """The supervisor's payload for the systemd backend (0600, deleted once the server exists)."""
    return os.path.join(state_dir, "%s.payload" % validate_name(name))


# --- errors that name their path -------------------------------------------------------------

def io_error(action: str, path: str, exc: OSError, **details: Any) -> SglangError:
    """`cannot <action> <path>: <strerror>` with reason no_space (ENOSPC, EDQUOT) or io_error."""
    reason = "no_space" if exc.errno in _NO_SPACE else "io_error"
    return SglangError("cannot %s %s: %s" % (action, path, exc.strerror or exc), reason=reason, path=path,
                       **details)


# --- directories nobody else can touch -------------------------------------------------------

def _trusted_owner(uid: int) -> bool:
    """The module's own user, or root (who can do anything anyway)."""
    return uid in (os.geteuid(), 0)


def _owner(uid: int) -> str:
    try:
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return "uid %d" % uid


def _expected_owner() -> str:
    return "root (uid 0)" if os.geteuid() == 0 else "%s or root" % _owner(os.geteuid())


def _unsafe(label: str, path: str, offender: str, st: os.stat_result, why: str) -> SglangError:
    """`offender` is `path` itself or the directory above it that makes it unsafe."""
    mode = "%04o" % stat.S_IMODE(st.st_mode)
    where = "" if offender == path else "%s above it " % offender
    return SglangError(
        "%s %s is unsafe: %s%s (owner %s, mode %s); it must belong to %s, not be writable by group or "
        "others, and lie under directories no other user can rename it in"
        % (label, path, where, why, _owner(st.st_uid), mode, _expected_owner()),
        reason="unsafe_dir", path=path, unsafe_path=offender, owner=_owner(st.st_uid), mode=mode)


# Symlinks followed on one walk (the kernel's own limit is 40).
_MAX_LINKS = 40
_WALK = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _cannot_create(path: str, what: str) -> SglangError:
    return SglangError("cannot create directory %s: %s" % (path, what), reason="io_error", path=path)


def _lstat_at(dir_fd: int, name: str) -> Optional[os.stat_result]:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _judge(label: str, path: str, walked: str, st: os.stat_result, last: bool) -> None:
    """One directory of the walk, judged through its descriptor: ours or root's; the last one
    writable by nobody else, one above it at most sticky-writable (nobody can rename our entry)."""
    if not _trusted_owner(st.st_uid):
        raise _unsafe(label, path, walked, st, "is owned by another user" if last else "belongs to another user")
    if last and st.st_mode & 0o022:
        raise _unsafe(label, path, walked, st, "is writable by group or others")
    if not last and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise _unsafe(label, path, walked, st, "is writable by group or others without the sticky bit")


def _walk(path: str, label: str, mode: Optional[int]) -> Optional[int]:
    """`path` (absolute) walked from / one component at a time through directory descriptors,
    never letting the kernel follow a symlink: each directory is opened with O_NOFOLLOW and
    judged on its descriptor (see _judge). A symlink is followed by reading it (readlinkat) only
    when root or this user owns it, and its target is walked by the same rules. With `mode`, a
    missing directory is made with mkdirat relative to the checked parent's descriptor and then
    opened and judged like any other (one planted meanwhile is judged, never trusted). Returns
    the final directory's descriptor (the caller closes it), or None without `mode` when a
    component is missing or not a directory (creating it would report that)."""
    todo = [p for p in path.split("/") if p]
    fd = os.open("/", _WALK)
    walked = "/"
    links = 0
    try:
        _judge(label, path, walked, os.fstat(fd), not todo)
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            last = not todo
            here = os.path.normpath(os.path.join(walked, part))
            st = _lstat_at(fd, part)
            if st is None:
                if mode is None:
                    return None  # judged by the directories above it: made 0700 by ensure_dir
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass  # made by someone else meanwhile: judged below like any existing one
                except OSError as exc:
                    raise SglangError("cannot create directory %s: %s" % (here, exc.strerror or exc),
                                      reason="no_space" if exc.errno in _NO_SPACE else "io_error", path=here)
                todo.insert(0, part)
                continue
            if stat.S_ISLNK(st.st_mode):
                if not _trusted_owner(st.st_uid):
                    raise _unsafe(label, path, here, st, "is a symlink owned by another user (it can be pointed "
                                                         "elsewhere at any time)")
                links += 1
                if links > _MAX_LINKS:
                    raise _cannot_create(path, "too many levels of symbolic links") if mode is not None else \
                        SglangError("%s %s: too many levels of symbolic links" % (label, path), reason="unsafe_dir",
                                    path=path)
                target = os.readlink(part, dir_fd=fd)
                todo[:0] = [p for p in target.split("/") if p]
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _WALK)
                    walked = "/"
                continue
            if not stat.S_ISDIR(st.st_mode):
                if mode is None:
                    return None
                if last:
                    raise SglangError("%s %s is not a directory" % (label, path), reason="unsafe_dir", path=path)
                raise _cannot_create(path, "%s is not a directory" % here)
            try:
                nxt = os.open(part, _WALK, dir_fd=fd)
            except FileNotFoundError:
                todo.insert(0, part)  # removed meanwhile: look again
                continue
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    todo.insert(0, part)  # swapped meanwhile: look again (and judge what is there)
                    continue
                raise io_error("use %s" % label, here, exc)
            os.close(fd)
            fd = nxt
            walked = here
            _judge(label, path, walked, os.fstat(fd), last)
        return fd
    except BaseException:
        os.close(fd)
        raise


def check_dir(path: str, label: str = "directory") -> None:
    """Refuse (SglangError reason unsafe_dir) a directory that another user could write or swap;
    a path that does not exist yet is judged by the directories above it. Creates nothing, so
    check mode can use it."""
    fd = _walk(os.path.abspath(path), label, None)
    if fd is not None:
        os.close(fd)


def dir_problem(path: str, label: str = "directory") -> Optional[str]:
    """check_dir as a sentence (None when the directory is safe to use or to create)."""
    try:
        check_dir(path, label)
    except SglangError as exc:
        return exc.msg
    return None


def ensure_dir(path: str, mode: int = 0o700, label: str = "directory") -> None:
    """`path` exists as a directory only this user (or root) can write, created with `mode`
    (missing parents too) when absent: walked and created through directory descriptors
    (mkdirat under a checked parent, never by a path string another user could redirect).
    Raises SglangError: unsafe_dir, no_space or io_error."""
    path = os.path.abspath(path)
    fd = _walk(path, label, mode)
    if fd is not None:
        os.close(fd)
    # every directory on the way is now root's or ours and nobody else can swap it: the path is
    # as good as the descriptor from here on
    if not os.access(path, os.W_OK | os.X_OK):
        raise SglangError("%s %s is not writable by uid %d" % (label, path, os.geteuid()),
                          reason="io_error", path=path)


# --- files -----------------------------------------------------------------------------------

def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_bytes_atomic(path: str, payload: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `payload`: a fresh temporary file in the same directory (O_EXCL and
    O_NOFOLLOW, so nothing planted there is followed), fsync, rename. On any failure the
    temporary file is removed and the old file is left as it was."""
    directory = os.path.dirname(path) or "."
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = os.path.join(directory, ".%s.%s.tmp" % (os.path.basename(path), os.urandom(6).hex()))
        try:
            fd = os.open(tmp, flags, mode)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise io_error("write", path, exc)
    try:
        try:
            os.fchmod(fd, mode)  # exactly `mode`, whatever the umask
            _write_all(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise io_error("write", path, exc)
        raise


def write_json_atomic(path: str, data: Dict[str, Any], mode: int = 0o600) -> None:
    # Serialised first: a value JSON cannot hold fails before any file is touched.
    write_bytes_atomic(path, json.dumps(data, indent=2, sort_keys=True).encode("utf-8"), mode)


def write_record(state_dir: str, name: str, record: Dict[str, Any]) -> str:
    ensure_dir(state_dir, label="state_dir")
    path = record_path(state_dir, name)
    data = dict(record)
    data.setdefault("record_version", RECORD_VERSION)
    write_json_atomic(path, data)
    return path


def _unsafe_record(path: str, why: str, st: Optional[os.stat_result] = None) -> SglangError:
    details: Dict[str, Any] = {}
    if st is not None:
        details = {"owner": _owner(st.st_uid), "mode": "%04o" % stat.S_IMODE(st.st_mode)}
    return SglangError("%s is not trusted: %s; a record must be a regular file of %s that group and others "
                       "cannot write" % (path, why, _expected_owner()), reason="unsafe_record", path=path, **details)


def read_json(path: str, private: bool = False) -> Optional[Dict[str, Any]]:
    """A JSON object from a file root (or the module's user) wrote: opened without following a
    symlink and judged on the descriptor (owner, mode), so a file swapped in by another user is
    refused with reason unsafe_record, never read. `private` (a file holding secrets): group and
    others must not be able to read it either."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe_record(path, "it is a symlink")
        raise SglangError("cannot read %s: %s" % (path, exc))
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise _unsafe_record(path, "it is not a regular file", st)
            if not _trusted_owner(st.st_uid):
                raise _unsafe_record(path, "it is owned by another user", st)
            if st.st_mode & 0o022:
                raise _unsafe_record(path, "it is writable by group or others", st)
            if private and st.st_mode & 0o077:
                raise _unsafe_record(path, "it holds secrets and is readable by group or others", st)
            raw = fh.read()
    except OSError as exc:
        raise SglangError("cannot read %s: %s" % (path, exc))
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # zero bytes, cut short by a full disk or a crash, not UTF-8
        raise _damaged(path, "%s (%d bytes)" % (exc, len(raw)) if raw else "it is empty (0 bytes)")
    if not isinstance(data, dict):
        raise _damaged(path, "it does not hold a JSON object")
    return data


DAMAGED = "record_damaged"


def _damaged(path: str, why: str) -> SglangError:
    return SglangError("cannot read %s: %s" % (path, why), reason=DAMAGED, path=path)


def damaged_name(path: str, now: Optional[float] = None) -> str:
    """Where a damaged record is kept for inspection: `<name>.json.damaged-<UTC stamp>` beside it
    (never a record name itself: it does not end in .json)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return "%s.damaged-%s" % (os.path.basename(path), stamp)


def set_aside(path: str) -> str:
    """Rename the damaged record at `path` to damaged_name() through a descriptor of its
    directory (no symlink followed), only while it is still the regular file of root or the
    module's user that fails to read as a record; never deleted. Returns the new path. The caller
    holds the instance lock (no launch writes the record meanwhile)."""
    directory, base = os.path.dirname(path) or ".", os.path.basename(path)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.stat(base, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or not _trusted_owner(st.st_uid) or st.st_mode & 0o022:
            raise _unsafe_record(path, "it changed before it could be set aside", st)
        try:
            read_json(path)
        except SglangError as exc:
            if exc.details.get("reason") != DAMAGED:
                raise
        else:
            raise SglangError("%s reads as a record again: not set aside" % path, reason="error", path=path)
        target = damaged_name(path)
        for n in range(1, 100):
            if not os.path.lexists(os.path.join(directory, target)):
                break
            target = "%s-%d" % (damaged_name(path), n)
        os.rename(base, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return os.path.join(directory, target)


def damaged_record(state_dir: str, name: str, check_mode: bool) -> Optional[Dict[str, Any]]:
    """The instance's record when it exists but is damaged (empty, truncated, not a JSON object):
    kept aside for inspection outside check mode (`kept_as`), in check mode only named
    (`would_keep_as`). None for a good or missing record; an untrusted one raises (unsafe_record)."""
    path = record_path(state_dir, name)
    try:
        read_json(path)
        return None
    except SglangError as exc:
        if exc.details.get("reason") != DAMAGED:
            raise
        error = exc.msg
    info: Dict[str, Any] = {"path": path, "error": error}
    if check_mode:
        info["would_keep_as"] = os.path.join(os.path.dirname(path), damaged_name(path))
    else:
        info["kept_as"] = set_aside(path)
    return info


def damaged_text(name: str, info: Dict[str, Any]) -> str:
    """One sentence for the operator about a damaged record and where it is kept."""
    where = info.get("kept_as") or info.get("would_keep_as")
    return ("the launch record of instance %r was damaged (%s); %s %s for inspection, and the instance is found "
            "by what is left: its cgroup, its marker, its ports" % (
                name, info.get("error"), "kept aside as" if info.get("kept_as") else "it would be kept aside as",
                where))


def read_record(state_dir: str, name: str) -> Optional[Dict[str, Any]]:
    return read_json(record_path(state_dir, name))


def read_launch_exit(path: str, launch_id: Optional[str]) -> Optional[Dict[str, Any]]:
    """The exit file at `path` when it belongs to `launch_id` (any launch when None); a missing,
    unreadable or half-written file is None: the supervisor may be writing it right now."""
    try:
        data = read_json(path)
    except SglangError:
        return None
    if data and (not launch_id or data.get("launch_id") == launch_id):
        return data
    return None
