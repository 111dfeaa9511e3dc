"""Restart: playbooks/restart_extraction.yml end to end vs the emulator's own start-up time,
the code of this checkout (NEW) next to the code of a baseline commit (OLD) in the same run.

OLD is `git worktree add` of BASELINE into a temporary directory with its own collection path
(<worktree>/collections/ansible_collections/llmops/sglang -> the worktree) and its own
ansible.cfg; NEW is this checkout. Both run against one inventory written for the run (the
emulator settings of inventory/local.yml: tp 8, SGLANG_EMULATOR_PHASE_SECONDS 0.3, extraction
flags, NCCL_* variables), each with its own instance name, port, state/log dirs and dump dir,
so they never touch each other's server.

Runs, interleaved so that the machine's load falls on both alike: fresh (nothing running ->
launch) for each, then per round a no-op run (same inputs: changed=0, nothing restarted) and a
real restart (mem-fraction-static 0.85 <-> 0.88: plan, teardown, launch, ready, dump proof),
the order OLD/NEW swapped every round. LEAN is NEW without what it added after OLD and OLD does
not do - the prewarm (sglang_restart_prewarm=false), the 2 s settle window (sglang_settle=0) and
the last check's 5 s hold past the ready line (sglang_hold=0) - so that NEW/OLD and LEAN/OLD
show the cost of the additions and of the code apart. The
emulator's own start-up is the same server command
line started directly, from exec to the ready line. Overhead = restart - start-up. The figures
to compare are the NEW/OLD ratios of the same run: the absolute seconds move with the load.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import common as C

BASELINE = "e16032a"    # the restart role before it reused the thin roles (30 tasks)
EXTRACTION_ARGS = ["--disable-cuda-graph", "--disable-radix-cache", "--disable-custom-all-reduce",
                   "--mem-fraction-static", "0.88"]
# The figures on the benchmark machine (before: 6.3 s overhead, 5.2 s no-op) and
# targets; applied here as ratios of the same run (target / before).
TARGET_OVERHEAD_RATIO = 3.5 / 6.3
TARGET_NOOP_RATIO = 3.0 / 5.2
# The restart overhead ratio measured before the third security review (its code must not add to it)
TARGET_LEAN_RATIO = 0.51
# NEW without what it added after OLD (OLD does neither): the prewarm and the settle window
LEAN_VARS = {"sglang_restart_prewarm": False, "sglang_settle": 0, "sglang_hold": 0}


def recap(text: str, host: str = "localhost") -> Dict[str, int]:
    m = None
    for m in re.finditer(r"^%s\s*:\s*(.*)$" % re.escape(host), text, re.M):
        pass
    if not m:
        return {}
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def task_count(text: str) -> int:
    return len(re.findall(r"^TASK \[", text, re.M))


def emulator_startup(runs: int) -> List[float]:
    out = []
    for i in range(runs):
        port = C.free_port()
        logp = C.path("restart", "direct-%d.log" % i)
        env = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "SGLANG_HS_DUMP_DIR": os.path.join(C.SHM_ROOT, "direct-hs")}
        proc, rec = C.start_emulator(C.mkdir("restart", "direct-state"), logp, "direct", port, tp_size=8,
                                     phase=0.3, args=EXTRACTION_ARGS, extra_env=env, write_record=False)
        ok = C.wait_log(logp, C.READY_LINE, 60, proc=proc)
        t = time.time() - rec["launched_at"]
        C.kill_group(proc)
        C.wait_port_free(port, 5)
        if ok:
            out.append(t)
        C.log("restart: emulator start-up #%d %.2f s" % (i, t))
    return out


# -- the two checkouts -----------------------------------------------------------------------
class Checkout:
    """One version of the collection: its root, ansible.cfg and collection path."""

    def __init__(self, label: str, root: str, tmp: Optional[str] = None) -> None:
        self.label, self.root, self.tmp = label, root, tmp

    def env(self) -> Dict[str, str]:
        env = C.ansible_env()
        env["ANSIBLE_CONFIG"] = os.path.join(self.root, "ansible.cfg")
        env["ANSIBLE_COLLECTIONS_PATH"] = os.path.join(self.root, "collections")
        return env

    def playbook(self, pb: str, inventory: str, extra: Dict[str, Any]) -> Dict[str, Any]:
        ev = C.path("restart", "ev-%s-%s.json" % (self.label, time.time()))
        with open(ev, "w") as fh:
            json.dump(extra, fh)
        argv = [C.ANSIBLE_PLAYBOOK, "-i", inventory, os.path.join(self.root, "playbooks", pb), "-e", "@" + ev]
        rc, wall, out = C.run_timed(argv, timeout=600, env=self.env(), cwd=self.root)
        with open(C.path("restart", "out-%s-%s-%d.log" % (self.label, pb, int(time.time() * 1000))), "w") as fh:
            fh.write(out)
        return {"rc": rc, "wall": wall, "recap": recap(out), "tasks": task_count(out),
                "tail": out[-1500:] if rc else ""}


def old_checkout(commit: str) -> Checkout:
    """`git worktree add` of `commit` in a temporary directory, with its own collection link."""
    tmp = tempfile.mkdtemp(prefix="llmops-bench-old-")
    root = os.path.join(tmp, "sglang")
    subprocess.run(["git", "-C", C.ROOT, "worktree", "add", "--detach", root, commit],
                   check=True, capture_output=True, text=True)
    link_dir = os.path.join(root, "collections", "ansible_collections", "llmops")
    os.makedirs(link_dir, exist_ok=True)
    if not os.path.lexists(os.path.join(link_dir, "sglang")):  # some commits track the link
        os.symlink("../../..", os.path.join(link_dir, "sglang"))
    return Checkout("old", root, tmp)


def remove_checkout(co: Checkout) -> None:
    subprocess.run(["git", "-C", C.ROOT, "worktree", "remove", "--force", co.root],
                   capture_output=True, text=True, check=False)
    if co.tmp:
        shutil.rmtree(co.tmp, ignore_errors=True)


def write_inventory(path: str) -> str:
    """The emulator settings of inventory/local.yml, the same for OLD and NEW (both names of the
    grace period: the old code reads sglang_stop_grace_period), without the emulator's benign
    start-up warnings, which the baseline's readiness took for a crash."""
    hv = {
        "ansible_connection": "local", "ansible_python_interpreter": C.CTL_PY,
        "sglang_venv": C.EMU_VENV, "sglang_model_path": os.path.join(C.ROOT, "inventory", "files", "demo-model"),
        "sglang_host": "127.0.0.1", "sglang_tp_size": 8, "sglang_keep_logs": 5, "sglang_startup_timeout": 120,
        "sglang_grace_period": 5, "sglang_stop_grace_period": 5, "sglang_stop_timeout": 30,
        "sglang_gpu_backend": "none", "sglang_managed_gpus": [], "sglang_foreign_gpu_processes": "fail",
        "sglang_sweep_sglang_processes": False,
        # no benign start-up warnings: the baseline's readiness took their fatal-looking words for a crash
        "sglang_env": {"SGLANG_EMULATOR_PHASE_SECONDS": "0.3", "SGLANG_EMULATOR_BENIGN_WARNINGS": "0",
                       "no_proxy": "127.0.0.1,localhost"},
        "sglang_nccl_env": {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "NVL",
                            "NCCL_MAX_NCHANNELS": "16", "NCCL_BUFFSIZE": "8388608"},
        "sglang_extraction_min_free_gib": 1,
    }
    with open(path, "w") as fh:
        json.dump({"all": {"children": {"gpu_8x": {"hosts": {"localhost": hv}}}}}, fh, indent=1)
    return path


