"""PRIVATE to llmops.sglang. Directories a launched server writes into besides its log (a
hidden-state dump directory, SGLANG_HS_DUMP_DIR): checked in the launch's preflight, before
anything is stopped, and created at the launch.

The checks are the purge rules of _purge (one rule for "may root write and delete here"): opened
component by component with O_NOFOLLOW, owned by root or this user, not writable by others (a
sticky shared root such as /dev/shm may hold it); a `reclaimable` directory - one the teardown
empties before the launch - must also be a directory the teardown may purge, and its files count
as free space. Creation is relative to the checked parent's descriptor, so a symlink planted
between the check and the mkdir is refused, never followed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _purge
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._launch._preflight import Report, nearest_existing

MIB = 1048576.0


@dataclass(frozen=True)
class OutputDir:
    """One directory the server writes into, as the option gives it."""
    path: str
    min_free_mb: float = 0.0
    mode: int = 0o755
    reclaimable: bool = False


def parse(items: Optional[Iterable[Mapping[str, Any]]]) -> List[OutputDir]:
    """The option's entries, or SglangError(invalid_argument) naming the bad one."""
    out: List[OutputDir] = []
    for item in items or []:
        path = str(item.get("path") or "")
        if not os.path.isabs(path):
            raise SglangError("output_dirs: path %r must be absolute" % path, reason="invalid_argument")
        try:
            mode = int(str(item.get("mode") or "0755"), 8)
        except ValueError:
            raise SglangError("output_dirs: mode %r of %s is not an octal mode" % (item.get("mode"), path),
                              reason="invalid_argument")
        if mode & 0o022 or mode > 0o7777:
            raise SglangError("output_dirs: mode %04o of %s would let other users write where root reads and deletes"
                              % (mode, path), reason="invalid_argument")
        out.append(OutputDir(os.path.normpath(path), float(item.get("min_free_mb") or 0), mode,
                             bool(item.get("reclaimable"))))
    return out


def _opened(d: OutputDir, state_dir: str, euid: int) -> _purge.CheckedDir:
    """`d` opened and checked once (its `fd` is None when it does not exist yet), or
    SglangError saying why root must not use it."""
    if d.reclaimable:
        _purge.check_purge_path(d.path, state_dir, None)
    return _purge.open_checked(d.path, euid)


def _room(d: OutputDir, checked: _purge.CheckedDir) -> Tuple[float, int]:
    """(MiB available on its filesystem, counting the files a reclaimable one holds - the
    teardown removes them first -, those files' bytes)."""
    reclaim = _purge.tree_size(checked) if d.reclaimable else 0
    st = os.statvfs(nearest_existing(d.path))
    return (st.f_bavail * st.f_frsize + reclaim) / MIB, reclaim


def check(report: Report, dirs: List[OutputDir], state_dir: str) -> None:
    """Every output directory into the preflight report: usable, and room for `min_free_mb`."""
    euid = os.geteuid()
    for d in dirs:
        try:
            checked = _opened(d, state_dir, euid)
        except SglangError as exc:  # the purge rule's reason, not its "refusing to delete"
            report.fail("dir_safety", "output directory %s cannot be used: %s"
                        % (d.path, exc.details.get("why") or exc.msg))
            continue
        try:
            free_mb, reclaim = _room(d, checked)
        except OSError as exc:
            report.fail("space", "output directory %s: cannot read free space: %s" % (d.path, exc.strerror or exc))
            continue
        finally:
            checked.close()
        counted = " (counting %.0f MiB of files the teardown removes first)" % (reclaim / MIB) if reclaim else ""
        if free_mb < d.min_free_mb:
            report.fail("space", "output directory %s: %.1f MiB free on its filesystem%s, below its min_free_mb %g"
                        % (d.path, free_mb, counted, d.min_free_mb))
        else:
            report.ok("output_dir", "output directory %s: %.0f MiB free%s (min %g)" % (d.path, free_mb, counted,
                                                                                       d.min_free_mb))


def _make(path: str, mode: int, euid: int) -> None:
    """mkdir relative to the checked parent's descriptor, then check what is there."""
    parent, name = os.path.split(path)
    if not os.path.lexists(parent):
        _make(parent, mode, euid)
    checked = _purge.open_checked(parent, euid, shared_ok=True)
    try:
        if checked.fd is None:
            raise SglangError("output directory %s: %s vanished" % (path, parent), reason="unsafe_dir")
        try:
            os.mkdir(name, mode, dir_fd=checked.fd)
        except FileExistsError:
            pass  # checked below like any existing directory
    finally:
        checked.close()
    made = _purge.open_checked(path, euid)
    try:
        if made.fd is None:
            raise SglangError("output directory %s vanished after its mkdir" % path, reason="unsafe_dir")
        os.fchmod(made.fd, mode)
    finally:
        made.close()


def create(dirs: List[OutputDir]) -> List[str]:
    """Create the missing ones (with their mode) and check the others again, right before the
    spawn (a symlink planted since the preflight is refused, not written through); the paths
    created."""
    made: List[str] = []
    euid = os.geteuid()
    for d in dirs:
        try:
            if os.path.lexists(d.path):
                _purge.open_checked(d.path, euid).close()
                continue
            _make(d.path, d.mode, euid)
        except SglangError as exc:
            raise SglangError("output directory %s cannot be used: %s" % (d.path, exc.msg), reason="unsafe_dir",
                              path=d.path)
        except OSError as exc:
            raise SglangError("output directory %s cannot be created: %s" % (d.path, exc.strerror or exc),
                              reason="io_error", path=d.path)
        made.append(d.path)
    return made
