"""Readiness verdicts: sglang_ready vs ansible.builtin.wait_for vs an ansible.builtin.uri loop.

Scenarios (each a fresh emulator launch, tp 2, written with a launch record like
tests/integration/test_ready.py does):
  good            normal start (phase 0.5 s: ready line ~3-4 s after launch)
  import_error    crash at start (SGLANG_EMULATOR_FAULT=import_error, exit 1 after ~0.5 s)
  oom_5s          crash while loading: fault `oom` with SGLANG_EMULATOR_PHASE_SECONDS=1.15, so the
                  memory pool raises "Not enough memory" ~5 s after launch (measured per run)
  stale           an old healthy emulator holds the port; the new launch fails to bind
  appended_hang   the log already holds an old ready line (earlier launch, same file); the new
                  launch appends to it and hangs in weight loading

Observers of one launch, all started at the moment of the launch:
  ours            sglang_ready through helpers.fixtures.run_module (python -m module, as tests do)
  ours (ansible)  sglang_ready through `ansible localhost -m llmops.sglang.sglang_ready`
  wait_for        `ansible localhost -m wait_for -a "path=LOG search_regex='ready to roll'"`
  uri loop        ansible-playbook: uri /health until status == 200, retries 10, delay 10
                  (the incident's 10 s poll)
Every tool gets the same time budget (timeout 100 s = 10 x 10 s; --quick: 30 s).
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Dict, List, Optional

import common as C

TOOLS = ["ours", "ours_cli", "wait_for", "uri"]
LABELS = {"ours": "sglang_ready", "ours_cli": "sglang_ready (ansible CLI)",
          "wait_for": "wait_for (log regex)", "uri": "uri /health loop (10 s)"}
SCENARIOS = ["good", "import_error", "oom_5s", "stale", "appended_hang"]
SCEN_LABEL = {"good": "good start", "import_error": "crash at start (import_error)",
              "oom_5s": "crash while loading (oom ~5 s)", "stale": "stale server on the port",
              "appended_hang": "old ready line in appended log, new launch hangs"}
EXPECT_READY = {"good": True}
OOM_PHASE = 1.4
FATAL_NEEDLES = {"import_error": ["No module named", "Traceback"],
                 "oom_5s": ["Not enough memory", "Scheduler hit an exception"]}

URI_PLAYBOOK = """---
- name: Incident-style health poll
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Poll /health until it answers 200
      ansible.builtin.uri:
        url: "http://127.0.0.1:{{ port }}/health"
        status_code: 200
        timeout: 5
      register: health
      until: health.status == 200
      retries: "{{ retries | int }}"
      delay: "{{ delay | int }}"
