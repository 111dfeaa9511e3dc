"""The prewarm through the PLAYBOOK on a GPU host: `restart_extraction.yml` against the SGLang
emulator in GPU mode loading a real checkpoint of safetensors shards into GPU memory, with and
without the restart role's prewarm step, in the same run. Started by tests/gpu/run.sh with
GPUVAL_PLAYBOOK_PREWARM=1 (after its venvs are made); see docs/gpu-containment-prewarm.md.

Runs, each with the page cache emptied first (root: /proc/sys/vm/drop_caches; PWP_EVICT=fadvise
evicts only the checkpoint's own files, for a CPU rehearsal on a shared machine):

  A   first run: nothing running, the server is launched (cold load)
  Bn  forced restart, sglang_restart_prewarm=false: teardown, then the new server loads cold
  Cn  forced restart, sglang_restart_prewarm=true: the prewarm reads the shards while the old
      server still serves, then teardown, then the new server loads from the page cache

Figures per run, from the run's own task results (tests/gpu/callback_plugins/gpuval_log.py) and
from the new server's log: downtime (start of the teardown task to the end of the ready task),
the load phase alone (TP0's `Load weight begin` to `Load weight end`, the log's millisecond
stamps), launch to ready, and the prewarm's own seconds, GB/s and share already resident.
Results: $OUT/prewarm-playbook.json and prewarm-playbook.md; exit 1 when a run failed.

Environment: everything validate.py reads (run.sh sets it), plus PWP_CKPT_GIB (20),
PWP_SHARD_MIB (1024), PWP_ROUNDS (2), PWP_EVICT (drop_caches | fadvise), PWP_GPU (1).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("CPW_EVICT", os.environ.get("PWP_EVICT", "drop_caches"))
os.environ.setdefault("CPW_WORK", os.path.join(os.environ.get("GPUVAL_WORK", "/tmp/llmops-gpuval"), "pwp"))
os.environ.setdefault("GPUVAL_BUDGET_S", "3000")
sys.path.insert(0, HERE)

import containment_prewarm as CP  # noqa: E402
import validate as V  # noqa: E402

CKPT_GIB = float(os.environ.get("PWP_CKPT_GIB", "20"))
SHARD_MIB = int(os.environ.get("PWP_SHARD_MIB", "1024"))
ROUNDS = int(os.environ.get("PWP_ROUNDS", "2"))
USE_GPU = os.environ.get("PWP_GPU", "1") == "1"
RESULTS: Dict[str, Any] = {"runs": {}}


def last(results: List[Dict[str, Any]], action: str) -> Optional[Dict[str, Any]]:
    """The last result of `action` that really ran (the plan's check-mode teardown comes first)."""
    hits = [d for d in results if str(d.get("action", "")).endswith(action) and d.get("status") == "ok"
            and not d.get("result", {}).get("skipped")]
    return hits[-1] if hits else None


def downtime(res: List[Dict[str, Any]], ready: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """downtime_s: from the start of the task that stops the old server - the replacement's
    launch call, which tears down and launches in one (validate.restart_teardown) - to the end
    of the ready task; teardown_s: the teardown's own phases (its `timings`), or the teardown
    task's length where it is a task of its own."""
    td = V.restart_teardown(res)
    task = td.get("_task") or {}
    out: Dict[str, Any] = {}
    if ready and task.get("task_start"):
        out["downtime_s"] = round(ready["time"] - task["task_start"], 3)
    if str(task.get("action", "")).endswith("sglang_launch"):
        out["teardown_s"] = round(sum(float(v) for v in (td.get("timings") or {}).values()), 3)
    elif task.get("task_start"):
        out["teardown_s"] = round(task["time"] - task["task_start"], 3)
    return out


def figures(run: Dict[str, Any]) -> Dict[str, Any]:
    res = run["results"]
    out: Dict[str, Any] = {"rc": run["rc"], "playbook_s": run["seconds"], "stats": run["stats"]}
    ready = last(res, "sglang_ready")
    launch, prewarm = last(res, "sglang_launch"), last(res, "sglang_prewarm")
    out.update(downtime(res, ready))
    if ready and ready.get("task_start"):
        out["ready_task_s"] = round(ready["time"] - ready["task_start"], 3)
    if prewarm:
        r = prewarm["result"]
        keys = ("changed", "bytes", "read_bytes", "files", "seconds", "gbps", "resident_before_pct",
                "resident_after_pct", "complete", "stopped")
        out["prewarm"] = {k: r.get(k) for k in keys}
        out["prewarm"]["task_s"] = round(prewarm["time"] - prewarm["task_start"], 3)
    log_path = (launch or {}).get("result", {}).get("log_path")
    if log_path:
        try:
            with open(log_path, errors="replace") as fh:
                out.update(CP.log_phases(fh.read()))
        except OSError as exc:
            out["log_error"] = str(exc)
    return out


def run(label: str, folder: str, prewarm: bool, force: bool) -> Dict[str, Any]:
    ev = CP.evict(folder)
    V.log("%s: evicted (%s), %.1f%% of the checkpoint resident" % (label, ev["how"], ev["resident_pct"]))
    r = V.playbook(label, "restart_extraction.yml",
                   {"sglang_restart_prewarm": prewarm, "sglang_restart_force": force}, timeout=900)
    fig = figures(r)
    fig.update(prewarm_on=prewarm, evicted=ev)
    RESULTS["runs"][label] = fig
    V.log("%s: %s" % (label, json.dumps({k: v for k, v in fig.items() if k != "stats"})))
    write_out()
    return fig


def _med(rows: List[Dict[str, Any]], key: str) -> Optional[float]:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return round(statistics.median(vals), 3) if vals else None


def summary() -> Dict[str, Any]:
    runs = RESULTS["runs"]
    cold = [v for k, v in runs.items() if k.startswith("B")]
    warm = [v for k, v in runs.items() if k.startswith("C")]
    s: Dict[str, Any] = {}
    for key in ("load_s", "downtime_s", "teardown_s", "ready_task_s"):
        b, c = _med(cold, key), _med(warm, key)
        s[key] = {"cold": b, "prewarmed": c, "ratio": round(b / c, 2) if b and c else None}
    pw = [v["prewarm"] for v in warm if v.get("prewarm")]
    s["prewarm_seconds"] = _med(pw, "seconds")
    s["prewarm_gbps"] = _med(pw, "gbps")
    s["load_target_3x_met"] = bool(s["load_s"]["ratio"] and s["load_s"]["ratio"] >= 3.0)
    RESULTS["summary"] = s
    return s


def markdown() -> str:
    lines = ["# restart_extraction.yml with and without the prewarm (GPU)", "",
             "Checkpoint: %s" % RESULTS.get("checkpoint"), "",
             "| run | prewarm | rc | downtime (teardown start -> ready) | load phase | teardown | ready task "
             "| prewarm s | prewarm GB/s | resident before prewarm |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, r in RESULTS["runs"].items():
        pw = r.get("prewarm") or {}
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, "on" if r.get("prewarm_on") else "off", r.get("rc"), r.get("downtime_s", "-"),
            r.get("load_s", "-"), r.get("teardown_s", "-"), r.get("ready_task_s", "-"),
            pw.get("seconds", "-"), pw.get("gbps", "-"), pw.get("resident_before_pct", "-")))
    s = RESULTS.get("summary")
    if s:
        lines += ["", "Medians, cold (B) vs prewarmed (C): load phase %(c)s s -> %(w)s s (**%(r)sx**); "
                  % {"c": s["load_s"]["cold"], "w": s["load_s"]["prewarmed"], "r": s["load_s"]["ratio"]}
                  + "downtime %s s -> %s s (%sx); prewarm %s s at %s GB/s."
                  % (s["downtime_s"]["cold"], s["downtime_s"]["prewarmed"], s["downtime_s"]["ratio"],
                     s["prewarm_seconds"], s["prewarm_gbps"])]
    return "\n".join(lines) + "\n"


def write_out() -> None:
    os.makedirs(V.OUT, exist_ok=True)
    with open(os.path.join(V.OUT, "prewarm-playbook.json"), "w") as fh:
        json.dump(RESULTS, fh, indent=1, default=str)
    with open(os.path.join(V.OUT, "prewarm-playbook.md"), "w") as fh:
        fh.write(markdown())


def main() -> int:
    for d in (V.WORK, V.STATE, V.LOGS, V.ALOGS, V.OUT, os.path.join(V.WORK, "ansible-tmp")):
        os.makedirs(d, exist_ok=True)
    RESULTS["machine"] = V.machine_info()
    folder = os.path.join(V.WORK, "ckpt")
    RESULTS["checkpoint"] = CP.write_checkpoint(folder, CKPT_GIB, SHARD_MIB)
    V.log("checkpoint %s" % RESULTS["checkpoint"])
    env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "SGLANG_EMULATOR_LOAD_WEIGHTS": "1",
           "no_proxy": "127.0.0.1,localhost"}
    env.update(V.KNOBS)
    if USE_GPU:
        env["SGLANG_EMULATOR_GPU_MIB"] = "1024"  # the weights themselves are what the GPU holds
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    V.VARS.update({
        "sglang_name": V.NAME, "sglang_port": V.PORT, "sglang_state_dir": V.STATE, "sglang_log_dir": V.LOGS,
        "sglang_venv": V.EMU, "sglang_tp_size": 1, "sglang_model_path": folder,
        "sglang_extraction_dump_dir": V.DUMP, "sglang_gpu_backend": "nvml" if USE_GPU else "none",
        "sglang_managed_gpus": [0] if USE_GPU else [], "sglang_startup_timeout": 600,
        "sglang_grace_period": 5, "sglang_stop_timeout": 60, "sglang_env": env,
    })
    RESULTS["vars"] = V.VARS
    failed = 0
    try:
        a = run("A-first", folder, prewarm=False, force=False)
        failed += a["rc"] != 0
        for i in range(1, ROUNDS + 1):
            failed += run("B%d-cold" % i, folder, prewarm=False, force=True)["rc"] != 0
            failed += run("C%d-prewarm" % i, folder, prewarm=True, force=True)["rc"] != 0
        V.log("summary: %s" % json.dumps(summary()))
    finally:
        V.playbook("teardown", "teardown.yml", timeout=120)
        CP.remove_checkpoint(folder)
        write_out()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