def instance(label: str) -> Dict[str, Any]:
    return {"sglang_name": "bench-restart-%s-%s" % (label, C.TOKEN[-6:]), "sglang_port": C.free_port(),
            "sglang_state_dir": C.mkdir("restart", label, "state"), "sglang_log_dir": C.mkdir("restart", label, "logs"),
            "sglang_extraction_dump_dir": os.path.join(C.SHM_ROOT, "restart-hs-%s" % label)}


def run(quick: bool = False) -> Dict[str, Any]:
    rounds = 2 if quick else 6  # six interleaved rounds: OLD alone varies by half between runs
    os.makedirs(C.SHM_ROOT, exist_ok=True)  # the dump dirs' parent (the roles run df on it)
    inventory = write_inventory(C.path("restart", "inventory.json"))
    old = old_checkout(BASELINE)
    try:
        return _runs(quick, rounds, inventory, old)
    finally:
        remove_checkout(old)


def _runs(quick: bool, rounds: int, inventory: str, old: Checkout) -> Dict[str, Any]:
    startup = emulator_startup(1 if quick else 3)
    codes = {"old": old, "new": Checkout("new", C.ROOT), "lean": Checkout("lean", C.ROOT)}
    extra = {label: instance(label) for label in codes}
    extra["lean"].update(LEAN_VARS)
    runs_out: List[Dict[str, Any]] = []
    current = {"old": 0.88, "new": 0.88, "lean": 0.88}

    def one(label: str, kind: str) -> None:
        if kind == "restart":  # 0.88 -> 0.85 -> 0.88 ...: the fingerprint changes every time
            current[label] = 0.85 if current[label] == 0.88 else 0.88
        ev = dict(extra[label], sglang_extraction_mem_fraction_static=current[label])
        r = codes[label].playbook("restart_extraction.yml", inventory, ev)
        r.update(kind=kind, code=label)
        runs_out.append(r)
        C.log("restart: %s %s %.1f s rc=%d tasks=%d %s" % (label, kind, r["wall"], r["rc"], r["tasks"], r["recap"]))

    teardowns = {}
    try:
        for label in ("old", "new", "lean"):
            one(label, "fresh")
        for i in range(rounds):
            order = ("old", "new", "lean") if i % 2 == 0 else ("lean", "new", "old")
            for kind in ("noop", "restart"):
                for label in order:
                    one(label, kind)
    finally:
        for label, co in codes.items():
            td = co.playbook("teardown.yml", inventory, dict(extra[label], sglang_purge_dumps_on_teardown=True))
            teardowns[label] = td
            C.log("restart: %s teardown.yml %.1f s rc=%d" % (label, td["wall"], td["rc"]))
    return {"rounds": rounds, "baseline": BASELINE, "startup": startup, "playbook_runs": runs_out,
            "teardown": teardowns}


