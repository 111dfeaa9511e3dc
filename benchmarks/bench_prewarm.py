"""Page-cache prewarm: how long a loader takes to read a checkpoint cold vs after sglang_prewarm.

A checkpoint of safetensors-shaped shards (random bytes; default 8 x 64 MiB = 512 MiB, --quick
4 x 32 MiB) is written under tests/output/ (a real disk: DONTNEED must evict there; the run fails
loudly where it cannot). Each round evicts the shards (posix_fadvise DONTNEED on these files only,
never the machine's caches), then measures:

  cold load (read)   a loader reading every shard in order, 16 MiB read() calls, one thread
  cold load (mmap)   a loader touching every page of every shard through mmap (safetensors' way)
  prewarm Tn         sglang_prewarm's engine (in-process) with n threads, from cold
  prewarm (module)   the module run as ansible runs it (python start-up included), from cold
  warm load          both loaders again right after a prewarm
  prewarm resident   the module run again with everything resident (changed=false)

    .venv/bin/python benchmarks/bench_prewarm.py [--quick] [--shards 8] [--shard-mb 64] [--rounds 3]

prints the results as Markdown tables. benchmarks/run_all.py can run it too (run()/report()).
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

from helpers import pagecache as pc  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._prewarm import _prewarm  # noqa: E402

MIB = 1 << 20
READ_CHUNK = 16 * MIB


def load_read(paths: List[str]) -> float:
    """Seconds to read every shard in order with plain read() calls into one buffer."""
    buf = bytearray(READ_CHUNK)
    start = time.monotonic()
    for path in paths:
        with open(path, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
    return time.monotonic() - start


def load_mmap(paths: List[str]) -> float:
    """Seconds to touch one byte of every page of every shard through a read-only mapping."""
    start = time.monotonic()
    for path in paths:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            with mmap.mmap(fh.fileno(), size, prot=mmap.PROT_READ) as mm:
                view = memoryview(mm)
                sum(view[::mmap.PAGESIZE])  # one byte per page faults each page in
                view.release()
    return time.monotonic() - start


def timed(fn: Callable[[], Any]) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def prewarm_engine(model: str, threads: int) -> Dict[str, Any]:
    opts = _prewarm.Options(threads=threads)
    start = time.monotonic()
    result = _prewarm.report(_prewarm.run(model, opts), opts)
    result["wall"] = time.monotonic() - start
    return result


def prewarm_module(model: str) -> Dict[str, Any]:
    start = time.monotonic()
    result = C.run_module("sglang_prewarm", {"model_path": model})
    result["wall"] = time.monotonic() - start
    if result.get("failed"):
        raise RuntimeError("sglang_prewarm failed: %s" % result.get("msg"))
    return result


def run(quick: bool = False, shards: Optional[int] = None, shard_mb: Optional[int] = None,
        rounds: Optional[int] = None) -> Dict[str, Any]:
    shards = shards or (4 if quick else 8)
    shard_mb = shard_mb or (32 if quick else 64)
    rounds = rounds or (1 if quick else 3)
    scratch = pc.scratch_dir("bench-prewarm")
    model = os.path.join(scratch, "model")
    try:
        files = pc.write_checkpoint(model, shards=shards, shard_size=shard_mb * MIB)
        weights = [f for f in files if f.endswith(".safetensors")]
        size = sum(os.path.getsize(f) for f in weights)
        data: Dict[str, Any] = {"shards": shards, "shard_mb": shard_mb, "rounds": rounds, "bytes": size,
                                "fs": pc.fs_type(model), "samples": {}}

        def sample(name: str, value: float, **extra: Any) -> None:
            data["samples"].setdefault(name, []).append(dict(extra, seconds=value))

        for i in range(rounds):
            C.log("prewarm round %d/%d (%d MiB)" % (i + 1, rounds, size // MIB))
            pc.evict(files)
            sample("cold load (read)", load_read(weights))
            pc.evict(files)
            sample("cold load (mmap)", load_mmap(weights))
            for threads in (1, 4, 8):
                pc.evict(files)
                res = prewarm_engine(model, threads)
                sample("prewarm T%d" % threads, res["seconds"], gbps=res["gbps"], read=res["read_bytes"],
                       before=res["resident_before_pct"], after=res["resident_after_pct"])
            sample("warm load (read) after prewarm", load_read(weights))
            pc.evict(files)
            res = prewarm_module(model)
            sample("prewarm (module, T4)", res["wall"], inner=res["seconds"], gbps=res["gbps"],
                   after=res["resident_after_pct"])
            sample("warm load (mmap) after prewarm", load_mmap(weights))
            res = prewarm_module(model)
            sample("prewarm resident (module, changed=false)", res["wall"], changed=res["changed"])
        return data
    finally:
        pc.remove(scratch)


def _median(rows: List[Dict[str, Any]], key: str) -> Optional[float]:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def report(data: Dict[str, Any], fig_dir: str = "", fig_prefix: str = "") -> Dict[str, Any]:
    size, s = data["bytes"], data["samples"]
    gb = size / 1e9
    rows = []
    for name, samples in s.items():
        secs = _median(samples, "seconds")
        note = ""
        if name.startswith("prewarm T") or name.startswith("prewarm (module"):
            note = "engine %.2f GB/s, residency after %.1f%%" % (_median(samples, "gbps") or 0, _median(samples, "after") or 0)
            if "inner" in samples[0]:
                note = "reading %.3f s inside the module; " % _median(samples, "inner") + note
        elif "resident" in name:
            note = "changed=%s" % samples[0].get("changed")
        rate = "%.2f" % (gb / secs) if secs and not name.startswith("prewarm resident") else "-"
        rows.append([name, "%.3f" % secs if secs is not None else "-", rate, note])
    cold = {k: _median(s["cold load (%s)" % k], "seconds") for k in ("read", "mmap")}
    warm = {k: _median(s["warm load (%s) after prewarm" % k], "seconds") for k in ("read", "mmap")}
    speed = {k: (cold[k] / warm[k]) if cold[k] and warm[k] else None for k in cold}
    t4 = _median(s["prewarm T4"], "seconds")
    md = ["%d shards x %d MiB (%.2f GB) on %s, median of %d rounds; every cold number starts from shards "
          "evicted with posix_fadvise(DONTNEED) on those files only. GB/s = 10^9 bytes/s."
          % (data["shards"], data["shard_mb"], gb, data["fs"], data["rounds"]), "",
          C.md_table(["phase", "seconds", "GB/s", "notes"], rows), "",
          "Loading after a prewarm vs cold: read() %.1fx faster, mmap %.1fx faster. The prewarm itself (4 "
          "threads) took %.3f s against %.3f s for one cold read() load: it does not make the reading "
          "cheaper, it moves it before the teardown, while the old server still serves."
          % (speed["read"] or 0, speed["mmap"] or 0, t4 or 0, cold["read"] or 0)]
    targets = [{"target": "Loading the shards after a prewarm is faster than cold, with both loaders (CPU, page cache)",
                "met": bool(speed["read"] and speed["read"] > 1 and speed["mmap"] and speed["mmap"] > 1),
                "value": "read() %.1fx, mmap %.1fx faster (%.2f GB; ratios as measured, no GPU involved)"
                         % (speed["read"] or 0, speed["mmap"] or 0, gb)}]
    gpu_md, gpu_targets = gpu_playbook_section()
    return {"title": "Prewarm: weights into the page cache before the teardown",
            "markdown": "\n".join(md + gpu_md), "targets": targets + gpu_targets}


def _latest_gpu_playbook() -> Optional[str]:
    """The newest recorded GPU run of tests/gpu/prewarm_playbook.py (it needs a GPU host, so make
    bench reports the recorded figures rather than measuring them here)."""
    folder = os.path.join(C.ROOT, "tests", "gpu", "results")
    names = sorted(n for n in os.listdir(folder) if n.endswith("-prewarm-playbook.json")) if os.path.isdir(folder) else []
    return os.path.join(folder, names[-1]) if names else None


def gpu_playbook_section() -> Tuple[List[str], List[Dict[str, Any]]]:
    path = _latest_gpu_playbook()
    if not path:
        return [], []
    with open(path) as fh:
        rec = json.load(fh)
    runs, summ, ck = rec.get("runs", {}), rec.get("summary", {}), rec.get("checkpoint", {})
    rows = []
    for label, r in runs.items():
        pw = r.get("prewarm") or {}
        down = "- (first launch)" if label.startswith("A") else r.get("downtime_s", "-")
        rows.append([label, "on" if r.get("prewarm_on") else "off", down, r.get("load_s", "-"),
                     r.get("ready_task_s", "-"), pw.get("seconds", "-"), pw.get("gbps", "-")])
    load, down = summ.get("load_s", {}), summ.get("downtime_s", {})
    md = ["", "### On the GPU host: restart_extraction.yml with and without the prewarm", "",
          "*Recorded by `GPUVAL_PLAYBOOK_PREWARM=1 bash tests/gpu/run.sh` on one NVIDIA H200 "
          "(`%s`), not measured by `make bench`: the emulator in GPU mode loads a %.2f GB checkpoint "
          "(%d safetensors shards) into GPU memory; the page cache is dropped before every run. "
          "A is the first launch; B runs restart without the prewarm, C runs restart with it.*"
          % (os.path.relpath(path, C.ROOT), ck.get("gb", 0), ck.get("shards", 0)), "",
          C.md_table(["run", "prewarm", "downtime (teardown start to ready), s", "load phase, s",
                      "ready task, s", "prewarm, s", "prewarm GB/s"], rows), "",
          "Medians, B vs C: load phase %s s -> %s s (**%sx shorter**), downtime %s s -> %s s (%sx). The "
          "prewarm itself (%s s) ran before the teardown, while the old server still served." %
          (load.get("cold"), load.get("prewarmed"), load.get("ratio"), down.get("cold"), down.get("prewarmed"),
           down.get("ratio"), summ.get("prewarm_seconds"))]
    targets = [{"target": "GPU host, restart_extraction.yml: load phase at least 3x shorter with the prewarm",
                "met": bool(load.get("ratio") and load["ratio"] >= 3.0),
                "value": "%sx (%s s -> %s s); downtime %sx (%s s -> %s s), recorded"
                         % (load.get("ratio"), load.get("cold"), load.get("prewarmed"), down.get("ratio"),
                            down.get("cold"), down.get("prewarmed"))}]
    return md, targets


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shards", type=int)
    ap.add_argument("--shard-mb", type=int)
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    data = run(args.quick, args.shards, args.shard_mb, args.rounds)
    rep = report(data)
    print("## %s\n\n%s\n" % (rep["title"], rep["markdown"]))
    for t in rep["targets"]:
        print("- %s: %s (%s)" % (t["target"], "met" if t["met"] else "not met", t["value"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
