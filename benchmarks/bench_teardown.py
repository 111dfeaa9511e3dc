"""Teardown of an 8-rank emulator tree: sglang_teardown vs the incident's shell sequence vs a
psutil children walk.

Each trial launches the emulator with the sglang_launch module (tp 8: supervisor, launcher,
8 schedulers, detokenizer, resource tracker = 12 processes), waits for the ready line, starts
three decoys, and runs one approach:

  sglang_teardown   name + state_dir, ports [port], gpus [], sglang_processes false (a shared
                    host), grace_period 3, timeout 10, shm_dir = the trial's private shm dir
  shell (incident)  `pkill -f sglang`; sleep 1; `kill -9` of the leftovers (`pkill -9 -f
                    'sglang|python'`); `fuser -k /dev/nvidia*`; clean /dev/shm. Emulated scoped:
                    pkill through benchmarks/scoped_pkill.py (pkill's matching rule, applied only to
                    this trial's processes and decoys); fuser -k for real, but on a fake
                    `nvidia0` file of the trial; `rm -rf` on the private shm dir.
  children walk     psutil, SGLang kill_process_tree / vllm-cleaner style: the main process and
                    parent.children(recursive=True), terminate, wait_procs 3 s, kill the rest.

Variants: the tree honours SIGTERM; ignores it (fault ignore_sigterm); has an escaped worker
(fault escape: double fork + setsid, keeps the port); leaks shm files (fault leak_shm; the files
are moved from /dev/shm into a private dir on the same tmpfs while their holders keep them open,
so nobody else's /dev/shm is touched).

Decoys (none of them belongs to the server): `tail -f .../sglang.log`, an editor-like `sleep`
whose argv is `vim sglang_notes.txt`, and a GPU-monitor-like `sleep` holding the fake nvidia0
and a psm_* file in the shm dir open.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Dict, List, Optional

import common as C
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

VARIANTS = ["honours", "ignores", "escape", "leak_shm"]
VLABEL = {"honours": "honours SIGTERM", "ignores": "ignores SIGTERM", "escape": "escaped child",
          "leak_shm": "leaked shm"}
FAULT = {"honours": "", "ignores": "ignore_sigterm", "escape": "escape", "leak_shm": "leak_shm"}
APPROACHES = ["ours", "shell", "walk"]
ALABEL = {"ours": "sglang_teardown", "shell": "incident shell sequence", "walk": "children walk (psutil)"}
GRACE = 3.0
TP = 8
HERE = os.path.dirname(os.path.abspath(__file__))

SHELL = """#!/bin/bash
# The incident's teardown, scoped to one benchmark trial (see scoped_pkill.py).
PK="/usr/bin/python3 -I -S {helper} --scope {scope} --report {report}"
$PK -f sglang                       # pkill -f sglang
sleep 1                             # look at ps ...
$PK -9 -f 'sglang|python'           # ... kill -9 the leftover python processes
fuser -k {fake_dev}/nvidia* >/dev/null 2>&1   # fuser -k /dev/nvidia*
rm -rf {shm}/*                      # clean /dev/shm
exit 0
"""

WALK = r"""
import sys, psutil
parent = psutil.Process(int(sys.argv[1]))
procs = parent.children(recursive=True) + [parent]
for p in procs:
    try:
        p.terminate()
    except psutil.NoSuchProcess:
        pass
gone, alive = psutil.wait_procs(procs, timeout=3)
for p in alive:
    try:
        p.kill()
    except psutil.NoSuchProcess:
        pass
"""


def _start_time_ticks(pid: int) -> Optional[int]:
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _shm_holders(pids: List[int]) -> Dict[str, int]:
    out = {}
    for pid in pids:
        d = "/proc/%d/fd" % pid
        try:
            fds = os.listdir(d)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(d, fd))
            except OSError:
                continue
            base = os.path.basename(target)
            if target.startswith("/dev/shm/") and os.path.dirname(target) == "/dev/shm" and \
                    (base.startswith("sgl_shm_") or base.startswith("psm_")):
                out[target] = pid
    return out


class Trial:
    def __init__(self, variant: str, approach: str, idx: int) -> None:
        self.variant, self.approach, self.idx = variant, approach, idx
        self.name = "td-%s-%s-%d" % (variant.replace("_", ""), approach, idx)
        self.dir = C.mkdir("teardown", self.name)
        self.state_dir = C.mkdir("teardown", self.name, "state")
        self.shm = os.path.join(C.SHM_ROOT, self.name)
        os.makedirs(self.shm, exist_ok=True)
        self.fake_dev = C.mkdir("teardown", self.name, "dev")
        self.port = C.free_port()
        self.decoys: List[subprocess.Popen] = []
        self.scope: Dict[int, Optional[int]] = {}
        self.result: Dict[str, Any] = {"variant": variant, "approach": approach, "idx": idx}

    def launch(self) -> bool:
        env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "SGLANG_EMULATOR_FAULT": FAULT[self.variant],
               C.fixtures.TEST_MARKER: C.RUN_ID, "SGLANG_BENCH_RUN": C.TOKEN}
        r = C.run_module("sglang_launch", {
            "name": self.name, "venv": C.EMU_VENV, "model_path": "bench/%s" % C.TOKEN,
            "port": self.port, "tp_size": TP, "state_dir": self.state_dir,
            "log_dir": os.path.join(self.dir, "logs"), "gpu_backend": "none", "env": env})
        if r.get("failed"):
            self.result["error"] = "launch failed: %s" % r.get("msg")
            return False
        self.record = r["record"]
        if not C.wait_log(r["log_path"], C.READY_LINE, 60):
            self.result["error"] = "launch never became ready"
            return False
        if self.variant == "escape":  # the escaped worker binds after the ready line at most 1 s
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and len(C.listeners(self.port)) < 2:
                time.sleep(0.05)
        roots = [self.record["pid"], self.record.get("supervisor_pid")]
        scope = C.tree_scope([p for p in roots if p], self.port, sids=[self.record.get("sid")])
        self.server_pids = sorted(scope)
        self.st = C.start_times(scope)
        if self.variant == "leak_shm":
            moved = 0
            for target, _pid in _shm_holders(self.server_pids).items():
                try:
                    os.rename(target, os.path.join(self.shm, os.path.basename(target)))
                    moved += 1
                except OSError:
                    pass
            self.result["shm_files_leaked"] = moved
        return True

    def start_decoys(self) -> None:
        logf = os.path.join(self.dir, "sglang.log")
        with open(logf, "w") as fh:
            fh.write("decoy log\n")
        self.decoys.append(C.popen(["tail", "-f", logf]))
        self.decoys.append(C.popen(["bash", "-c", 'exec -a "vim sglang_notes.txt" sleep 600']))
        dev = os.path.join(self.fake_dev, "nvidia0")
        open(dev, "w").close()
        self.decoy_shm = os.path.join(self.shm, "psm_decoy%s" % C.TOKEN[-6:])
        with open(self.decoy_shm, "w") as fh:
            fh.write("held by the monitoring agent\n")
        self.decoys.append(C.popen(["bash", "-c", 'exec 3<"%s" 4<"%s"; exec -a nv-monitor-agent sleep 600'
                                    % (dev, self.decoy_shm)]))
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            ok = True
            for d in self.decoys:
                info = _procs.read_proc(d.pid)
                if info is None or "bash" in info.title:
                    ok = False
            if ok:
                break
            time.sleep(0.02)

    def run_approach(self) -> None:
        a = self.approach
        t0 = time.time()
        if a == "ours":
            r = C.run_module("sglang_teardown", {
                "name": self.name, "state_dir": self.state_dir, "ports": [self.port], "gpus": [],
                "gpu_backend": "none", "sglang_processes": False, "grace_period": GRACE, "timeout": 10,
                "shm_dir": self.shm})
            self.result["time"] = time.time() - t0
            self.result["module_failed"] = bool(r.get("failed"))
            self.result["module_msg"] = r.get("msg", "")
            self.result["module_reason"] = r.get("reason")
            self.result["module_timings"] = r.get("timings")
            self.result["module_targets"] = len(r.get("targets") or [])
            self.result["module_survivors"] = len(r.get("survivors") or [])
            self.result["verified"] = not r.get("failed") and not r.get("survivors")
        elif a == "shell":
            scope_file = os.path.join(self.dir, "scope.txt")
            with open(scope_file, "w") as fh:
                for pid in self.server_pids + [d.pid for d in self.decoys]:
                    st = _start_time_ticks(pid)
                    if st is not None:
                        fh.write("%d %d\n" % (pid, st))
            report = os.path.join(self.dir, "pkill.jsonl")
            script = os.path.join(self.dir, "incident_teardown.sh")
            with open(script, "w") as fh:
                fh.write(SHELL.format(helper=os.path.join(HERE, "scoped_pkill.py"), scope=scope_file,
                                      report=report, fake_dev=self.fake_dev, shm=self.shm))
            subprocess.run(["bash", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60, check=False)
            self.result["time"] = time.time() - t0
            self.result["verified"] = False
            try:
                with open(report) as fh:
                    reps = [json.loads(l) for l in fh if l.strip()]
                self.result["would_also_match"] = max(r["would_also_match_outside_scope"] for r in reps)
            except (OSError, ValueError):
                pass
        else:
            subprocess.run([C.CTL_PY, "-c", WALK, str(self.record["pid"])], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60, check=False)
            self.result["time"] = time.time() - t0
            self.result["verified"] = False

    def measure(self) -> None:
        res = self.result
        res["survivors_at_return"] = sum(1 for p in self.server_pids if C.alive(p, self.st.get(p)))
        time.sleep(0.5)
        res["survivors_after_settle"] = sum(1 for p in self.server_pids if C.alive(p, self.st.get(p)))
        res["port_held_after_settle"] = bool(C.listeners(self.port))
        res["decoys_killed"] = sum(1 for d in self.decoys if d.poll() is not None)
        res["decoy_shm_removed"] = not os.path.exists(self.decoy_shm)
        try:
            left = [f for f in os.listdir(self.shm) if not f.startswith("psm_decoy")]
        except OSError:
            left = []
        res["shm_left"] = len(left)
        res["collateral"] = res["decoys_killed"] + (1 if res["decoy_shm_removed"] else 0)
        res["tree_size"] = len(self.server_pids)

    def cleanup(self) -> None:
        C.kill_pids(getattr(self, "server_pids", []), getattr(self, "st", {}))
        for d in self.decoys:
            C.kill_group(d)
        C.wait_port_free(self.port, 5)
        C.rmtree(self.shm)


def run(quick: bool = False) -> Dict[str, Any]:
    runs = 1 if quick else 3
    rows = []
    t_start = time.time()
    for i in range(runs):
        for v in VARIANTS:
            for a in APPROACHES:
                t = Trial(v, a, i)
                try:
                    if t.launch():
                        t.start_decoys()
                        t.run_approach()
                        t.measure()
                finally:
                    t.cleanup()
                rows.append(t.result)
                r = t.result
                C.log("teardown %s/%s #%d: %s, survivors %s, collateral %s, shm left %s %s" % (
                    v, a, i, C.fmt_s(r.get("time")), r.get("survivors_after_settle"), r.get("collateral"),
                    r.get("shm_left"), r.get("error") or (r.get("module_msg") or "")[:120]))
    return {"runs": runs, "rows": rows, "grace": GRACE, "tp": TP, "wall": time.time() - t_start}


def _agg(rows, v, a):
    sel = [r for r in rows if r["variant"] == v and r["approach"] == a and "time" in r]

    def med(k):
        return C.median(r.get(k) for r in sel)
    return {"n": len(sel), "time": med("time"), "surv_ret": med("survivors_at_return"),
            "surv": med("survivors_after_settle"), "port": sum(1 for r in sel if r.get("port_held_after_settle")),
            "collateral": med("collateral"), "shm_left": med("shm_left"), "verified": sum(1 for r in sel if r.get("verified")),
            "would": med("would_also_match"), "tree": med("tree_size"),
            "failed": [r.get("module_msg") for r in sel if r.get("module_failed")],
            "internal": C.median(sum((r.get("module_timings") or {}).values()) for r in sel if r.get("module_timings")),
            "errors": [r.get("error") for r in [x for x in rows if x["variant"] == v and x["approach"] == a] if r.get("error")]}


def plot(rows, out_path):
    plt = C.plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    colors = {"ours": "#1f77b4", "shell": "#d62728", "walk": "#9467bd"}
    w = 0.26
    for j, a in enumerate(APPROACHES):
        xs = [i + (j - 1) * w for i in range(len(VARIANTS))]
        ags = [_agg(rows, v, a) for v in VARIANTS]
        ax1.bar(xs, [g["time"] or 0 for g in ags], w, label=ALABEL[a], color=colors[a])
        bad = [(g["surv"] or 0) + (g["shm_left"] or 0) + (g["collateral"] or 0) + (1 if g["port"] else 0) for g in ags]
        ax2.bar(xs, [g["surv"] or 0 for g in ags], w, color=colors[a])
        ax2.bar(xs, [g["collateral"] or 0 for g in ags], w, bottom=[g["surv"] or 0 for g in ags], color=colors[a],
                alpha=0.45, hatch="xx")
        ax2.bar(xs, [g["shm_left"] or 0 for g in ags], w,
                bottom=[(g["surv"] or 0) + (g["collateral"] or 0) for g in ags], color=colors[a], alpha=0.2,
                hatch="..")
        for x, b in zip(xs, bad):
            if b == 0:
                ax2.text(x, 0.1, "0", ha="center", fontsize=8, color=colors[a])
    ax1.axhline(2.0, color="grey", lw=0.8, ls=":")
    ax1.axhline(GRACE + 1.0, color="grey", lw=0.8, ls="--")
    ax1.text(3.45, 2.05, "2 s target (honours)", fontsize=7, color="grey", ha="right")
    ax1.text(3.45, GRACE + 1.05, "grace %g s + 1 s target (ignores)" % GRACE, fontsize=7, color="grey", ha="right")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(VARIANTS)))
        ax.set_xticklabels([VLABEL[v] for v in VARIANTS], fontsize=8)
    ax1.set_ylabel("seconds until the tool returns (median)")
    ax1.set_title("Teardown time, 8-rank tree", fontsize=10)
    ax1.legend(fontsize=7)
    ax2.set_ylabel("count (median)")
    ax2.set_title("Survivors (0.5 s after return), collateral kills, shm files left", fontsize=10)
    from matplotlib.patches import Patch
    handles = [Patch(color=colors[a], label=ALABEL[a]) for a in APPROACHES]
    handles += [Patch(facecolor="white", edgecolor="black", label="survivors"),
                Patch(facecolor="white", edgecolor="black", hatch="xx", label="collateral (decoys + decoy shm)"),
                Patch(facecolor="white", edgecolor="black", hatch="..", label="leaked shm files left")]
    ax2.legend(handles=handles, fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    rows, runs = data["rows"], data["runs"]
    fig = os.path.join(fig_dir, fig_prefix + "bench_teardown.png")
    plot(rows, fig)
    header = ["variant", "approach", "time (median)", "verified by the tool", "survivors at return / 0.5 s later",
              "port still held", "collateral kills (of 3 decoys) + decoy shm removed", "shm files left",
              "vs sglang_teardown"]
    table = []
    for v in VARIANTS:
        ref = _agg(rows, v, "ours")
        for a in APPROACHES:
            g = _agg(rows, v, a)
            ratio = "-" if a == "ours" or not (g["time"] and ref["time"]) else "%.1fx" % (g["time"] / ref["time"])
            time_s = C.fmt_s(g["time"])
            if a == "ours" and g["internal"] is not None:
                time_s += " (module internal %s)" % C.fmt_s(g["internal"])
            note = ""
            if g["failed"]:
                note = " - failed: %s" % g["failed"][0][:100]
            if g["errors"]:
                note = " - ERROR: %s" % g["errors"][0][:100]
            table.append([VLABEL[v] if a == "ours" else "", ALABEL[a] + note, time_s,
                          "%d/%d" % (g["verified"], g["n"]),
                          "%s / %s" % (_n(g["surv_ret"]), _n(g["surv"])), "%d/%d" % (g["port"], g["n"]),
                          _n(g["collateral"]), _n(g["shm_left"]), ratio])
    would = C.median(r.get("would_also_match") for r in rows if r["approach"] == "shell")
    honours = _agg(rows, "honours", "ours")
    ignores = _agg(rows, "ignores", "ours")
    ours_rows = [r for r in rows if r["approach"] == "ours"]
    clean = sum(1 for r in ours_rows if r.get("survivors_after_settle") == 0 and not r.get("port_held_after_settle")
                and r.get("collateral") == 0 and r.get("shm_left") == 0 and r.get("verified"))
    tree = C.median(r.get("tree_size") for r in rows)
    targets = [
        {"target": "A ~10-process tree that honours SIGTERM stops, verified, in under 2 s",
         "met": honours["time"] is not None and honours["time"] < 2.0 and honours["verified"] == honours["n"],
         "value": "%s wall, module run included (%s inside the module); %d-process tree, %d/%d verified"
                  % (C.fmt_s(honours["time"]), C.fmt_s(honours["internal"]), tree or 0, honours["verified"], honours["n"])},
        {"target": "A tree that ignores SIGTERM stops in grace_period + under 1 s",
         "met": ignores["time"] is not None and ignores["time"] < GRACE + 1.0 and ignores["verified"] == ignores["n"],
         "value": "%s with grace_period %g s (= grace + %s)" % (
             C.fmt_s(ignores["time"]), GRACE, C.fmt_s((ignores["time"] or 0) - GRACE))},
        {"target": "sglang_teardown: no survivor, no collateral kill, no shm leftover in any variant",
         "met": clean == len(ours_rows) and len(ours_rows) > 0, "value": "%d/%d trials clean" % (clean, len(ours_rows))},
    ]
    md = ["Median of %d runs per cell; a fresh 8-rank launch (sglang_launch, tp %d, %s processes with the "
          "supervisor) per trial. `sglang_teardown` runs with `grace_period: %g`, the children walk waits "
          "3 s, the shell sequence sleeps 1 s between `pkill` and `kill -9`. Times are until the tool "
          "returns (module: `run_module`, i.e. the python start-up is included). Survivors are the "
          "launch's processes (escaped worker included) still alive and not zombies."
          % (runs, data["tp"], _n(tree), GRACE), "",
          "![teardown](%sbench_teardown.png)" % fig_prefix, "", C.md_table(header, table), ""]
    md.append("Collateral: each trial has three decoys that are not part of the server - `tail -f "
              "sglang.log`, an editor (`vim sglang_notes.txt`, really `sleep`) and a GPU-monitor stand-in "
              "holding the fake `nvidia0` and a `psm_*` file open. On a real host `pkill -f sglang` would "
              "also hit every other user's sglang process: at the moments the shell sequence ran, "
              "**%s other processes** on this shared machine matched `sglang` (median; counted, not "
              "signalled). `fuser -k /dev/nvidia*` is emulated with `fuser -k` on the trial's fake "
              "`nvidia0` file only (the emulator does not open GPU devices, so only the monitor decoy "
              "holds it)." % _n(would))
    return {"title": "Teardown", "markdown": "\n".join(md), "targets": targets, "figures": [fig]}


def _n(v) -> str:
    if v is None:
        return "-"
    return ("%d" % v) if float(v).is_integer() else ("%.1f" % v)
