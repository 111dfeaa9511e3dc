"""PRIVATE to llmops.sglang. Warm a checkpoint's files into the page cache, within a memory floor.

A restart's downtime is mostly the new server reading its weights. The old server serves until
the teardown, so the files are read before it: several files at once (bounded threads), each
sequentially in large blocks into one reused buffer per thread, with posix_fadvise(WILLNEED) on
the next block while the current one is read. Blocks already resident (mincore) are skipped.

The memory rule: pages we add to the page cache are counted as if they were not reclaimable
(MemAvailable counts page cache as available, so it barely moves while we read). Before every
block, `MemAvailable now - bytes this run added - the block's non-resident bytes` must stay
>= the floor; otherwise the run stops and says how much it warmed. Nothing is read when the
first block does not fit (reason memory_floor).
"""
from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _modelfiles
from ansible_collections.llmops.sglang.plugins.module_utils._host import _residency
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

try:
    import psutil
    HAS_PSUTIL = True
    PSUTIL_IMPORT_ERROR: Optional[BaseException] = None
except ImportError as _exc:  # the module fails with missing_required_lib
    psutil = None
    HAS_PSUTIL = False
    PSUTIL_IMPORT_ERROR = _exc

MIB = 1 << 20
MAX_THREADS = 64
MIN_BLOCK, MAX_BLOCK = 64 << 10, 1 << 30
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

Memory = Callable[[], Tuple[int, int]]  # () -> (MemAvailable, MemTotal) in bytes


def system_memory() -> Tuple[int, int]:
    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def parse_size(value: Any, option: str) -> int:
    """Bytes from an int or a size string (`16M`, `16MiB`, `16MB`, `2G`: binary units)."""
    if isinstance(value, bool):
        raise SglangError("%s must be a size, not a boolean" % option, reason="invalid_argument")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise SglangError("%s must be bytes or a size such as 16M, 64G (got %r)" % (option, value),
                          reason="invalid_argument")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def floor_bytes(spec: Any, total: int) -> int:
    """The floor: `N%` of MemTotal, or a size."""
    text = str(spec).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            pct = -1.0
        if not 0 <= pct <= 100:
            raise SglangError("min_available %r: a percentage must be between 0%% and 100%%" % spec,
                              reason="invalid_argument")
        return int(total * pct / 100)
    return parse_size(spec, "min_available")


@dataclass
class Options:
    """How to read the weights: threads, block size, memory floor, time limit."""

    threads: int = 4
    block_size: int = 16 * MIB
    min_available: Any = "10%"
    timeout: float = 1800.0
    resident_threshold: float = 99.0
    check_mode: bool = False

    def validate(self) -> "Options":
        if not 1 <= self.threads <= MAX_THREADS:
            raise SglangError("threads must be between 1 and %d (got %s)" % (MAX_THREADS, self.threads),
                              reason="invalid_argument")
        if not MIN_BLOCK <= self.block_size <= MAX_BLOCK:
            raise SglangError("block_size must be between 64K and 1G (got %d bytes)" % self.block_size,
                              reason="invalid_argument")
        page = _residency.PAGE_SIZE
        self.block_size = -(-self.block_size // page) * page  # page aligned: mincore per block is exact
        if self.timeout <= 0:
            raise SglangError("timeout must be > 0 (got %s)" % self.timeout, reason="invalid_argument")
        if not 0 < self.resident_threshold <= 100:
            raise SglangError("resident_threshold must be in (0, 100] (got %s)" % self.resident_threshold,
                              reason="invalid_argument")
        return self


@dataclass
class FileResult:
    """What reading one weight file did to its residency in the page cache."""

    entry: _modelfiles.ModelFile
    resident_before: int = 0
    resident_after: int = 0
    read_bytes: int = 0
    skipped_resident: int = 0
    done: bool = False
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.entry.to_dict(), resident_before=self.resident_before,
                    resident_after=self.resident_after, read_bytes=self.read_bytes,
                    skipped_resident_bytes=self.skipped_resident,
                    complete=self.done, seconds=round(self.seconds, 3),
                    resident_before_pct=pct(self.resident_before, self.entry.size),
                    resident_after_pct=pct(self.resident_after, self.entry.size))


def pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 100.0


class Budget:
    """The shared admission check every reader thread asks before each block."""

    def __init__(self, memory: Memory, floor: int, deadline: float) -> None:
        self.memory, self.floor, self.deadline = memory, floor, deadline
        self.added = 0
        self.stopped: Optional[str] = None
        self._lock = threading.Lock()

    def admit(self, new_bytes: int) -> bool:
        with self._lock:
            if self.stopped:
                return False
            if time.monotonic() > self.deadline:
                self.stopped = "timeout"
                return False
            available, _total = self.memory()
            if available - self.added - new_bytes < self.floor:
                self.stopped = "memory_floor"
                return False
            self.added += new_bytes
            return True

    def stop(self, why: str) -> None:
        with self._lock:
            self.stopped = self.stopped or why


