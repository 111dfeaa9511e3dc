"""Where a weight load's time goes on a GPU host: the parts of the emulator's GPU load path
(safetensors safe_open + get_tensor, then .to("cuda"), as SGLang's default loader does), each
timed alone over the same shards, cold (page cache dropped: root) and warm. Explains how much a
prewarm can save: it removes the disk from the load, not the copies.

    python3 tests/gpu/load_path.py DIR [GIB] [SHARD_MIB]      (writes DIR, removes it at the end)

Prints one JSON object per step and writes $OUT/load-path.json.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))


def _checkpoint_writer() -> Callable[[str, float, int], Dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("cpw", os.path.join(HERE, "containment_prewarm.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.write_checkpoint


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def shards(folder: str) -> List[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors"))


def read_all(files: List[str]) -> int:
    buf = bytearray(16 << 20)
    view, total = memoryview(buf), 0
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while True:
                got = fh.readinto(view)
                if not got:
                    break
                total += got
    return total


def get_tensors(files: List[str], to_gpu: bool) -> int:
    import torch
    from safetensors import safe_open
    held, total = [], 0
    for path in files:
        with safe_open(path, framework="pt", device="cpu") as fh:
            for name in fh.keys():
                t = fh.get_tensor(name)
                total += t.numel() * t.element_size()
                if to_gpu:
                    held.append(t.to("cuda:0"))
    torch.cuda.synchronize()
    del held
    torch.cuda.empty_cache()
    return total


def h2d(nbytes: int, pinned: bool) -> int:
    import torch
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, pin_memory=pinned)
    src.fill_(1)
    dst = torch.empty_like(src, device="cuda:0")
    dst.copy_(src)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    for _copy in range(4):
        dst.copy_(src)
    torch.cuda.synchronize()
    h2d.seconds = time.monotonic() - t0  # type: ignore[attr-defined]
    return 4 * nbytes


def main() -> int:
    folder = sys.argv[1]
    gib = float(sys.argv[2]) if len(sys.argv) > 2 else 8
    shard_mib = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    out_dir = os.environ.get("OUT") or "."
    results: Dict[str, Any] = {"checkpoint": _checkpoint_writer()(folder, gib, shard_mib)}
    print(json.dumps(results["checkpoint"]), flush=True)
    files = shards(folder)
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda:0")  # CUDA context outside the timings

    def step(name: str, cold: bool, fn: Callable[[], int]) -> None:
        if cold:
            drop_caches()
        t0 = time.monotonic()
        nbytes = fn()
        secs = getattr(h2d, "seconds", None) if name.startswith("h2d") else time.monotonic() - t0
        row = {"step": name, "cold": cold, "bytes": nbytes, "seconds": round(secs, 3),
               "gbps": round(nbytes / secs / 1e9, 2)}
        results.setdefault("steps", []).append(row)
        print(json.dumps(row), flush=True)

    try:
        step("read() 16 MiB blocks, one thread", True, lambda: read_all(files))
        step("read() 16 MiB blocks, one thread", False, lambda: read_all(files))
        step("safe_open + get_tensor (a view of the mmap, no page touched)", False, lambda: get_tensors(files, False))
        step("safe_open + get_tensor + .to(cuda)", False, lambda: get_tensors(files, True))
        step("safe_open + get_tensor + .to(cuda)", True, lambda: get_tensors(files, True))
        step("safe_open + get_tensor + .to(cuda) again", False, lambda: get_tensors(files, True))
        step("h2d pageable 1 GiB x4", False, lambda: h2d(1 << 30, False))
        step("h2d pinned 1 GiB x4", False, lambda: h2d(1 << 30, True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with open(os.path.join(out_dir, "load-path.json"), "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
