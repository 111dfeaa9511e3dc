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


def _check_target(label: str, path: str) -> None:
    """The directory itself (symlinks followed): ours or root's, not group/other-writable."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise io_error("use %s" % label, path, exc)
    if not stat.S_ISDIR(st.st_mode):
        raise SglangError("%s %s is not a directory" % (label, path), reason="unsafe_dir", path=path)
    if not _trusted_owner(st.st_uid):
        raise _unsafe(label, path, path, st, "is owned by another user")
    if st.st_mode & 0o022:
        raise _unsafe(label, path, path, st, "is writable by group or others")


def _ancestors(path: str) -> List[str]:
    out = []
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return out
        out.append(parent)
        path = parent


def _check_above(label: str, path: str) -> None:
    """Every directory above `path`, as written and as resolved: another user must not be able
    to rename `path` away and put their own in its place (a world-writable parent without the
    sticky bit, a parent or symlink owned by another user)."""
    seen = set()
    for above in _ancestors(os.path.abspath(path)) + _ancestors(os.path.realpath(path)):
        if above in seen:
            continue
        seen.add(above)
        try:
            st = os.lstat(above)
        except FileNotFoundError:
            continue  # created below, 0700
        except OSError as exc:
            raise io_error("check %s above %s" % (above, label), path, exc)
        if not _trusted_owner(st.st_uid):
            raise _unsafe(label, path, above, st, "belongs to another user")
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise _unsafe(label, path, above, st, "is writable by group or others without the sticky bit")


def _check_link(label: str, path: str) -> None:
    """A last component that is a symlink must be root's or ours: the owner of a symlink in a
    sticky directory can point it elsewhere at any moment, after the directory was checked."""
    try:
        st = os.lstat(path)
    except OSError:
        return  # missing (or under a non-directory): creating or using it reports that
    if stat.S_ISLNK(st.st_mode) and not _trusted_owner(st.st_uid):
        raise _unsafe(label, path, path, st, "is a symlink owned by another user (it can be pointed elsewhere "
                                             "at any time)")


def check_dir(path: str, label: str = "directory") -> None:
    """Refuse (SglangError reason unsafe_dir) a directory that another user could write or swap;
    a path that does not exist yet is judged by the directories above it. Creates nothing, so
    check mode can use it."""
    _check_above(label, path)
    _check_link(label, path)
    if os.path.lexists(path):
        _check_target(label, path)


def dir_problem(path: str, label: str = "directory") -> Optional[str]:
    """check_dir as a sentence (None when the directory is safe to use or to create)."""
    try:
        check_dir(path, label)
    except SglangError as exc:
        return exc.msg
    return None


def ensure_dir(path: str, mode: int = 0o700, label: str = "directory") -> None:
    """`path` exists as a directory only this user (or root) can write, created with `mode`
    (missing parents too) when absent. Raises SglangError: unsafe_dir, no_space or io_error."""
    path = os.path.abspath(path)
    _check_above(label, path)
    _check_link(label, path)
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    for new in reversed(missing):
        try:
            os.mkdir(new, mode)
        except FileExistsError:
            pass  # made by someone else meanwhile: judged by the checks below, like any existing one
        except OSError as exc:
            raise SglangError("cannot create directory %s: %s" % (new, exc.strerror or exc),
                              reason="no_space" if exc.errno in _NO_SPACE else "io_error", path=new)
        _check_target(label, new)
    _check_target(label, path)
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


def is_record_file(filename: str) -> bool:
    """`<name>.json` for a valid instance name: a launch record. Names have no dots, so the other
    files of the state dir (`<name>.exit.json`, `<name>.timeline.json`, `<name>.good.json`) never
    are one."""
    return filename.endswith(".json") and bool(_NAME.fullmatch(filename[:-5]))


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
            data = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise SglangError("cannot read %s: %s" % (path, exc))
    if not isinstance(data, dict):
        raise SglangError("%s does not hold a JSON object" % path)
    return data


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