def measure(entry: _modelfiles.ModelFile, tree: str) -> int:
    fd = _modelfiles.open_checked(entry, tree)
    try:
        return _residency.resident_bytes(fd, entry.size, path=entry.path)
    finally:
        os.close(fd)


def _read_block(fd: int, view: memoryview, offset: int, length: int) -> int:
    """Read [offset, offset+length) into the buffer (short reads retried); bytes read."""
    got = 0
    while got < length:
        n = os.preadv(fd, [view[got:length]], offset + got)
        if n == 0:  # the file shrank under us: nothing more to read
            break
        got += n
    return got


class Reader:
    """Reads files block by block under one Budget; one reused buffer per thread."""

    def __init__(self, tree: str, block_size: int, budget: Budget) -> None:
        self.tree, self.block_size, self.budget = tree, block_size, budget
        self._local = threading.local()

    def _buffer(self) -> memoryview:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = memoryview(bytearray(self.block_size))
        return buf

    def _admit(self, fd: int, res: FileResult, offset: int) -> Optional[Tuple[int, bool]]:
        """(length, already resident) for the block at offset, or None when the budget says stop.
        A block to read is announced to the kernel (WILLNEED) as soon as it is admitted."""
        size = res.entry.size
        length = min(self.block_size, size - offset)
        new = length - _residency.resident_bytes(fd, size, offset, length, path=res.entry.path)
        if new <= 0:
            return length, True
        if not self.budget.admit(new):
            return None
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
        return length, False

    def warm(self, res: FileResult) -> FileResult:
        started = time.monotonic()
        try:
            fd = _modelfiles.open_checked(res.entry, self.tree)
        except BaseException:
            self.budget.stop("error")
            raise
        try:
            self._warm_fd(fd, res)
        except OSError as exc:
            self.budget.stop("error")
            raise OSError(exc.errno, exc.strerror, res.entry.path) from None
        except BaseException:
            self.budget.stop("error")
            raise
        finally:
            os.close(fd)
            res.seconds = time.monotonic() - started
        return res

    def _warm_fd(self, fd: int, res: FileResult) -> None:
        size, view = res.entry.size, self._buffer()
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        offset = 0
        current = self._admit(fd, res, 0) if size else (0, True)
        while current is not None and offset < size:
            length, resident = current
            following = offset + length
            # Admit (and WILLNEED) the next block before reading this one: the disk works ahead.
            current = self._admit(fd, res, following) if following < size else (0, True)
            if resident:
                res.skipped_resident += length
            else:
                got = _read_block(fd, view, offset, length)
                res.read_bytes += got
                if got < length:
                    break
            offset = following
        res.done = offset >= size


@dataclass
class Outcome:
    """A prewarm: the files read, memory before and after, and why it stopped."""

    selection: _modelfiles.Selection
    files: List[FileResult]
    floor: int
    total_memory: int
    available_before: int
    available_after: int = 0
    read_seconds: float = 0.0
    stopped: Optional[str] = None
    read_anything: bool = False
    skipped_reason: Optional[str] = None

    def sums(self) -> Dict[str, int]:
        return {"bytes": sum(f.entry.size for f in self.files),
                "before": sum(f.resident_before for f in self.files),
                "after": sum(f.resident_after for f in self.files),
                "read": sum(f.read_bytes for f in self.files)}


def plan(model_path: str, opts: Options, memory: Memory) -> Outcome:
    """Select the files and measure what is resident; reads nothing."""
    selection = _modelfiles.select(model_path)
    available, total = memory()
    files = [FileResult(entry=e) for e in selection.files]
    for res in files:
        res.resident_before = measure(res.entry, selection.tree)
    return Outcome(selection=selection, files=files, floor=floor_bytes(opts.min_available, total),
                   total_memory=total, available_before=available)


def run(model_path: str, opts: Options, memory: Memory = system_memory) -> Outcome:
    """Plan, then (unless check mode, or already resident) read what is missing; residency is
    measured again at the end whatever happened."""
    outcome = plan(model_path, opts.validate(), memory)
    sums = outcome.sums()
    if sums["before"] >= sums["bytes"] or pct(sums["before"], sums["bytes"]) >= opts.resident_threshold:
        outcome.skipped_reason = "resident"
    elif outcome.available_before - outcome.floor <= 0:
        outcome.stopped = "memory_floor"
    elif not opts.check_mode:
        _read_all(outcome, opts, memory)
    for res in outcome.files:
        res.resident_after = measure(res.entry, outcome.selection.tree)
    outcome.available_after = memory()[0]
    return outcome


