"""What slicing costs: sglang_ready's verdict latency through the action plugin, one call vs slices.

Each run is a fresh emulator launch (tp 2, `SGLANG_LOG_MS=1`) watched by
`ansible localhost -m llmops.sglang.sglang_ready -o` (the action plugin, progress lines on, as an
operator sees them) with `settle: 0`, so the verdict comes at the moment the proofs hold: the
settle window (default 2 s) is a deliberate extra and not slicing's cost.

Modes: `slice_seconds: 0` (one module call: the behaviour without slicing), `10` (the default),
`2` (many slices: the gap between two slices - one AnsiballZ module start - is hit most often).
Scenarios:
  good   a start of ~12-16 s (SGLANG_EMULATOR_PHASE_SECONDS, a shard bar): several 2 s slices,
         one or two 10 s slices. Latency = the verdict's time (launched_at + the result's
         since_launch, taken in the module) minus the ready line's own log timestamp.
  oom    the memory pool raises `Not enough memory` ~12 s after the launch (after a few slices:
         a crash can land in the gap between two). Latency = the verdict's time minus the
         moment a 10 ms watcher saw the fatal line or the exit.
The ansible CLI's own start and end are reported apart (`wall`), as they are the same for
every mode.

  .venv/bin/python benchmarks/bench_progress.py [--quick] [--runs N]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any, Dict, List, Optional

import common as C

MODES = [0.0, 10.0, 2.0]
SCENARIOS = ["good", "oom"]
GOOD_ENV = {"SGLANG_EMULATOR_SHARDS": "8"}
GOOD_PHASE = 2.0
OOM_PHASE = 2.6  # the memory pool raises ~12 s after the launch: after a few 2 s slices
FATAL = ["Not enough memory", "Scheduler hit an exception"]
_RESULT = re.compile(r"^localhost \| (?:SUCCESS|FAILED!?) => (\{.*\})\s*$", re.M)


def _mode_label(seconds: float) -> str:
    return "one call (slice_seconds: 0)" if not seconds else "slices of %g s" % seconds


def one_run(scenario: str, seconds: float, idx: int, budget: float) -> Dict[str, Any]:
    name = "pg-%s-%d-%d" % (scenario, int(seconds), idx)
    state_dir = C.mkdir("progress", name, "state")
    log_path = C.path("progress", name, "sglang.log")
    port = C.free_port()
    fault = "oom" if scenario == "oom" else ""
    phase = OOM_PHASE if scenario == "oom" else GOOD_PHASE
    proc, record = C.start_emulator(state_dir, log_path, name, port, fault=fault, phase=phase,
                                    extra_env=GOOD_ENV if scenario == "good" else None)
    watcher = C.Watcher(proc, log_path, record["log_offset"], [C.READY_LINE] + FATAL)
    watcher.start()
    args = {"name": name, "state_dir": state_dir, "settle": 0, "timeout": budget, "slice_seconds": seconds}
    try:
        rc, wall, text = C.run_timed(C.ansible_adhoc_argv("llmops.sglang.sglang_ready", args) + ["-o"],
                                     timeout=budget + 120)
    finally:
        watcher.stop.set()
        C.kill_group(proc)
    found = _RESULT.findall(text)
    result = json.loads(found[-1]) if found else {}
    verdict_at = record["launched_at"] + result["since_launch"] if "since_launch" in result else None
    row: Dict[str, Any] = {"scenario": scenario, "mode": seconds, "idx": idx, "rc": rc, "wall": wall,
                           "reason": result.get("reason"), "ready": result.get("ready"),
                           "progress_lines": len(re.findall(r"^localhost %s: " % re.escape(name), text, re.M)),
                           "log_bytes_read": result.get("log_bytes_read")}
    if scenario == "good":
        ready_ts = C.first_line_time(log_path, C.READY_LINE, record["log_offset"])
        row["event_after_launch"] = None if ready_ts is None else ready_ts - record["launched_at"]
        row["latency"] = None if ready_ts is None or verdict_at is None else verdict_at - ready_ts
    else:
        seen = [t for n, t in watcher.seen.items() if n in FATAL]
        if watcher.exited_at is not None:
            seen.append(watcher.exited_at)
        crash = min(seen) if seen else None
        row["event_after_launch"] = None if crash is None else crash - record["launched_at"]
        row["latency"] = None if crash is None or verdict_at is None else verdict_at - crash
    C.log("progress %s %s #%d: %s (%s) latency %s, %d progress lines, wall %s" % (
        scenario, _mode_label(seconds), idx, row["reason"], rc, C.fmt_s(row["latency"], 3),
        row["progress_lines"], C.fmt_s(wall)))
    return row


def run(runs: int, budget: float, scenarios: List[str]) -> List[Dict[str, Any]]:
    rows = []
    for scenario in scenarios:
        for idx in range(runs):
            for seconds in MODES:  # interleaved: load on the machine hits every mode alike
                rows.append(one_run(scenario, seconds, idx, budget))
    return rows


def table(rows: List[Dict[str, Any]]) -> str:
    out = []
    for scenario in SCENARIOS:
        for seconds in MODES:
            sel = [r for r in rows if r["scenario"] == scenario and r["mode"] == seconds]
            if not sel:
                continue
            lat = [r["latency"] for r in sel if r["latency"] is not None]
            expected = "ready" if scenario == "good" else "fatal_log"
            out.append([
                "good start (ready line at %s)" % C.fmt_s(C.median(r["event_after_launch"] for r in sel), 1)
                if scenario == "good" else "crash while loading (oom at %s)" % C.fmt_s(
                    C.median(r["event_after_launch"] for r in sel), 1),
                _mode_label(seconds), C.fmt_s(C.median(lat), 3),
                C.fmt_s(max(lat), 3) if lat else "-",
                "%.0f" % (C.median(r["progress_lines"] for r in sel) or 0),
                C.fmt_s(C.median(r["wall"] for r in sel), 1),
                "%d/%d" % (sum(1 for r in sel if r["reason"] == expected), len(sel)),
            ])
    return C.md_table(["scenario", "mode", "verdict latency (median)", "worst", "progress lines (median)",
                       "ansible CLI wall time (median)", "verdict correct"], out)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="2 runs per mode")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="only these (repeatable)")
    opts = parser.parse_args(argv)
    runs = 2 if opts.quick else opts.runs
    started = time.time()
    rows = run(runs, opts.budget, opts.scenario or SCENARIOS)
    md = table(rows)
    C.save_json("bench_progress", {"machine": C.machine(), "runs": runs, "rows": rows,
                                   "seconds": time.time() - started})
    print("\nLatency after the ready line (settle: 0) and after the crash, %d runs per row, %s:\n"
          % (runs, C.machine().get("cpu", "")))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
