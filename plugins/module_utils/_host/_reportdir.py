"""PRIVATE to llmops.sglang. The restart report's directory (on the controller) and the files
written into it: opened and created without following a link, with the state dir's owner and
mode rules.

The path is walked from `/` one component at a time, each opened with O_NOFOLLOW relative to the
one above it, so a symlink planted anywhere on the way - at the report directory itself above
all - is refused, never followed (root would otherwise chmod and write into whatever directory the
link names). Every directory on the way is root's or this user's and not writable by group or
others (a root-owned sticky directory such as /tmp is fine above the report directory); the
report directory itself is root's or this user's and writable by no one else. Missing
directories are created relative to the checked parent's descriptor and judged like existing
ones. Files are written as a fresh O_EXCL|O_NOFOLLOW temporary file in that directory and
renamed over the name: a link planted at the name is replaced, never written through.
"""
from __future__ import annotations

import errno
import os
import pwd
import stat
from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

DIR_MODE = 0o755
FILE_MODE = 0o644
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _problem(st: os.stat_result, path: str, final: bool) -> Optional[str]:
    """Why the directory `st` (at `path`) may not be used, or None."""
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        return "%s is owned by user %s (only root or uid %d may own it)" % (path, _user(st.st_uid), euid)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if final or not (st.st_mode & stat.S_ISVTX and st.st_uid == 0):
            return "%s is writable by group or others (mode %04o)" % (path, stat.S_IMODE(st.st_mode))
    return None


def _unsafe(msg: str, path: str) -> SglangError:
    return SglangError("refusing the report directory: %s" % msg, reason="unsafe_dir", path=path)


@dataclass
class Opened:
    """The report directory's descriptor and what was created to get there."""
    fd: int
    path: str
    created: List[str] = field(default_factory=list)

    def close(self) -> None:
        os.close(self.fd)


def _open_below(fd: int, name: str, path: str, create: bool, mode: int, created: List[str]) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise SglangError("the report directory %s does not exist" % path, reason="missing_file", path=path)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _unsafe("%s is a symbolic link or not a directory (never followed)" % path, path) from None
        raise SglangError("cannot open %s: %s" % (path, exc.strerror or exc), reason="io_error", path=path) from None
    try:
        os.mkdir(name, mode, dir_fd=fd)
        created.append(path)
    except FileExistsError:
        pass  # made meanwhile by someone: opened and judged like any existing one
    except OSError as exc:
        raise SglangError("cannot create %s: %s" % (path, exc.strerror or exc), reason="io_error", path=path) from None
    return _open_below(fd, name, path, False, mode, created)


def open_dir(path: str, create: bool = True, mode: int = DIR_MODE) -> Opened:
    """The directory `path` (absolute, or relative to the working directory), walked and judged
    as the module docstring says; created with `mode` (missing parents too) when `create`."""
    full = os.path.abspath(path)
    fd = os.open("/", _DIR_FLAGS)
    created: List[str] = []
    walked = "/"
    try:
        problem = _problem(os.fstat(fd), walked, full == "/")
        names = [part for part in full.split("/") if part]
        for index, name in enumerate(names):
            if problem is not None:
                raise _unsafe(problem, full)
            walked = os.path.join(walked, name)
            below = _open_below(fd, name, walked, create, mode, created)
            os.close(fd)
            fd = below
            st = os.fstat(fd)
            if walked in created and st.st_uid == os.geteuid():
                os.fchmod(fd, mode)  # exactly `mode`, whatever the umask
                st = os.fstat(fd)
            problem = _problem(st, walked, index == len(names) - 1)
        if problem is not None:
            raise _unsafe(problem, full)
    except BaseException:
        os.close(fd)
        raise
    return Opened(fd, full, created)


def _valid_name(name: str) -> None:
    if not name or "/" in name or name in (".", "..") or name.startswith(".") or "\0" in name:
        raise SglangError("%r is not a plain file name for the report" % name, reason="invalid_argument")


def _same(opened: Opened, name: str, data: bytes, mode: int) -> bool:
    """Does `name` already hold exactly `data` with `mode` (a regular file, not followed)?"""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=opened.fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode or st.st_size != len(data):
            return False
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(len(data) + 1) == data
    finally:
        os.close(fd)


def write_file(opened: Opened, name: str, data: bytes, mode: int = FILE_MODE, check_mode: bool = False) -> bool:
    """Make `name` in the opened directory hold `data` with `mode`; True when that changed it."""
    _valid_name(name)
    if _same(opened, name, data, mode):
        return False
    if check_mode:
        return True
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    tmp = ".%s.%s.tmp" % (name, os.urandom(6).hex())
    path = os.path.join(opened.path, name)
    try:
        fd = os.open(tmp, flags, mode, dir_fd=opened.fd)
    except OSError as exc:
        raise SglangError("cannot write %s: %s" % (path, exc.strerror or exc), reason="io_error", path=path) from None
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=opened.fd, dst_dir_fd=opened.fd)
    except OSError as exc:
        try:
            os.unlink(tmp, dir_fd=opened.fd)
        except OSError:
            pass
        raise SglangError("cannot write %s: %s" % (path, exc.strerror or exc), reason="io_error", path=path) from None
    return True
