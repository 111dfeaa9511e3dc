"""The compile cache through the PLAYBOOK on a GPU host: `restart_extraction.yml` against the
SGLang emulator in GPU mode with `--enable-torch-compile` (CUDA graphs on, so the emulator
compiles its toy model with torch.compile in SGLang's mode, one compile per captured batch size,
during the graph-capture phase), for the 0.5.6 and the 0.5.23 emulation. Started by
tests/gpu/run.sh with GPUVAL_PLAYBOOK_COMPILE=1 (after its venvs are made); see
docs/benchmarks.md and docs/compile-cache.md.

Runs (the launch's default cache dir, ~/.cache/sglang of the user, emptied before R1 and R3):

  R0  first launch, no torch.compile (nothing to compare yet)
  R1  0.5.6 emulation, --enable-torch-compile (a changed configuration: a restart), cold cache
  R2  forced restart, same configuration: the cache from R1
  R3  0.5.23 emulation (a restart), cold cache again: the readiness check must name it cold
  R4  forced restart: the cache from R3

Figures per run, from the run's own task results (tests/gpu/callback_plugins/gpuval_log.py) and
from the new server's log: the graph-capture phase (TP0's `Capture ... begin` to `... end`, the
log's millisecond stamps), the emulator's compile line (seconds, FX graph cache hits/misses,
where inductor's cache was), downtime (start of the launch task that tears down to the end of
the ready task), sglang_ready's cold_start / cold_phases, and the launch record's compile_cache.
Results: $OUT/compile-playbook.json and compile-playbook.md; exit 1 when a run failed.

Environment: everything validate.py reads (run.sh sets it), plus CPB_MAX_BS (4: the captured and
compiled batch sizes 1, 2, 4), CPB_GPU (1), CPB_CACHE_DIR (the launch's cache_dir; default the
module's, ~/.cache/sglang of this user: emptied by this script, so give another one on a shared host).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("GPUVAL_BUDGET_S", "3000")
sys.path.insert(0, HERE)

import prewarm_playbook as PP  # noqa: E402
import validate as V  # noqa: E402

MAX_BS = int(os.environ.get("CPB_MAX_BS", "4"))
USE_GPU = os.environ.get("CPB_GPU", "1") == "1"
CACHE_DIR = os.environ.get("CPB_CACHE_DIR")  # the launch's cache_dir (sglang_cache_dir); default: the module's
RESULTS: Dict[str, Any] = {"runs": {}}
STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?: (TP\d+))?\] ([^\r\n]*)")
COMPILE = re.compile(r"TP0\] Emulator torch\.compile: mode=([\w-]+), device=(\S+), bs=\[([^\]]*)\], "
                     r"elapsed=([\d.]+) s, cache_dir=(\S+), fxgraph_cache_hit=(\d+), fxgraph_cache_miss=(\d+)")


def capture_phase(text: str) -> Dict[str, Any]:
    """TP0's graph-capture phase from the log's own stamps (both versions' wording)."""
    stamps: Dict[str, float] = {}
    for m in STAMP.finditer(text):
        if m.group(2) not in (None, "TP0"):
            continue
        when = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + float("0" + m.group(1)[19:])
        line = m.group(3)
        if re.search(r"Capture (cuda graph|.*CUDA graph) begin", line):
            stamps.setdefault("begin", when)
        elif re.search(r"Capture (cuda graph|.*CUDA graph) end", line):
            stamps.setdefault("end", when)
    out: Dict[str, Any] = {}
    if "begin" in stamps and "end" in stamps:
        out["capture_s"] = round(stamps["end"] - stamps["begin"], 3)
    m = COMPILE.search(text)
    if m:
        out["compile"] = {"mode": m.group(1), "device": m.group(2), "bs": m.group(3), "elapsed_s": float(m.group(4)),
                          "cache_dir": m.group(5), "fxgraph_cache_hit": int(m.group(6)),
                          "fxgraph_cache_miss": int(m.group(7))}
    return out


def figures(run: Dict[str, Any]) -> Dict[str, Any]:
    res = run["results"]
    out: Dict[str, Any] = {"rc": run["rc"], "playbook_s": run["seconds"], "stats": run["stats"]}
    ready, launch = PP.last(res, "sglang_ready"), PP.last(res, "sglang_launch")
    out.update(PP.downtime(res, ready))
    if ready:
        r = ready["result"]
        out.update(start_seconds=r.get("start_seconds"), cold_start=r.get("cold_start"),
                   cold_phases=r.get("cold_phases"))
    rec = ((launch or {}).get("result") or {}).get("record") or {}
    out["compile_cache"] = rec.get("compile_cache")
    log_path = ((launch or {}).get("result") or {}).get("log_path")
    if log_path:
        try:
            with open(log_path, errors="replace") as fh:
                out.update(capture_phase(fh.read()))
        except OSError as exc:
            out["log_error"] = str(exc)
    return out


def empty_cache() -> str:
    """The launch's cache dir (CPB_CACHE_DIR, else the default ~/.cache/sglang of this user)
    emptied: a cold start."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _compile_cache
    path = CACHE_DIR or _compile_cache.default_dir()
    if os.path.isdir(path):
        for name in os.listdir(path):
            full = os.path.join(path, name)
            shutil.rmtree(full) if os.path.isdir(full) and not os.path.islink(full) else os.unlink(full)
    return path


def run(label: str, overrides: Dict[str, Any]) -> Dict[str, Any]:
    r = V.playbook(label, "restart_extraction.yml", overrides, timeout=900)
    fig = figures(r)
    RESULTS["runs"][label] = fig
    V.log("%s: %s" % (label, json.dumps({k: v for k, v in fig.items() if k != "stats"})))
    write_out()
    return fig


def summary() -> Dict[str, Any]:
    runs = RESULTS["runs"]
    s: Dict[str, Any] = {}
    for version, cold, warm in (("0.5.6", "R1", "R2"), ("0.5.23", "R3", "R4")):
        c = next((v for k, v in runs.items() if k.startswith(cold)), {})
        w = next((v for k, v in runs.items() if k.startswith(warm)), {})
        row: Dict[str, Any] = {}
        for key in ("capture_s", "downtime_s", "start_seconds"):
            a, b = c.get(key), w.get(key)
            row[key] = {"cold": a, "warm": b, "ratio": round(a / b, 2) if a and b else None}
        row["capture_5x_met"] = bool(row["capture_s"]["ratio"] and row["capture_s"]["ratio"] >= 5.0)
        row["cold_named"] = bool(c.get("cold_start"))
        s[version] = row
    RESULTS["summary"] = s
    return s


def markdown() -> str:
    lines = ["# restart_extraction.yml with --enable-torch-compile: cold vs warm compile cache (GPU)", "",
             "Machine: %s" % RESULTS.get("machine"), "",
             "| run | emulated | rc | capture phase | torch.compile | FX cache hit/miss | inductor cache | downtime "
             "| teardown | launch -> ready | cold_start |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, r in RESULTS["runs"].items():
        c = r.get("compile") or {}
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, r.get("emulated"), r.get("rc"), r.get("capture_s", "-"), c.get("elapsed_s", "-"),
            "%s/%s" % (c.get("fxgraph_cache_hit", "-"), c.get("fxgraph_cache_miss", "-")), c.get("cache_dir", "-"),
            r.get("downtime_s", "-"), r.get("teardown_s", "-"), r.get("start_seconds", "-"), r.get("cold_start")))
    for version, row in (RESULTS.get("summary") or {}).items():
        lines.append("")
        lines.append("%s: capture phase %s s cold -> %s s warm (**%sx**), downtime %s s -> %s s (%sx); cold named: %s"
                     % (version, row["capture_s"]["cold"], row["capture_s"]["warm"], row["capture_s"]["ratio"],
                        row["downtime_s"]["cold"], row["downtime_s"]["warm"], row["downtime_s"]["ratio"],
                        row["cold_named"]))
    return "\n".join(lines) + "\n"


def write_out() -> None:
    os.makedirs(V.OUT, exist_ok=True)
    with open(os.path.join(V.OUT, "compile-playbook.json"), "w") as fh:
        json.dump(RESULTS, fh, indent=1, default=str)
    with open(os.path.join(V.OUT, "compile-playbook.md"), "w") as fh:
        fh.write(markdown())


def main() -> int:
    for d in (V.WORK, V.STATE, V.LOGS, V.ALOGS, V.OUT, os.path.join(V.WORK, "ansible-tmp")):
        os.makedirs(d, exist_ok=True)
    RESULTS["machine"] = V.machine_info()
    env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "no_proxy": "127.0.0.1,localhost"}
    env.update(V.KNOBS)
    if USE_GPU:
        env["SGLANG_EMULATOR_GPU_MIB"] = "1024"
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    V.VARS.update({
        "sglang_name": V.NAME, "sglang_port": V.PORT, "sglang_state_dir": V.STATE, "sglang_log_dir": V.LOGS,
        "sglang_venv": V.EMU, "sglang_tp_size": 1,
        "sglang_extraction_dump_dir": V.DUMP, "sglang_gpu_backend": "nvml" if USE_GPU else "none",
        "sglang_managed_gpus": [0] if USE_GPU else [], "sglang_startup_timeout": 600,
        "sglang_grace_period": 5, "sglang_stop_timeout": 60, "sglang_env": env,
    })
    if CACHE_DIR:
        V.VARS["sglang_cache_dir"] = CACHE_DIR
    compiled = {"disable-cuda-graph": False, "enable-torch-compile": True, "torch-compile-max-bs": MAX_BS,
                "cuda-graph-max-bs-decode": MAX_BS}
    v23 = dict(env, SGLANG_EMULATOR_LOG_VERSION="0.5.23")
    RESULTS["vars"] = V.VARS
    failed = 0
    try:
        steps = [("R0-first", {}, "0.5.6", False),
                 ("R1-0.5.6-cold", {"sglang_extraction_args": compiled}, "0.5.6", True),
                 ("R2-0.5.6-warm", {"sglang_extraction_args": compiled, "sglang_force": True}, "0.5.6", False),
                 ("R3-0.5.23-cold", {"sglang_extraction_args": compiled, "sglang_env": v23}, "0.5.23", True),
                 ("R4-0.5.23-warm", {"sglang_extraction_args": compiled, "sglang_env": v23, "sglang_force": True},
                  "0.5.23", False)]
        for label, overrides, emulated, cold in steps:
            if cold:
                V.log("%s: emptied %s" % (label, empty_cache()))
            fig = run(label, overrides)
            fig["emulated"] = emulated
            failed += fig["rc"] != 0
        V.log("summary: %s" % json.dumps(summary()))
        _run, probe = V.module("probe", "sglang_probe", {"state_dir": V.STATE, "gpu_backend": "none"})
        RESULTS["probe_compile_caches"] = probe.get("compile_caches")
    finally:
        V.playbook("teardown", "teardown.yml", timeout=120)
        write_out()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