def _sel(data: Dict[str, Any], code: str, kind: str) -> List[Dict[str, Any]]:
    return [r for r in data["playbook_runs"] if r.get("code", "new") == code and r["kind"] == kind]


def figures(data: Dict[str, Any]) -> Dict[str, Dict[str, Optional[float]]]:
    """Median wall per code and kind, the restart overhead over start-up, and NEW/OLD ratios."""
    st = C.median(data["startup"]) or 0.0
    out: Dict[str, Dict[str, Optional[float]]] = {}
    for code in ("old", "new", "lean"):
        f: Dict[str, Optional[float]] = {}
        for kind in ("fresh", "noop", "restart"):
            f[kind] = C.median(r["wall"] for r in _sel(data, code, kind))
        f["overhead"] = None if f["restart"] is None else f["restart"] - st
        out[code] = f
    for code, key in (("new", "ratio"), ("lean", "lean_ratio")):
        out[key] = {k: (out[code][k] / out["old"][k]) if out[code].get(k) and out["old"][k] else None
                    for k in ("fresh", "noop", "restart", "overhead")}
    return out


def report(data: Dict[str, Any], fig_dir: str = "", fig_prefix: str = "") -> Dict[str, Any]:
    st = C.median(data["startup"])
    fig = figures(data)
    rows = []
    for kind, label in (("fresh", "fresh (nothing running: plan, launch, ready, dump proof)"),
                        ("restart", "restart (config change: plan, teardown, launch, ready, dump proof)"),
                        ("noop", "no-op second run (same inputs)")):
        for code in ("old", "new", "lean"):
            rs = _sel(data, code, kind)
            if not rs:
                continue
            ok = sum(1 for r in rs if r["rc"] == 0)
            changed = sorted(set(r["recap"].get("changed", -1) for r in rs))
            tasks = sorted(set(r.get("tasks", 0) for r in rs))
            over = fig[code]["overhead"] if kind == "restart" else None
            rows.append([label, code.upper(), len(rs), C.fmt_s(fig[code][kind], 1),
                         ", ".join(C.fmt_s(r["wall"], 1) for r in rs), "%d/%d" % (ok, len(rs)),
                         ",".join(str(c) for c in changed), ",".join(str(t) for t in tasks),
                         "-" if over is None else "+%s" % C.fmt_s(over, 1)])
    ratio, lean = fig["ratio"], fig.get("lean_ratio") or {}
    fails = [r for r in data["playbook_runs"] if r["rc"] != 0]
    new_noops = _sel(data, "new", "noop")

    def _fmt_ratio(v: Optional[float]) -> str:
        return "-" if v is None else "%.2f" % v

    targets = [
        {"target": "Restart overhead over the server's start-up at most 3.5 s where it was 6.3 s "
                   "(NEW/OLD <= %.2f in the same run)" % TARGET_OVERHEAD_RATIO,
         "met": ratio["overhead"] is not None and ratio["overhead"] <= TARGET_OVERHEAD_RATIO,
         "value": "OLD +%s, NEW +%s: NEW/OLD %s (LEAN, without prewarm, settle and hold: +%s, LEAN/OLD %s)" % (
             C.fmt_s(fig["old"]["overhead"], 1), C.fmt_s(fig["new"]["overhead"], 1), _fmt_ratio(ratio["overhead"]),
             C.fmt_s(fig.get("lean", {}).get("overhead"), 1), _fmt_ratio(lean.get("overhead")))},
        # The hold is a truth rule (a server that dies seconds after its ready line must not be
        # called serving), not code cost: the code's own overhead is judged without it (LEAN).
        {"target": "The restart's code (LEAN: no prewarm, settle or hold) no slower than before the third "
                   "security review (LEAN/OLD <= %.2f in the same run)" % TARGET_LEAN_RATIO,
         "met": lean.get("overhead") is not None and lean["overhead"] <= TARGET_LEAN_RATIO,
         "value": "LEAN +%s, OLD +%s: LEAN/OLD %s" % (
             C.fmt_s(fig.get("lean", {}).get("overhead"), 1), C.fmt_s(fig["old"]["overhead"], 1),
             _fmt_ratio(lean.get("overhead")))},
        {"target": "Converged no-op run at most 3 s where it was 5.2 s (NEW/OLD <= %.2f in the same run)"
                   % TARGET_NOOP_RATIO,
         "met": ratio["noop"] is not None and ratio["noop"] <= TARGET_NOOP_RATIO,
         "value": "OLD %s, NEW %s: NEW/OLD %s (LEAN/OLD %s)" % (
             C.fmt_s(fig["old"]["noop"], 1), C.fmt_s(fig["new"]["noop"], 1), _fmt_ratio(ratio["noop"]),
             _fmt_ratio(lean.get("noop")))},
        {"target": "Second run with the same inputs is a no-op (changed=0), every run succeeds",
         "met": not fails and bool(new_noops) and all(r["recap"].get("changed") == 0 for r in new_noops),
         "value": "%d/%d runs ok; NEW no-op changed=0 in %d/%d" % (
             len(data["playbook_runs"]) - len(fails), len(data["playbook_runs"]),
             sum(1 for r in new_noops if r["recap"].get("changed") == 0), len(new_noops))},
    ]
    md = ["`playbooks/restart_extraction.yml` of this checkout (NEW) and of commit `%s` (OLD, a git worktree "
          "with its own collection path), interleaved in one run against one inventory (tp 8, emulator phase "
          "0.3 s, extraction flags), each with its own instance. Emulator start-up = the same command line "
          "started directly, exec to ready line: **%s** (median of %d: %s)." % (
              data.get("baseline", BASELINE), C.fmt_s(st, 2), len(data["startup"]),
              ", ".join(C.fmt_s(x, 2) for x in data["startup"])), "",
          C.md_table(["run", "code", "n", "wall (median)", "each", "rc 0", "changed", "tasks shown",
                      "overhead over start-up"], rows), "",
          "NEW/OLD in this run: restart overhead %s, no-op %s, restart %s, fresh %s. The absolute seconds "
          "follow the machine's load; the ratios are what the targets (3.5 s of 6.3 s, 3 s of 5.2 s) are "
          "judged on." % tuple(_fmt_ratio(ratio[k]) for k in ("overhead", "noop", "restart", "fresh")),
          "",
          "LEAN is this checkout with `sglang_restart_prewarm: false`, `sglang_settle: 0` and `sglang_hold: 0`: "
          "without the three steps NEW added after OLD (OLD does none of them), so LEAN/OLD is the cost of the "
          "code alone - restart overhead %s, no-op %s, restart %s. NEW - LEAN is what the prewarm (on the "
          "emulator's small model little reading; done by the plan's own module call), the 2 s settle window "
          "and the last check's hold (the new server must still serve 5 s after its ready line before the "
          "summary calls it serving) cost. NEW makes 4 module calls per restart (the plan takes the operation "
          "lock and warms the weights in its call, the teardown runs in the launch's call, the ready call "
          "gives the lock back, the last check holds and checks the server once more), 3 per no-op." % tuple(
              _fmt_ratio(lean.get(k)) for k in ("overhead", "noop", "restart"))]
    if fails:
        md.append("")
        md.append("Failed runs (tail):\n\n```\n%s\n```" % fails[0]["tail"])
    return {"title": "Restart (playbooks/restart_extraction.yml, this checkout vs %s)" % data.get("baseline", BASELINE),
            "markdown": "\n".join(md), "targets": targets, "figures": []}


if __name__ == "__main__":
    # SIGTERM ends the run through its `finally`: both instances torn down, the worktree removed
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    quick = "--quick" in sys.argv[1:]
    result = run(quick=quick)
    os.makedirs(C.RESULTS, exist_ok=True)
    with open(os.path.join(C.RESULTS, "restart-quick.json" if quick else "restart.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    rep = report(result)
    print(rep["markdown"])
    for t in rep["targets"]:
        print("[%s] %s: %s" % ("met" if t["met"] else "NOT met", t["target"], t["value"]))
