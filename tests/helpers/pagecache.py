"""Page-cache helpers for the prewarm tests and benchmark: checkpoints written by the test,
evicted with posix_fadvise(DONTNEED) on those files only (never the machine's caches), and
residency read with the library's own mincore.

Eviction needs a filesystem whose page cache honours DONTNEED (ext4, xfs, btrfs); overlayfs and
tmpfs do not. `evict` checks the result and fails loudly, naming the filesystem, instead of
letting a test pass on files that were never cold.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from typing import Dict, Iterator, List

from ansible_collections.llmops.sglang.plugins.module_utils._host import _residency

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A real disk here (the repo's ignored output dir); /tmp may be tmpfs on other machines.
SCRATCH = os.path.join(ROOT, "tests", "output")
MIB = 1 << 20


DAMON = "/sys/kernel/mm/damon/admin/kdamonds"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, ValueError):
        return ""


def proactive_reclaim_age() -> "float | None":
    """Seconds after which the kernel pages out cold memory on its own, page cache included
    (a running DAMON `pageout` scheme on physical memory: some VMs run one), else None. Where
    it runs, a file nobody read for that long leaves the cache without any memory pressure."""
    ages = []
    try:
        kdamonds = [k for k in os.listdir(DAMON) if k.isdigit()]
    except OSError:
        return None
    for k in kdamonds:
        if _read(os.path.join(DAMON, k, "state")) != "on":
            continue
        base = os.path.join(DAMON, k, "contexts")
        for ctx in (c for c in os.listdir(base) if c.isdigit()) if os.path.isdir(base) else ():
            aggr = _read(os.path.join(base, ctx, "monitoring_attrs", "intervals", "aggr_us"))
            schemes = os.path.join(base, ctx, "schemes")
            for sch in (x for x in os.listdir(schemes) if x.isdigit()) if os.path.isdir(schemes) else ():
                if _read(os.path.join(schemes, sch, "action")) != "pageout":
                    continue
                age = _read(os.path.join(schemes, sch, "access_pattern", "age", "min"))
                if aggr.isdigit() and age.isdigit():
                    ages.append(int(aggr) * int(age) / 1e6)
    return min(ages) if ages else None


def scratch_dir(prefix: str = "prewarm") -> str:
    path = os.path.join(SCRATCH, "%s-%s" % (prefix, uuid.uuid4().hex[:10]))
    os.makedirs(path)
    return path


def write_file(path: str, size: int, chunk: int = 8 * MIB) -> None:
    """`size` random bytes, flushed to disk (dirty pages cannot be evicted)."""
    seed = os.urandom(chunk)
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            n = min(chunk, left)
            fh.write(seed[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())


def write_checkpoint(directory: str, shards: int = 3, shard_size: int = 16 * MIB, index: bool = True) -> List[str]:
    """A small safetensors-shaped checkpoint: shards, their index, config and tokenizer files.
    Returns every file path written."""
    os.makedirs(directory, exist_ok=True)
    names = ["model-%05d-of-%05d.safetensors" % (i + 1, shards) for i in range(shards)]
    for name in names:
        write_file(os.path.join(directory, name), shard_size)
    extra: Dict[str, object] = {"config.json": {"architectures": ["LlamaForCausalLM"]},
                                "tokenizer_config.json": {"model_max_length": 4096}}
    if index:
        extra["model.safetensors.index.json"] = {
            "metadata": {"total_size": shards * shard_size},
            "weight_map": {"layer.%d.weight" % i: names[i % shards] for i in range(shards * 2)}}
    for name, data in extra.items():
        with open(os.path.join(directory, name), "w") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
    return [os.path.join(directory, n) for n in names + sorted(extra)]


def resident(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return _residency.resident_bytes(fd, os.fstat(fd).st_size, path=path)
    finally:
        os.close(fd)


def evict(paths: List[str]) -> None:
    """Drop these files (only these) from the page cache, and prove it worked."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    left = {p: n for p, n in ((p, resident(p)) for p in paths) if n}
    if left:
        raise AssertionError("posix_fadvise(DONTNEED) did not evict %s (filesystem %s): this test needs a "
                             "filesystem whose page cache can be evicted per file (ext4, xfs), not "
                             "overlayfs or tmpfs" % (left, fs_type(next(iter(left)))))


def fs_type(path: str) -> str:
    """The filesystem type of the mount holding `path` (from /proc/self/mountinfo)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, right = line.split(" - ", 1)
            mount = left.split()[4]
            if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                best, kind = mount, right.split()[0]
    return kind


def total_resident(paths: List[str]) -> int:
    return sum(resident(p) for p in paths)


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def tree_files(directory: str) -> Iterator[str]:
    for root, _dirs, files in os.walk(directory):
        for name in files:
            yield os.path.join(root, name)
