"""PRIVATE to llmops.sglang. What a tree of files is, without reading a byte of it.

A *listing* maps each file's path relative to its root to (size, mtime in ns): enough to tell
that a file was patched, added, removed or replaced since a server started, at the cost of one
stat per file (no content is read, nothing is hashed but the listing itself). Byte-compiled
caches (`__pycache__`, `*.pyc`) and VCS metadata (`.git`) are left out: the interpreter writes the
former itself, and neither is code the server runs. A symlinked file counts as its target; a
symlinked directory is followed once (a loop is listed, not walked twice).

The launch record keeps a listing compressed (`encode`), with its `digest`: the plan compares
digests and decodes the recorded listing only when they differ, to name what changed.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import zlib
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

SKIP_DIRS = frozenset(("__pycache__", ".git", ".hg", ".svn"))
SKIP_SUFFIXES = (".pyc", ".pyo")
UNREADABLE = -1   # size of an entry that could not be read (a dangling link, a closed directory)

Entry = Tuple[int, int]          # (size, mtime_ns)
Listing = Dict[str, Entry]       # relative path -> entry ("" for a root that is a file)


def _entry(st: os.stat_result) -> Entry:
    return (st.st_size, st.st_mtime_ns)


def walk(root: str) -> Listing:
    """The listing of `root` (a directory, or one file as ""). A root that does not exist is an
    empty listing; a part that cannot be read is one UNREADABLE entry (`dir/`), so losing access
    reads as a change rather than as "no files". Each directory is listed through a descriptor
    and its files are stat'ed relative to it (fstatat: one name resolved per file, not the whole
    path)."""
    try:
        st = os.stat(root)
    except OSError:
        return {}
    if not stat.S_ISDIR(st.st_mode):
        return {"": _entry(st)}
    out: Listing = {}
    seen: Set[Tuple[int, int]] = {(st.st_dev, st.st_ino)}
    flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    try:
        top = os.open(root, flags)
    except OSError:
        return {"/": (UNREADABLE, 0)}
    stack = [""]  # directories to list, relative to `top` (two descriptors open at most)
    try:
        while stack:
            rel = stack.pop()
            try:
                fd = os.open(rel, flags, dir_fd=top) if rel else os.dup(top)
            except OSError:
                out[rel + "/"] = (UNREADABLE, 0)
                continue
            try:
                _list(fd, rel, out, stack, seen)
            except OSError:
                out[rel + "/"] = (UNREADABLE, 0)
            finally:
                os.close(fd)
    finally:
        os.close(top)
    return out


def _list(fd: int, rel: str, out: Listing, stack: List[str], seen: Set[Tuple[int, int]]) -> None:
    """One directory (`fd`): its files into `out`, its directories onto `stack`."""
    with os.scandir(fd) as it:
        for e in it:
            name = e.name
            sub = rel + "/" + name if rel else name
            try:
                if e.is_dir():  # d_type: no stat unless it is a symlink
                    if name in SKIP_DIRS:
                        continue
                    if e.is_symlink():
                        dst = e.stat()
                        if (dst.st_dev, dst.st_ino) in seen:
                            continue
                        seen.add((dst.st_dev, dst.st_ino))
                    stack.append(sub)
                    continue
                if not name.endswith(SKIP_SUFFIXES):
                    out[sub] = _entry(e.stat())  # fstatat(fd, name)
            except OSError:  # a dangling symlink, or a file gone while listing
                out[sub] = (UNREADABLE, 0)


def digest(listing: Listing) -> str:
    """A short digest of a listing (its sorted items' repr: formatted in C, not per entry here)."""
    text = repr(sorted(listing.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def combine(digests: Iterable[str]) -> str:
    """One digest of several (in order)."""
    return hashlib.sha256("\n".join(digests).encode("ascii")).hexdigest()[:24]


def encode(listing: Listing) -> str:
    """The listing as the record keeps it: JSON [[path, size, mtime_ns], ...], zlib, base64."""
    rows = [[k, v[0], v[1]] for k, v in sorted(listing.items())]
    raw = json.dumps(rows, separators=(",", ":")).encode("utf-8", "surrogateescape")
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def decode(text: str) -> Optional[Listing]:
    """A listing from `encode`; None when the text is not one (a damaged record)."""
    try:
        rows = json.loads(zlib.decompress(base64.b64decode(text.encode("ascii"))).decode("utf-8", "surrogateescape"))
        return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}
    except (ValueError, TypeError, IndexError, zlib.error, UnicodeError, AttributeError):
        return None


def changes(before: Listing, after: Listing) -> Dict[str, List[str]]:
    """{modified, added, removed}: sorted relative paths."""
    return {"modified": sorted(k for k in after if k in before and before[k] != after[k]),
            "added": sorted(k for k in after if k not in before),
            "removed": sorted(k for k in before if k not in after)}


def names(diff: Dict[str, List[str]]) -> List[str]:
    """The changed paths, modified first, then added, then removed."""
    return list(diff["modified"]) + list(diff["added"]) + list(diff["removed"])


def describe(paths: Sequence[str], shown: int = 1) -> str:
    """`srt/models/deepseek_v2.py (+1 file)`: the first `shown` paths and how many more."""
    head = ", ".join(paths[:shown])
    rest = len(paths) - shown
    if rest > 0:
        head += " (+%d file%s)" % (rest, "" if rest == 1 else "s")
    return head