def _read_all(outcome: Outcome, opts: Options, memory: Memory) -> None:
    budget = Budget(memory, outcome.floor, time.monotonic() + opts.timeout)
    reader = Reader(outcome.selection.tree, opts.block_size, budget)
    todo = [f for f in outcome.files if f.resident_before < f.entry.size]
    for res in outcome.files:
        res.done = res.resident_before >= res.entry.size
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, min(opts.threads, len(todo))), thread_name_prefix="prewarm") as pool:
        futures = [pool.submit(reader.warm, res) for res in todo]
        errors = [f.exception() for f in futures if f.exception() is not None]
    outcome.read_seconds = time.monotonic() - started
    outcome.stopped = budget.stopped if budget.stopped != "error" else None
    if errors:
        raise errors[0]
    outcome.read_anything = any(f.read_bytes for f in outcome.files)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return "%.1f %s" % (n, unit) if unit != "B" else "%d B" % n
        n /= 1024.0
    return "%.2f TiB" % n


def report(outcome: Outcome, opts: Options, detail: bool = False) -> Dict[str, Any]:
    """The module result; SglangError memory_floor when the floor let nothing be read."""
    sums = outcome.sums()
    need = sums["bytes"] - sums["before"]
    room = max(0, outcome.available_before - outcome.floor)
    seconds = outcome.read_seconds
    complete = outcome.skipped_reason == "resident" or (not opts.check_mode and all(f.done for f in outcome.files))
    result: Dict[str, Any] = {
        "model_path": outcome.selection.model_path, "resolved_path": outcome.selection.resolved,
        "tree": outcome.selection.tree, "source": outcome.selection.source,
        "files": len(outcome.files), "bytes": sums["bytes"],
        "resident_before": sums["before"], "resident_before_pct": pct(sums["before"], sums["bytes"]),
        "resident_after": sums["after"], "resident_after_pct": pct(sums["after"], sums["bytes"]),
        "need_bytes": need, "read_bytes": sums["read"], "warmed_bytes": max(0, sums["after"] - sums["before"]),
        "would_read_bytes": 0 if outcome.skipped_reason else min(need, room),
        "seconds": round(seconds, 3),
        "gbps": round(sums["read"] / seconds / 1e9, 3) if seconds > 0 and sums["read"] else 0.0,
        "fits": need <= room, "complete": complete, "stopped": outcome.stopped,
        "threads": opts.threads, "block_size": opts.block_size,
        "memory": {"total": outcome.total_memory, "available_before": outcome.available_before,
                   "available_after": outcome.available_after, "floor": outcome.floor},
    }
    if detail:
        result["details"] = [f.to_dict() for f in outcome.files]
    where = "%d file%s of %s" % (len(outcome.files), "" if len(outcome.files) == 1 else "s",
                                 outcome.selection.model_path)
    floor_text = "MemAvailable %s, floor %s" % (human(outcome.available_before), human(outcome.floor))
    if outcome.stopped == "memory_floor" and not outcome.read_anything:
        raise SglangError("nothing read: the %s not in the page cache of %s do not fit above the memory "
                          "floor (%s)" % (human(need), where, floor_text), reason="memory_floor", **result)
    if outcome.skipped_reason == "resident":
        result.update(changed=False, msg="%s already in the page cache (%.1f%% of %s resident): nothing read"
                      % (where, result["resident_before_pct"], human(sums["bytes"])))
    elif opts.check_mode:
        result.update(changed=result["would_read_bytes"] > 0, msg="would read %s of %s (%s); %s" % (
            human(result["would_read_bytes"]), where, floor_text,
            "it fits above the floor" if result["fits"] else "only %s of the %s not resident fit above the floor"
            % (human(room), human(need))))
    else:
        result.update(changed=outcome.read_anything, msg="read %s of %s in %.1f s (%.2f GB/s): %.1f%% was "
                      "resident before, %.1f%% now%s" % (
                          human(sums["read"]), where, seconds, result["gbps"], result["resident_before_pct"],
                          result["resident_after_pct"], stop_text(outcome, floor_text, need, room)))
    return result


def diff(result: Dict[str, Any], check_mode: bool) -> Dict[str, str]:
    """Residency before and after (in check mode: what a run would reach)."""
    after = result["resident_after_pct"]
    if check_mode:
        after = min(100.0, pct(result["resident_before"] + result["would_read_bytes"], result["bytes"]))
    line = "page cache: %.1f%% of " + "%d bytes resident\n" % result["bytes"]
    return {"before": line % result["resident_before_pct"], "after": line % after}


def stop_text(outcome: Outcome, floor_text: str, need: int, room: int) -> str:
    if outcome.stopped == "memory_floor":
        fit = "only %s of the %s not resident fit above it" % (human(room), human(need)) if need > room else \
            "MemAvailable fell while reading"
        return "; stopped early at the memory floor (%s; %s)" % (floor_text, fit)
    if outcome.stopped == "timeout":
        return "; stopped early at the timeout (%.0f s)" % outcome.read_seconds
    return ""