"""


def cause_line(lines: List[str]) -> str:
    """The exception line of the decisive lines (else the last), without its timestamp."""
    import re
    pick = [l for l in lines if re.search(r"(Error|Exception)\b.*:", l)]
    line = (pick[-1] if pick else (lines[-1] if lines else "")).strip()
    return re.sub(r"^\[[^\]]*\]\s*", "", line)[:90]


class Trial:
    def __init__(self, scenario: str, idx: int) -> None:
        self.scenario, self.idx = scenario, idx
        self.name = "rd-%s-%d" % (scenario.replace("_", ""), idx)
        self.state_dir = C.mkdir("readiness", self.name, "state")
        self.log_path = C.path("readiness", self.name, "sglang-%s.log" % self.name)
        self.port = C.free_port()
        self.procs: List[Any] = []
        self.record: Dict[str, Any] = {}
        self.t0 = 0.0
        self.watcher: Optional[C.Watcher] = None
        self.obs: Dict[str, C.Background] = {}
        self.prep: Dict[str, Any] = {}

    # -- set-up of each scenario ------------------------------------------------------------
    def launch(self) -> None:
        s = self.scenario
        if s == "stale":
            old, _unused = C.start_emulator(C.mkdir("readiness", self.name, "old-state"),
                                            C.path("readiness", self.name, "old.log"), "old", self.port,
                                            phase=0.1)
            self.procs.append(old)
            ok = C.wait_log(C.path("readiness", self.name, "old.log"), C.READY_LINE, 30, proc=old)
            self.prep["stale_pid"] = old.pid
            self.prep["stale_ready"] = ok
        if s == "appended_hang":
            first, _unused = C.start_emulator(self.state_dir, self.log_path, self.name, self.port, phase=0.1)
            ok = C.wait_log(self.log_path, C.READY_LINE, 30, proc=first)
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            C.wait_port_free(self.port, 10)
            self.prep["old_ready_line"] = ok
        fault = {"import_error": "import_error", "oom_5s": "oom", "appended_hang": "hang"}.get(s, "")
        phase = OOM_PHASE if s == "oom_5s" else 0.5
        proc, self.record = C.start_emulator(self.state_dir, self.log_path, self.name, self.port,
                                             fault=fault, phase=phase)
        self.t0 = self.record["launched_at"]
        self.procs.append(proc)
        needles = [C.READY_LINE] + FATAL_NEEDLES.get(s, []) + ["error while attempting to bind"]
        self.watcher = C.Watcher(proc, self.log_path, self.record["log_offset"], needles)
        self.watcher.start()

    # -- observers ------------------------------------------------------------------------------
    def start_observers(self, tools: List[str], budget: float, retries: int) -> None:
        for tool in tools:
            self.obs[tool] = C.Background(self._observer(tool, budget, retries))
            self.obs[tool].start()

    def _observer(self, tool: str, budget: float, retries: int):
        st, name, log_path, port = self.state_dir, self.name, self.log_path, self.port
        if tool == "ours":
            # settle: 0 - the verdict latency after the ready line is what is compared here; the
            # settle window (default 2 s: still alive, port still ours) is a deliberate extra.
            return lambda: C.run_module("sglang_ready", {"name": name, "state_dir": st, "settle": 0,
                                                         "timeout": budget}, timeout=budget + 60)
        if tool == "ours_cli":
            argv = C.ansible_adhoc_argv("llmops.sglang.sglang_ready",
                                        {"name": name, "state_dir": st, "settle": 0, "timeout": budget})
        elif tool == "wait_for":
            argv = C.ansible_adhoc_argv("ansible.builtin.wait_for",
                                        "path=%s search_regex='ready to roll' timeout=%d" % (log_path, budget))
        else:
            pb = C.path("readiness", "uri_health.yml")
            if not os.path.exists(pb):
                with open(pb, "w") as fh:
                    fh.write(URI_PLAYBOOK)
            argv = [C.ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", pb,
                    "-e", "port=%d retries=%d delay=10" % (port, retries),
                    "-e", "ansible_python_interpreter=%s" % C.CTL_PY]
        return lambda: C.run_timed(argv, timeout=budget + 120)

    def verdict(self, tool: str) -> Dict[str, Any]:
        b = self.obs[tool]
        out: Dict[str, Any] = {"tool": tool, "time": None, "ready": None, "verdict": "error"}
        if b.finished_at is None:
            out["verdict"] = "no verdict (still running)"
            return out
        out["time"] = b.finished_at - self.t0
        if b.error is not None:
            out["verdict"] = "error: %s" % b.error
            return out
        if tool == "ours":
            r = b.result
            out["ready"] = bool(r.get("ready"))
            out["reason"] = r.get("reason")
            out["cause"] = cause_line(r.get("decisive_lines") or [])
            out["verdict"] = "ready" if out["ready"] else "not ready: %s" % r.get("reason")
            out["module_elapsed"] = r.get("elapsed")
        else:
            rc, _unused, text = b.result
            out["ready"] = rc == 0
            if rc == 0:
                out["verdict"] = "ready"
            else:
                reason = "timeout"
                if tool == "ours_cli":
                    import re
                    m = re.search(r'"reason": "([a-z_]+)"', text) or re.search(r"reason: ([a-z_]+)", text)
                    reason = m.group(1) if m else "failed"
                elif tool == "uri":
                    reason = "retries exhausted"
                out["verdict"] = "not ready: %s" % reason
        out["correct"] = out["ready"] == EXPECT_READY.get(self.scenario, False)
        return out

    def facts(self) -> Dict[str, Any]:
        w = self.watcher
        f: Dict[str, Any] = {"scenario": self.scenario, "idx": self.idx, "prep": self.prep}
        ready_ts = C.first_line_time(self.log_path, C.READY_LINE, self.record.get("log_offset", 0))
        f["ready_line_after_launch"] = None if ready_ts is None else ready_ts - self.t0
        crash = [t for n, t in (w.seen.items() if w else []) if n in FATAL_NEEDLES.get(self.scenario, [])]
        if w and w.exited_at is not None and self.scenario in FATAL_NEEDLES:
            crash.append(w.exited_at)
        f["crash_after_launch"] = (min(crash) - self.t0) if crash else None
        f["exited_after_launch"] = (w.exited_at - self.t0) if w and w.exited_at else None
        f["bind_error_seen"] = bool(w and "error while attempting to bind" in w.seen)
        f["ready_line_in_new_log"] = ready_ts is not None
        f["ready_line_ts"] = ready_ts
        return f

    def finished(self, tools: List[str]) -> bool:
        return all(self.obs[t].finished_at is not None for t in tools if t in self.obs)

    def cleanup(self) -> None:
        if self.watcher:
            self.watcher.stop.set()
        for p in self.procs:
            C.kill_group(p)


def quiet_runs(runs: int, budget: float) -> List[Dict[str, Any]]:
    """sglang_ready alone (no peers starting next to it): latency after the ready line / crash."""
    out = []
    for scen in ("good", "import_error", "oom_5s"):
        for i in range(runs):
            t = Trial(scen, 100 + i)
            t.launch()
            t.start_observers(["ours"], budget, 0)
            t.obs["ours"].join(budget + 90)
            t.watcher.stop.set()
            v = t.verdict("ours")
            f = t.facts()
            row = {"scenario": scen, "idx": i, "time": v["time"], "verdict": v["verdict"],
                   "correct": v.get("correct"), "cause": v.get("cause", "")}
            if scen == "good" and f["ready_line_ts"] is not None:
                row["after_ready_line"] = t.obs["ours"].finished_at - f["ready_line_ts"]
            if scen != "good" and f["crash_after_launch"] is not None:
                row["after_crash"] = v["time"] - f["crash_after_launch"]
                row["crash_at"] = f["crash_after_launch"]
            out.append(row)
            C.log("readiness quiet %s #%d: %s in %s (%s)" % (scen, i, v["verdict"], C.fmt_s(v["time"]),
                  C.fmt_s(row.get("after_ready_line", row.get("after_crash")), 3)))
            t.cleanup()
    return out


def comparison(runs: int, budget: float, retries: int, quiet_runs_fn=None) -> Dict[str, Any]:
    """All four observers on the same launch; slow verdicts are collected in the background
    (the scenarios where the peers can only time out go first, and the quiet runs of
    sglang_ready alone happen while those peers wait out their budget)."""
    trials: List[Trial] = []
    order = ["import_error", "oom_5s", "appended_hang", "good", "stale", "QUIET"]
    quiet: List[Dict[str, Any]] = []
    for scen in order:
        if scen == "QUIET":
            quiet = quiet_runs_fn() if quiet_runs_fn else []
            continue
        for i in range(runs):
            t = Trial(scen, i)
            t.launch()
            t.start_observers(TOOLS, budget, retries)
            trials.append(t)
            # Foreground until our verdict (the hang has none before the budget), so that the
            # next launch does not start in the middle of this one.
            limit = time.monotonic() + (2 if scen == "appended_hang" else budget + 60)
            while time.monotonic() < limit and t.obs["ours"].finished_at is None:
                time.sleep(0.05)
            if scen in ("good", "stale"):  # short: wait for every observer before the next launch
                limit = time.monotonic() + budget + 60
                wait = ["ours_cli", "wait_for"] if scen == "good" else ["ours_cli"]
                while time.monotonic() < limit and not t.finished(wait):
                    time.sleep(0.05)
            C.log("readiness compare %s #%d launched (ours: %s)" % (scen, i,
                  t.verdict("ours")["verdict"] if t.obs["ours"].finished_at else "pending"))
    deadline = time.monotonic() + budget + 150
    while time.monotonic() < deadline and not all(t.finished(TOOLS) for t in trials):
        time.sleep(0.2)
    rows = []
    for t in trials:
        f = t.facts()
        for tool in TOOLS:
            v = t.verdict(tool)
            v.update(scenario=t.scenario, idx=t.idx, facts=f)
            rows.append(v)
        t.cleanup()
    return {"rows": rows, "quiet": quiet}


def _agg(rows: List[Dict[str, Any]], scen: str, tool: str) -> Dict[str, Any]:
    sel = [r for r in rows if r["scenario"] == scen and r["tool"] == tool]
    verdicts = sorted(set(r["verdict"] for r in sel))
    return {"time": C.median(r["time"] for r in sel), "verdicts": verdicts,
            "correct": sum(1 for r in sel if r.get("correct")), "n": len(sel),
            "cause": next((r.get("cause") for r in sel if r.get("cause")), "")}


def plot(rows: List[Dict[str, Any]], budget: float, out_path: str) -> None:
    plt = C.plt()
    fig, ax = plt.subplots(figsize=(11, 4.8))
    width = 0.2
    colors = {"ours": "#1f77b4", "ours_cli": "#6baed6", "wait_for": "#ff7f0e", "uri": "#2ca02c"}
    for j, tool in enumerate(TOOLS):
        xs, hs, wrong = [], [], []
        for i, scen in enumerate(SCENARIOS):
            a = _agg(rows, scen, tool)
            xs.append(i + (j - 1.5) * width)
            hs.append(max(a["time"] or 0.0, 0.05))
            wrong.append(a["correct"] < a["n"])
        bars = ax.bar(xs, hs, width, label=LABELS[tool], color=colors[tool])
        for b, w, h in zip(bars, wrong, hs):
            if w:
                b.set_hatch("//")
                b.set_edgecolor("red")
                ax.text(b.get_x() + b.get_width() / 2, h * 1.08, "wrong", ha="center", fontsize=7, color="red",
                        rotation=90, va="bottom")
    ax.set_yscale("log")
    ax.set_ylim(0.1, budget * 4)
    ax.axhline(budget, color="grey", lw=0.8, ls=":")
    ax.text(-0.45, budget * 1.08, "time budget %d s" % budget, fontsize=7, color="grey", ha="left")
    ax.set_xticks(range(len(SCENARIOS)))
    ax.set_xticklabels([SCEN_LABEL[s].replace(" (", "\n(").replace(", ", ",\n") for s in SCENARIOS], fontsize=8)
    ax.set_ylabel("time to verdict after launch (s, log scale, median)")
    ax.set_title("Readiness verdicts: time to verdict per scenario (hatched red = wrong verdict)")
    ax.legend(fontsize=8, loc="upper center", ncol=4)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)


def run(quick: bool = False) -> Dict[str, Any]:
    runs = 1 if quick else 3
    budget = 30 if quick else 100
    retries = budget // 10
    t_start = time.time()
    res = comparison(runs, budget, retries, lambda: quiet_runs(runs, budget))
    data = {"runs": runs, "budget": budget, "retries": retries, "quiet": res["quiet"], "rows": res["rows"],
            "wall": time.time() - t_start}
    return data


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    runs, budget, rows, quiet = data["runs"], data["budget"], data["rows"], data["quiet"]
    fig = os.path.join(fig_dir, fig_prefix + "bench_readiness.png")
    plot(rows, budget, fig)
    # comparison table
    header = ["scenario", "tool", "time to verdict (median)", "verdict", "correct", "vs sglang_ready (ansible CLI)"]
    table = []
    for scen in SCENARIOS:
        ref = _agg(rows, scen, "ours_cli")
        for tool in TOOLS:
            a = _agg(rows, scen, tool)
            ratio = "-"
            if tool in ("wait_for", "uri") and a["time"] and ref["time"]:
                ratio = "%.1fx" % (a["time"] / ref["time"])
                if a["correct"] < a["n"]:
                    ratio += " (wrong verdict)"
            verdict = "; ".join(a["verdicts"])
            if tool == "ours" and a["cause"] and scen != "good":
                verdict += " - `%s`" % a["cause"].strip()[:70]
            table.append([SCEN_LABEL[scen] if tool == "ours" else "", LABELS[tool], C.fmt_s(a["time"]),
                          verdict, "%d/%d" % (a["correct"], a["n"]), ratio])
    facts_rows = []
    for scen in SCENARIOS:
        fs = [r["facts"] for r in rows if r["scenario"] == scen and r["tool"] == "ours"]
        facts_rows.append([SCEN_LABEL[scen], C.fmt_s(C.median(f["ready_line_after_launch"] for f in fs)),
                           C.fmt_s(C.median(f["crash_after_launch"] for f in fs)),
                           "yes" if any(f["bind_error_seen"] for f in fs) else "no",
                           "yes" if any(f["ready_line_in_new_log"] for f in fs) else "no"])
    # quiet runs: the targets
    lat_ready = C.median(r.get("after_ready_line") for r in quiet if r["scenario"] == "good")
    lat_ie = C.median(r.get("after_crash") for r in quiet if r["scenario"] == "import_error")
    lat_oom = C.median(r.get("after_crash") for r in quiet if r["scenario"] == "oom_5s")
    crash_at = C.median(r.get("crash_at") for r in quiet if r["scenario"] == "oom_5s")
    qrows = []
    for scen in ("good", "import_error", "oom_5s"):
        sel = [r for r in quiet if r["scenario"] == scen]
        key = "after_ready_line" if scen == "good" else "after_crash"
        qrows.append([SCEN_LABEL[scen], C.fmt_s(C.median(r["time"] for r in sel)),
                      C.fmt_s(C.median(r.get(key) for r in sel), 3),
                      ", ".join(C.fmt_s(r.get(key), 3) for r in sel),
                      "; ".join(sorted(set(r["verdict"] for r in sel)))])
    ours_all = [r for r in rows if r["tool"] == "ours"]
    ours_correct = sum(1 for r in ours_all if r.get("correct"))
    crash_worst = max([x for x in (lat_ie, lat_oom) if x is not None] or [None]) if (lat_ie or lat_oom) else None
    targets = [
        {"target": "Readiness reported within 0.5 s (median) of the ready line",
         "met": lat_ready is not None and lat_ready <= 0.5,
         "value": "median %s after the ready line's log timestamp (%d runs)" % (C.fmt_s(lat_ready, 3), runs)},
        {"target": "A crashed launch reported within ~1 s of the crash",
         "met": crash_worst is not None and crash_worst <= 1.0,
         "value": "import_error: %s, oom during loading: %s after the crash (median)" % (
             C.fmt_s(lat_ie, 3), C.fmt_s(lat_oom, 3))},
        {"target": "sglang_ready gives the right verdict in all 5 readiness scenarios",
         "met": ours_correct == len(ours_all),
         "value": "%d/%d runs correct" % (ours_correct, len(ours_all))},
    ]
    md = []
    md.append("Each scenario is a fresh emulator launch (tp 2, `SGLANG_LOG_MS=1`); all four observers start "
              "at the launch and watch the same launch. Same time budget for every tool: %d s "
              "(sglang_ready `timeout: %d`, wait_for `timeout=%d`, uri `retries: %d, delay: 10`). "
              "Median of %d runs. Times are from the launch to the tool's return, so the two "
              "`ansible` peers and `sglang_ready (ansible CLI)` include the ansible CLI start-up; "
              "`sglang_ready` is the module run directly (`helpers.fixtures.run_module`). "
              "Ratios are peer time / sglang_ready (ansible CLI) time, same launches."
              % (budget, budget, budget, data["retries"], runs))
    md.append("")
    md.append("![readiness](%sbench_readiness.png)" % fig_prefix)
    md.append("")
    md.append(C.md_table(header, table))
    md.append("")
    md.append("What the launches did (median over the runs, seconds after launch):")
    md.append("")
    md.append(C.md_table(["scenario", "ready line in this launch's log", "crash (fatal line or exit)",
                          "bind error", "ready line printed by the new launch"], facts_rows))
    md.append("")
    md.append("Notes: in *stale server* the failed launch may still print the ready line (its warmup "
              "talks to the old server, as in real SGLang), which is why `wait_for` on the new log "
              "says ready. The *oom* crash is placed ~5 s after launch with "
              "`SGLANG_EMULATOR_PHASE_SECONDS=%.2f` (three phases before the memory pool); the measured "
              "crash time is in the table above." % OOM_PHASE)
    md.append("")
    md.append("**Latency targets** (sglang_ready alone on its launch - no other observer starting at "
              "the same time, though the peers of the earlier crash/hang launches were still polling in "
              "the background; %d runs each). "
              "Ready: module return time minus the ready line's own log timestamp. Crash: module "
              "return time minus the moment the bench saw the fatal line or the exit (10 ms polling)." % runs)
    md.append("")
    md.append(C.md_table(["scenario", "time to verdict (median)", "after ready line / crash (median)",
                          "each run", "verdict"], qrows))
    if crash_at is not None:
        md.append("")
        md.append("oom crash happened %s after launch (median)." % C.fmt_s(crash_at))
    return {"title": "Readiness verdicts", "markdown": "\n".join(md), "targets": targets, "figures": [fig]}
