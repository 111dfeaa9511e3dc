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

  .venv/bin/python benchmarks/bench_progress.py [--quick] [--runs N]   (run_all: run(quick), report(data))
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
DEFAULT_SLICE_S = 10.0   # sglang_ready's default slice_seconds: the targets are judged on it
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


def run_rows(runs: int, budget: float, scenarios: List[str]) -> List[Dict[str, Any]]:
    rows = []
    for scenario in scenarios:
        for idx in range(runs):
            for seconds in MODES:  # interleaved: load on the machine hits every mode alike
                rows.append(one_run(scenario, seconds, idx, budget))
    return rows


def run(quick: bool = False, runs: Optional[int] = None, budget: float = 120.0,
        scenarios: Optional[List[str]] = None) -> Dict[str, Any]:
    """The run_all interface: every mode of every scenario, `runs` times (1 with quick)."""
    runs = runs if runs is not None else (1 if quick else 3)
    started = time.time()
    rows = run_rows(runs, budget, scenarios or SCENARIOS)
    return {"runs": runs, "budget": budget, "rows": rows, "seconds": round(time.time() - started, 1)}


def _sel(rows: List[Dict[str, Any]], scenario: str, seconds: float) -> List[Dict[str, Any]]:
    return [r for r in rows if r["scenario"] == scenario and r["mode"] == seconds]


def _latency(rows: List[Dict[str, Any]], scenario: str, seconds: float) -> Optional[float]:
    return C.median(r["latency"] for r in _sel(rows, scenario, seconds))


def table(rows: List[Dict[str, Any]]) -> str:
    out = []
    for scenario in SCENARIOS:
        for seconds in MODES:
            sel = _sel(rows, scenario, seconds)
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


def report(data: Dict[str, Any], fig_dir: str = "", fig_prefix: str = "") -> Dict[str, Any]:
    """Sliced vs one call side by side. The targets hold for the default slice length (10 s,
    what an operator gets); the 2 s row is the stress case - a slice gap (one module start) every
    2 s - and is reported in the same line, not hidden."""
    del fig_dir, fig_prefix  # a table says it all: no figure
    rows, runs = data["rows"], data["runs"]
    default = DEFAULT_SLICE_S
    ready = {m: _latency(rows, "good", m) for m in MODES}
    crash = {m: _latency(rows, "oom", m) for m in MODES}
    correct = sum(1 for r in rows if r["reason"] == ("ready" if r["scenario"] == "good" else "fatal_log"))

    def side(values: Dict[float, Optional[float]]) -> str:
        return ", ".join("%s: %s" % (_mode_label(m), C.fmt_s(values[m], 3)) for m in MODES)

    targets = [
        {"target": "With slicing (default 10 s slices), readiness reported within 0.5 s (median) of the ready line",
         "met": ready[default] is not None and ready[default] <= 0.5,
         "value": "median after the ready line - %s (%d runs each)" % (side(ready), runs)},
        {"target": "With slicing (default 10 s slices), a crash still reported in about 1 s (median at most 1.5 s)",
         "met": crash[default] is not None and crash[default] <= 1.5,
         "value": "median after the crash - %s (%d runs each)" % (side(crash), runs)},
        {"target": "Slicing never changes the verdict",
         "met": correct == len(rows), "value": "%d/%d runs correct" % (correct, len(rows))},
    ]
    md = ("sglang_ready through its action plugin (`ansible localhost -m llmops.sglang.sglang_ready -o`, "
          "progress lines on as an operator sees them, `settle: 0`), on a fresh emulator launch per run "
          "(tp 2, `SGLANG_LOG_MS=1`). Modes: one module call (`slice_seconds: 0`, the behaviour without "
          "slicing), slices of 10 s (the default) and of 2 s (many slices: the gap between two - one "
          "module start - is hit most often). Latency is the verdict's time (the launch time plus the "
          "result's `since_launch`, taken in the module) minus the ready line's own log timestamp, or "
          "minus the moment a 10 ms watcher saw the fatal line or the exit. The ansible CLI's start and "
          "end are shown apart (the same for every mode). Median of %d runs per row, modes interleaved. "
          "A verdict that falls between two slices waits for the next module start (seconds on a "
          "loaded machine): with 2 s slices that is a large share of the time, with the default 10 s "
          "a small one."
          "\n\n%s\n" % (runs, table(rows)))
    return {"title": "Live progress: what slicing the readiness wait costs", "markdown": md, "targets": targets}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="1 run per mode")
    parser.add_argument("--runs", type=int, default=None, help="runs per mode (default 3, 1 with --quick)")
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="only these (repeatable)")
    opts = parser.parse_args(argv)
    try:
        data = run(quick=opts.quick, runs=opts.runs, budget=opts.budget, scenarios=opts.scenario)
    finally:
        C.cleanup_all()
        C.rmtree(C.BENCH_ROOT)
    data["_meta"] = dict(C.machine(), quick=opts.quick)
    C.save_json("bench_progress" + ("-quick" if opts.quick else ""), data)
    rep = report(data)
    print("\n## %s\n\n%s" % (rep["title"], rep["markdown"]))
    for target in rep["targets"]:
        print("- %s: %s (%s)" % (target["target"], "met" if target["met"] else "NOT met", target["value"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
