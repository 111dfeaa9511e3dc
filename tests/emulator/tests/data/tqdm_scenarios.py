"""Clocked progress-bar scenarios, as SGLang drives tqdm while it starts, printed as JSON.

`python tqdm_scenarios.py real` runs them through tqdm itself (tqdm_4.70.1.json was recorded
that way, with tqdm 4.70.1); `python tqdm_scenarios.py emulator` through the emulator's copy
(sglang.srt.utils.progress_bar). The output stream is UTF-8 and not a terminal, like a log file.
"""

import io
import json
import sys

BAR_FORMAT = "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def bar_factory(impl: str, clock: Clock):
    if impl == "real":
        from tqdm import std

        std.time = clock  # tqdm binds `time` at construction
        return std.tqdm
    from sglang.srt.utils.progress_bar import tqdm

    return lambda *a, **k: tqdm(*a, clock=clock, **k)


def stream() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def text(fh: io.TextIOWrapper) -> str:
    return fh.buffer.getvalue().decode()


def main(impl: str) -> None:
    clock = Clock()
    make = bar_factory(impl, clock)
    out = {}
    # Single-threaded safetensors iterator, uneven shard times (some updates rate-limited away).
    fh = stream()
    steps = [0.37, 0.37, 0.05, 0.02, 1.9, 0.3, 12.0, 0.01, 0.01, 0.5]
    for i in make(list(range(len(steps))), desc="Loading safetensors checkpoint shards",
                  disable=False, bar_format=BAR_FORMAT, position=0, file=fh):
        clock.t += steps[i]
    out["shards_uneven"] = text(fh)
    # Fast shards: dynamic miniters skips counts.
    fh = stream()
    for step in make(list(range(40)), desc="Loading safetensors checkpoint shards", disable=False,
                     bar_format=BAR_FORMAT, position=0, file=fh):
        clock.t += 0.03
    out["shards_fast"] = text(fh)
    # CUDA graph capture: default bar format, set_description per batch size.
    fh = stream()
    capture_range = make(list(reversed([1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512])),
                         file=fh)
    avail_mem = 20.5
    for bs in capture_range:
        capture_range.set_description(f"Capturing batches ({bs=} {avail_mem=:.2f} GB)")
        clock.t += 0.13 if bs > 40 else 0.04
        avail_mem -= 0.03
    out["capture"] = text(fh)
    # 0.5.23's buffered multi-thread loader: manual update(1), closed by the context manager.
    fh = stream()
    with make(total=7, desc="Multi-thread loading shards", disable=False, bar_format=BAR_FORMAT,
              position=0, file=fh) as pbar:
        for step in range(7):
            clock.t += 2.5
            pbar.update(1)
    out["multithread"] = text(fh)
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
