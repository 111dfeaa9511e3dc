"""Cost growth with the number of processes on the host: sglang_probe (no introspection) and
sglang_teardown target discovery (check mode: nothing is signalled), with 0, 200, 2,000 and
5,000 extra idle `sleep` processes (spawned in one session of this run, killed by process
group). Also: cached introspection (sglang_probe introspect=true, second and later runs).

Both modules run through helpers.fixtures.run_module (python start-up included in "wall").
`floor` is a module that only parses the probe's arguments and exits (python start-up, the
import of ansible.module_utils.basic, AnsibleModule, exit_json): what any module run costs here
before it does anything of its own.
Standalone: `.venv/bin/python benchmarks/bench_probe.py [--quick] [--baseline OTHER_CHECKOUT]`;
with --baseline the same module runs are made from another checkout's collection too (e.g. a
`git worktree` of an older commit), interleaved with this one's on the same idle processes, so
that both figures come from the same machine state. In a private PID namespace, let a shell be
its PID 1 so that the killed sleepers are reaped between sizes:
`unshare --pid --fork --mount-proc bash -c '.venv/bin/python benchmarks/bench_probe.py ...; true'`.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import common as C


def probe_args(state_dir: str, introspect: bool = False) -> Dict[str, Any]:
    return {"venv": C.EMU_VENV, "introspect": introspect, "gpu_backend": "none", "state_dir": state_dir}


def discovery_args(state_dir: str, port: int) -> Dict[str, Any]:
    # check mode: targets are listed, never signalled; the default title sweep is on so that
    # every process's command line is read as well.
    return {"name": "bench-none", "state_dir": state_dir, "ports": [port], "gpus": [], "gpu_backend": "none",
            "shm_dir": C.mkdir("probe", "shm")}


def _child_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def timed(fn) -> Dict[str, Any]:
    """Wall time and CPU time (user + system of the module's process, which the wait accounts
    to this one): on a shared machine the CPU time says what the run cost, the wall time what
    it took."""
    t0, c0 = time.time(), _child_cpu()
    r = fn()
    return {"wall": time.time() - t0, "cpu": _child_cpu() - c0, "failed": bool(r.get("failed")),
            "msg": r.get("msg", ""), "r": r}


# Parses the probe's arguments (the spec's size matters little) and exits: the cost of any module run.
FLOOR_MODULE = """
from ansible.module_utils.basic import AnsibleModule
AnsibleModule(argument_spec=dict(venv=dict(type="path"), introspect=dict(type="bool"), gpu_backend=dict(),
                                 state_dir=dict(type="path")), supports_check_mode=True).exit_json(changed=False)
"""


def floor(state_dir: str) -> Dict[str, Any]:
    """The floor module's run, the way run_module runs one (an args file, JSON on stdout)."""
    folder = C.mkdir("probe", "floor")
    module = os.path.join(folder, "floor_module.py")
    with open(module, "w", encoding="utf-8") as fh:
        fh.write(FLOOR_MODULE)
    payload = dict(probe_args(state_dir), _ansible_check_mode=False, _ansible_diff=False)
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=folder, delete=False) as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": payload}, fh)

    def run_it() -> Dict[str, Any]:
        proc = subprocess.run([C.fixtures.controller_python(), module, fh.name], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, check=False)
        return {"failed": proc.returncode != 0, "msg": proc.stderr[-200:]}
    try:
        return timed(run_it)
    finally:
        os.unlink(fh.name)


def _env(tree: Optional[str]) -> Optional[Dict[str, str]]:
    """The environment that runs the modules from another checkout's collection."""
    return {"PYTHONPATH": os.path.join(os.path.abspath(tree), "collections")} if tree else None


def _pair(state_dir: str, port: int, tree: Optional[str]) -> Dict[str, Any]:
    env = _env(tree)
    p = timed(lambda: C.run_module("sglang_probe", probe_args(state_dir), env=env))
    d = timed(lambda: C.run_module("sglang_teardown", discovery_args(state_dir, port), check_mode=True, env=env))
    return {"probe": p["wall"], "probe_cpu": p["cpu"], "discovery_cpu": d["cpu"],
            "probe_failed": p["failed"], "probe_msg": p["msg"][:200], "discovery": d["wall"],
            "discovery_failed": d["failed"], "discovery_msg": d["msg"][:200],
            "discovery_plan": (d["r"].get("timings") or {}).get("plan"),
            "discovery_targets": len(d["r"].get("targets") or [])}


