"""/dev/shm leftovers: known sglang/torch/NCCL patterns, and which of them a live process holds.

Upstream's own sweep deletes these blindly; on a shared host we delete only what no live
process holds open or mapped.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set

from ansible_collections.llmops.sglang.plugins.module_utils import _procs

SHM_DIR = "/dev/shm"
# reference/sglang.md, "Files left behind"
PATTERNS = (
    "sgl_shm_*", "psm_*", "multi_tokenizer_args_*", "sglang_loads_*", "sglang_host_pool_*.mmap",
    "cuda.shm.*", "nccl-*", "sem.mp-*", "sem.loky-*",
)


@dataclass
class ShmEntry:
    path: str
    size: int
    is_dir: bool
    holders: List[int] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        return {"path": self.path, "size": self.size, "is_dir": self.is_dir,
                "held_by": sorted(self.holders), "held": bool(self.holders)}


def _size(path: str) -> int:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            total = 0
            for root, _dirs, files in os.walk(path):
                for name in files:
                    try:
                        total += os.lstat(os.path.join(root, name)).st_size
                    except OSError:
                        pass
            return total
        return os.lstat(path).st_size
    except OSError:
        return 0


def open_or_mapped(prefixes: Iterable[str]) -> Dict[str, Set[int]]:
    """path -> pids holding it open (fd) or mapped (maps), for paths under any of `prefixes`.
    One pass over /proc, so the cost does not grow with the number of shm files."""
    roots = tuple(p.rstrip("/") + "/" for p in prefixes)
    held: Dict[str, Set[int]] = {}
    for pid in _procs.all_pids():
        for _fd, target in _procs.fd_targets(pid):
            if target.startswith(roots):
                held.setdefault(target.replace(" (deleted)", ""), set()).add(pid)
        try:
            with open("/proc/%d/maps" % pid, "rb") as fh:
                for raw in fh:
                    line = raw.decode("utf-8", "replace")
                    idx = line.find("/")
                    if idx < 0:
                        continue
                    path = line[idx:].rstrip("\n").replace(" (deleted)", "")
                    if path.startswith(roots):
                        held.setdefault(path, set()).add(pid)
        except OSError:
            pass
    return held


def _holders(path: str, held: Dict[str, Set[int]]) -> List[int]:
    pids: Set[int] = set(held.get(path, set()))
    prefix = path.rstrip("/") + "/"
    for other, owners in held.items():
        if other.startswith(prefix):
            pids |= owners
    return sorted(pids)


def scan(shm_dir: str = SHM_DIR, patterns: Iterable[str] = PATTERNS,
         held: Optional[Dict[str, Set[int]]] = None) -> List[ShmEntry]:
    try:
        names = sorted(os.listdir(shm_dir))
    except OSError:
        return []
    pats = tuple(patterns)
    matched = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]
    if held is None:
        held = open_or_mapped([shm_dir]) if matched else {}
    out = []
    for name in matched:
        path = os.path.join(shm_dir, name)
        out.append(ShmEntry(path, _size(path), os.path.isdir(path) and not os.path.islink(path),
                            _holders(path, held)))
    return out


def purge_entries(path: str, held: Dict[str, Set[int]]) -> List[ShmEntry]:
    """Children of an operator-named directory (e.g. a dump dir), with their holders."""
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        child = os.path.join(path, name)
        out.append(ShmEntry(child, _size(child), os.path.isdir(child) and not os.path.islink(child),
                            _holders(child, held)))
    return out


def remove(entry: ShmEntry) -> Optional[str]:
    """Delete one unheld entry; returns an error string instead of raising."""
    if entry.holders:
        return "held by pid %s" % ", ".join(map(str, entry.holders))
    try:
        if entry.is_dir:
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
