"""/dev/shm leftovers: known sglang/torch/NCCL patterns, and which of them a live process holds.

Upstream's own sweep deletes these blindly; on a shared host we delete only what no live
process holds open or mapped, and (unless all_users) only what belongs to the module's user.
Listing and deleting go through a descriptor of the directory (_purge): a name swapped for a
symlink after the listing is unlinked as a symlink, never followed.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _purge

SHM_DIR = "/dev/shm"
# what SGLang, torch and NCCL leave in /dev/shm (docs/modules/sglang_teardown.md)
PATTERNS = (
    "sgl_shm_*", "psm_*", "multi_tokenizer_args_*", "sglang_loads_*", "sglang_host_pool_*.mmap",
    "cuda.shm.*", "nccl-*", "sem.mp-*", "sem.loky-*",
)


@dataclass
class ShmEntry:
    """A file or directory in /dev/shm, with the processes that hold it open or mapped."""

    path: str
    size: int
    is_dir: bool
    holders: List[int] = field(default_factory=list)
    uid: Optional[int] = None
    # where it was listed: deletion goes through this descriptor, never through `path`
    parent: Optional[_purge.CheckedDir] = field(default=None, repr=False, compare=False)
    owner: Optional[int] = None            # it must still belong to this uid when deleted

    def to_dict(self) -> Dict[str, object]:
        return {"path": self.path, "size": self.size, "is_dir": self.is_dir,
                "held_by": sorted(self.holders), "held": bool(self.holders)}


def open_or_mapped(prefixes: Iterable[str], skip: Iterable[int] = ()) -> Dict[str, Set[int]]:
    """path -> pids holding it open (fd) or mapped (maps), for paths under any of `prefixes`.
    One pass over every process (but `skip`: processes whose holdings do not count, such as
    targets about to be stopped), so the cost does not grow with the number of shm files.

    The fd links and /proc/PID/maps are read here, not through psutil: this pass covers every
    process on the host, and psutil's memory_maps() reads smaps, which sums the pages of every
    mapping (25 times the cost of maps at 2,000 small processes; seconds for one CUDA process),
    while only the paths matter; open_files() stats and reads fdinfo for every file."""
    roots = tuple(p.rstrip("/") + "/" for p in prefixes)
    needles = [root.encode("utf-8", "surrogateescape") for root in roots]
    held: Dict[str, Set[int]] = {}
    ignored = set(skip)
    for pid in _procs.all_pids():
        if pid in ignored:
            continue
        for _fd, target in _procs.fd_targets(pid):
            if target.startswith(roots):
                held.setdefault(target.replace(" (deleted)", ""), set()).add(pid)
        try:
            with open("/proc/%d/maps" % pid, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        # nearly every process maps nothing there: one substring test instead of a parse per line
        if not any(root in data for root in needles):
            continue
        for raw in data.split(b"\n"):
            line = raw.decode("utf-8", "replace")
            idx = line.find("/")
            if idx < 0:
                continue
            path = line[idx:].replace(" (deleted)", "")
            if path.startswith(roots):
                held.setdefault(path, set()).add(pid)
    return held


def holders(path: str, held: Dict[str, Set[int]]) -> List[int]:
    """Pids holding `path` or anything below it."""
    pids: Set[int] = set(held.get(path, set()))
    prefix = path.rstrip("/") + "/"
    for other, owners in held.items():
        if other.startswith(prefix):
            pids |= owners
    return sorted(pids)


def _listed(checked: _purge.CheckedDir, held: Optional[Dict[str, Set[int]]], patterns: Optional[Iterable[str]],
            owner: Optional[int]) -> List[ShmEntry]:
    """The entries of a checked directory (matching `patterns`, of `owner`), with their holders;
    `held` None: found here, and only when there is an entry (the pass covers every process)."""
    names = _purge.listdir(checked)
    if patterns is not None:
        pats = tuple(patterns)
        names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]
    out = []
    for entry in _purge.entries(checked, names):
        if owner is not None and entry.uid != owner:
            continue  # another user's file: not ours to delete (all_users is false)
        path = os.path.join(checked.path, entry.name)
        out.append(ShmEntry(path, entry.size, entry.is_dir, [], entry.uid, checked, owner))
    if held is None:
        held = open_or_mapped([checked.path]) if out and checked.fd is not None else {}
    for item in out:
        item.holders = holders(item.path, held)
    return out


def scan_checked(checked: _purge.CheckedDir, patterns: Iterable[str] = PATTERNS,
                 held: Optional[Dict[str, Set[int]]] = None, owner: Optional[int] = None) -> List[ShmEntry]:
    """Entries of a checked shm dir matching `patterns` (with `owner`: only that uid's)."""
    return _listed(checked, held, patterns, owner)


def purge_checked(checked: _purge.CheckedDir, held: Dict[str, Set[int]]) -> List[ShmEntry]:
    """Every child of a checked purge directory, with its holders."""
    return _listed(checked, held, None, None)


def _open_plain(path: str) -> _purge.CheckedDir:
    """A read-only look at a directory for reports (no ownership checks): deletions of what it
    lists still go through its descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return _purge.CheckedDir(path, None)
    return _purge.CheckedDir(path, fd, os.fstat(fd).st_dev)


def scan(shm_dir: str = SHM_DIR, patterns: Iterable[str] = PATTERNS,
         held: Optional[Dict[str, Set[int]]] = None, owner: Optional[int] = None) -> List[ShmEntry]:
    """scan_checked on a directory opened here (kept open by the entries it returns)."""
    return scan_checked(_open_plain(shm_dir), patterns, held, owner)


def purge_entries(path: str, held: Dict[str, Set[int]]) -> List[ShmEntry]:
    """Children of a directory, with their holders (see scan for the descriptor)."""
    return purge_checked(_open_plain(path), held)


def remove(entry: ShmEntry) -> Optional[str]:
    """Delete one unheld entry through the descriptor it was listed from; an error string
    instead of raising."""
    if entry.holders:
        return "held by pid %s" % ", ".join(map(str, entry.holders))
    parent = entry.parent
    if parent is None or parent.fd is None:
        parent = _open_plain(os.path.dirname(entry.path))
    if parent.fd is None:
        return None
    errors = _purge.remove_at(parent.fd, os.path.basename(entry.path), parent.dev, owner=entry.owner)
    return "; ".join(errors) or None


# --- room: how much a new server finds, and who holds the rest -------------------------------

MAX_WALKED = 200000  # entries summed below one top-level directory before its size is "at least"


def _allocated(st: os.stat_result) -> int:
    """Bytes a file really takes on tmpfs (a sparse file takes only what was written)."""
    return getattr(st, "st_blocks", 0) * 512 or st.st_size


def _tree_bytes(path: str) -> int:
    """What a directory below /dev/shm takes (lstat: a symlink is not followed)."""
    total, seen, stack = 0, 0, [path]
    while stack and seen < MAX_WALKED:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                total += _allocated(st)
    return total


def largest(shm_dir: str = SHM_DIR, count: int = 5) -> List[Dict[str, object]]:
    """The `count` top-level entries of `shm_dir` that take the most room - {path, bytes, uid,
    user, is_dir}; a directory counts with everything below it. Names and sizes only: nothing is
    opened, no content read."""
    out: List[Dict[str, object]] = []
    try:
        it = os.scandir(shm_dir)
    except OSError:
        return out
    with it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            size = _allocated(st) + (_tree_bytes(entry.path) if is_dir else 0)
            out.append({"path": entry.path, "bytes": size, "uid": st.st_uid, "user": _procs.username(st.st_uid),
                        "is_dir": is_dir})
    out.sort(key=lambda e: (-int(e["bytes"]), str(e["path"])))  # type: ignore[call-overload]
    return out[:count]