def run(quick: bool = False, baseline: Optional[str] = None, sizes: Optional[List[int]] = None,
        runs: Optional[int] = None, introspection: bool = True) -> Dict[str, Any]:
    runs = runs or (1 if quick else 5)
    sizes = sizes if sizes is not None else ([0, 200, 2000] if quick else [0, 200, 2000, 5000])
    state_dir = C.mkdir("probe", "state")
    port = C.free_port()
    growth = []
    for n in sizes:
        group = None
        t0 = time.time()
        if n:
            group = C.spawn_sleepers(n)
        spawn_s = time.time() - t0
        total = len(os.listdir("/proc"))
        try:
            for i in range(runs):
                # the baseline first on odd runs, second on even ones: neither always runs warm
                order = [(None, ""), (baseline, "base_")] if i % 2 == 0 else [(baseline, "base_"), (None, "")]
                row: Dict[str, Any] = {"extra": n, "i": i, "procs_on_host": total}
                for tree, prefix in order:
                    if prefix and not baseline:
                        continue
                    row.update({prefix + k: v for k, v in _pair(state_dir, port, tree).items()})
                row["floor"] = floor(state_dir)["wall"]
                growth.append(row)
                C.log("probe: +%d procs #%d module floor %.2f s" % (n, i, row["floor"]))
                for prefix in ([""] + (["base_"] if baseline else [])):
                    C.log("probe: +%d procs #%d %sprobe %.2f s (cpu %.2f s), discovery %.2f s (cpu %.2f s, plan %s) %s" % (
                        n, i, "baseline " if prefix else "", row[prefix + "probe"], row[prefix + "probe_cpu"],
                        row[prefix + "discovery"], row[prefix + "discovery_cpu"], row[prefix + "discovery_plan"],
                        (row[prefix + "probe_msg"] if row[prefix + "probe_failed"] else
                         row[prefix + "discovery_msg"] if row[prefix + "discovery_failed"] else "")[:150]))
        finally:
            if group is not None:
                try:
                    os.killpg(group.pid, signal.SIGKILL)
                except OSError:
                    pass
                group.wait()
                # the sleeps are reaped by init: wait until the group is gone before measuring on
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and any(
                        p.pgid == group.pid for p in C._procs.snapshot().values()):
                    time.sleep(0.1)
        growth[-1]["spawn_s"] = spawn_s
    # cached introspection: the first run fills the cache; then pairs of probe runs without and
    # with introspect=true (cache warm) give the marginal wall cost of a cached introspection.
    intro = []
    for i in range((1 + max(runs, 5) if not quick else 2) if introspection else 0):
        base = timed(lambda: C.run_module("sglang_probe", probe_args(state_dir))) if i else None
        t = timed(lambda: C.run_module("sglang_probe", probe_args(state_dir, introspect=True)))
        info = t["r"].get("introspection") or {}
        intro.append({"i": i, "wall": t["wall"], "base_wall": base["wall"] if base else None,
                      "cached": info.get("cached"), "seconds": info.get("seconds"),
                      "flags": len(t["r"].get("flags") or {}), "failed": t["failed"], "msg": t["msg"][:200]})
        C.log("probe: introspect #%d wall %.2f s (without: %s) cached=%s seconds=%s flags=%d" % (
            i, t["wall"], C.fmt_s(intro[-1]["base_wall"]), info.get("cached"), info.get("seconds"), intro[-1]["flags"]))
    return {"runs": runs, "sizes": sizes, "growth": growth, "introspection": intro, "baseline": baseline}


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    g, sizes = data["growth"], data["sizes"]
    rows, pm, dm = [], [], []
    for n in sizes:
        sel = [r for r in g if r["extra"] == n]
        p, d = C.median(r["probe"] for r in sel), C.median(r["discovery"] for r in sel)
        plan = C.median(r.get("discovery_plan") for r in sel)
        pm.append(p)
        dm.append(d)
        fails = [r["probe_msg"] or r["discovery_msg"] for r in sel if r["probe_failed"] or r["discovery_failed"]]
        rows.append(["+%d" % n, sel[0]["procs_on_host"] if sel else "-", C.fmt_s(C.median(r.get("floor") for r in sel)),
                     C.fmt_s(p),
                     C.fmt_s(C.median(r.get("probe_cpu") for r in sel)), C.fmt_s(d),
                     C.fmt_s(C.median(r.get("discovery_cpu") for r in sel)), C.fmt_s(plan),
                     ("failed: " + fails[0][:90]) if fails else "ok"])
    cached = [r for r in data["introspection"] if r.get("cached")]
    c_int = C.median(r["seconds"] for r in cached)
    c_wall = C.median(r["wall"] for r in cached)
    c_marg = C.median((r["wall"] - r["base_wall"]) for r in cached if r.get("base_wall") is not None)
    first = data["introspection"][0] if data["introspection"] else {"wall": None}
    p2000 = next((p for n, p in zip(sizes, pm) if n == 2000), None)
    plt = C.plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(sizes, pm, "o-", label="sglang_probe (no introspection)")
    ax.plot(sizes, dm, "s-", label="sglang_teardown discovery (check mode)")
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.text(sizes[-1], 0.52, "0.5 s target (probe at 2,000)", fontsize=7, color="grey", ha="right")
    ax.set_xlabel("extra idle processes on the host")
    ax.set_ylabel("wall time, median (s)")
    ax.set_ylim(0, max([x for x in pm + dm if x] + [1.2]) * 1.15)
    ax.set_title("Cost growth with the process count", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    figp = os.path.join(fig_dir, fig_prefix + "bench_probe.png")
    fig.savefig(figp, dpi=110)
    plt.close(fig)
    targets = [
        {"target": "Cached introspection under 0.3 s",
         "met": c_marg is not None and c_marg < 0.3 and c_int is not None and c_int < 0.3,
         "value": "%s added to a probe run by introspect=true with a warm cache (median of %d pairs; "
                  "%s measured inside the module; whole probe run %s; cold first run %s)"
                  % (C.fmt_s(c_marg, 3), len(cached), C.fmt_s(c_int, 3), C.fmt_s(c_wall), C.fmt_s(first["wall"]))},
        {"target": "sglang_probe under 0.5 s with 2,000 extra processes",
         "met": p2000 is not None and p2000 < 0.5,
         "value": "%s wall (module run included; a module that only parses its arguments: %s)" % (
             C.fmt_s(p2000), C.fmt_s(C.median(r.get("floor") for r in g if r["extra"] == 2000)))},
    ]
    md = ["Median of %d runs per size. `wall` is the whole module run (python start-up included); "
          "`cpu` is the user and system time of the module's process and what it started (the "
          "interpreter's answer), which a busy shared machine inflates far less than the wall time; "
          "`plan` is the teardown module's own target-selection time. The baseline (+0) is this "
          "shared machine as it was (its process count is in the table)." % data["runs"], "",
          "![cost growth](%sbench_probe.png)" % fig_prefix, "",
          C.md_table(["extra processes", "processes on the host", "module floor wall", "sglang_probe wall",
                      "sglang_probe cpu",
                      "teardown discovery wall", "teardown discovery cpu", "teardown plan (in module)", "result"],
                     rows), "",
          "Introspection (`introspect: true`): run 0 fills the cache (imports the emulator's "
          "`sglang`); each later run is paired with a probe run without introspection just before it.", "",
          C.md_table(["introspection run", "wall with introspect", "wall without", "added by introspection",
                      "cached", "seconds inside the module", "flags"],
                     [[r["i"], C.fmt_s(r["wall"]), C.fmt_s(r.get("base_wall")),
                       C.fmt_s(r["wall"] - r["base_wall"], 3) if r.get("base_wall") is not None else "-",
                       r["cached"], C.fmt_s(r["seconds"], 3), r["flags"]]
                      for r in data["introspection"]])]
    return {"title": "Cost growth (probe, discovery, introspection cache)", "markdown": "\n".join(md),
            "targets": targets, "figures": [figp]}


def comparison(data: Dict[str, Any]) -> str:
    """Medians per size, this checkout beside the baseline's (when there is one)."""
    base = bool(data.get("baseline"))
    keys = [("probe", "sglang_probe wall"), ("probe_cpu", "sglang_probe cpu"),
            ("discovery", "teardown discovery wall"), ("discovery_cpu", "teardown discovery cpu"),
            ("discovery_plan", "teardown plan (in module)")]
    head = ["extra processes", "processes on the host", "module floor wall"]
    for _key, title in keys:
        head += ([title + " (baseline)"] if base else []) + [title]
    rows = []
    for n in data["sizes"]:
        sel = [r for r in data["growth"] if r["extra"] == n]
        row = ["+%d" % n, sel[0]["procs_on_host"] if sel else "-", C.fmt_s(C.median(r.get("floor") for r in sel))]
        for key, _title in keys:
            for k in (["base_" + key] if base else []) + [key]:
                row.append(C.fmt_s(C.median(r.get(k) for r in sel)))
        rows.append(row)
    return C.md_table(head, rows)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="+0/+200/+2000, one run each")
    parser.add_argument("--runs", type=int, help="runs per size (default 5, --quick 1)")
    parser.add_argument("--sizes", help="comma list of extra process counts (default 0,200,2000,5000)")
    parser.add_argument("--baseline", help="another checkout (its collections/ dir is used) measured alongside")
    parser.add_argument("--no-introspection", action="store_true", help="skip the cached-introspection runs")
    opts = parser.parse_args(argv)
    sizes = [int(x) for x in opts.sizes.split(",")] if opts.sizes else None
    started = time.time()
    data = run(opts.quick, opts.baseline, sizes, opts.runs, not opts.no_introspection)
    print("\nCost growth, median of %d runs per size, %s, load average at the end %s, %.0f s:\n"
          % (data["runs"], C.machine().get("cpu", ""), "/".join("%.2f" % x for x in os.getloadavg()),
             time.time() - started))
    print(comparison(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
