"""Fleet: playbooks/restart_extraction.yml wall time for 1, 8 and 32 hosts.

The hosts are local-connection aliases (h01..hNN) in a generated inventory: each has its own
emulator port, state dir, log dir and dump dir, and its own server. **tp 1** per host (32 hosts
x 8 ranks would be 384 processes on a 2-core machine; the per-host playbook work does not depend
on tp). `sglang_serial` is set to 100 % so that every host restarts at once, limited by the
configured forks (ansible.cfg: 16); the playbook's default rolling restart (serial 1) would take
about N times the one-host time. Each size is one fresh run (nothing running before; three runs
for 1 host, the reference), followed by playbooks/teardown.yml, also timed (the 32-host run alone
takes over two minutes here).
"""
from __future__ import annotations

import configparser
import json
import os
import time
from typing import Any, Dict, List, Optional

import common as C
from bench_restart import recap


def playbook(pb: str, extra: Dict[str, Any], more: Optional[List[str]] = None, inventory: Optional[str] = None
             ) -> Dict[str, Any]:
    """One ansible-playbook run with `extra` as an extra-vars file: rc, wall, the recap."""
    ev = C.path("fleet", "ev-%s.json" % time.time())
    with open(ev, "w") as fh:
        json.dump(extra, fh)
    argv = [C.ANSIBLE_PLAYBOOK, "-i", inventory or os.path.join(C.ROOT, "inventory", "local.yml"),
            os.path.join(C.ROOT, "playbooks", pb), "-e", "@" + ev] + (more or [])
    rc, wall, out = C.run_timed(argv, timeout=600)
    with open(C.path("fleet", "out-%s-%d.log" % (pb, int(time.time() * 1000))), "w") as fh:
        fh.write(out)
    return {"rc": rc, "wall": wall, "recap": recap(out), "tail": out[-1500:] if rc else ""}


def forks() -> int:
    cp = configparser.ConfigParser()
    cp.read(os.path.join(C.ROOT, "ansible.cfg"))
    return cp.getint("defaults", "forks", fallback=5)


def inventory(n: int) -> str:
    base = C.mkdir("fleet", "n%d" % n)
    lines = ["---", "all:", "  children:", "    bench_fleet:", "      hosts:"]
    for i in range(1, n + 1):
        h = "h%02d" % i
        lines += [
            "        %s:" % h,
            "          sglang_port: %d" % C.free_port(),
            "          sglang_state_dir: %s/%s/state" % (base, h),
            "          sglang_log_dir: %s/%s/logs" % (base, h),
            "          sglang_extraction_dump_dir: %s/fleet-n%d-%s" % (C.SHM_ROOT, n, h),
        ]
    lines += [
        "      vars:",
        "        ansible_connection: local",
        "        ansible_python_interpreter: %s" % C.CTL_PY,
        "        sglang_name: bench-fleet",
        "        sglang_venv: %s" % C.EMU_VENV,
        "        sglang_model_path: %s" % os.path.join(C.ROOT, "inventory", "files", "demo-model"),
        "        sglang_host: 127.0.0.1",
        "        sglang_tp_size: 1",
        "        sglang_keep_logs: 2",
        "        sglang_startup_timeout: 300",
        "        sglang_stop_grace_period: 5",
        "        sglang_stop_timeout: 30",
        "        sglang_gpu_backend: none",
        "        sglang_managed_gpus: []",
        "        sglang_foreign_gpu_processes: fail",
        "        sglang_sweep_sglang_processes: false",
        "        sglang_extraction_min_free_gib: 1",
        "        sglang_env:",
        '          SGLANG_EMULATOR_PHASE_SECONDS: "0.3"',
        "          no_proxy: 127.0.0.1,localhost",
        "          %s: %s" % (C.fixtures.TEST_MARKER, C.RUN_ID),
    ]
    p = os.path.join(base, "inventory.yml")
    with open(p, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return p


def run(quick: bool = False) -> Dict[str, Any]:
    sizes = [1, 4] if quick else [1, 8, 32]
    os.makedirs(C.SHM_ROOT, exist_ok=True)  # the dump dirs' parent (the role runs df on it)
    out = []
    one_host_runs = 1 if quick else 3  # the reference for "vs 1 host": median of 3
    for n in sizes:
        inv = inventory(n)
        common = {"sglang_hosts": "bench_fleet", "sglang_serial": "100%"}
        for k in range(one_host_runs if n == 1 else 1):
            r = playbook("restart_extraction.yml", common, inventory=inv)
            td = playbook("teardown.yml", dict(common, sglang_purge_dumps_on_teardown=True), inventory=inv)
            out.append({"hosts": n, "wall": r["wall"], "rc": r["rc"], "tail": r["tail"],
                        "teardown_wall": td["wall"], "teardown_rc": td["rc"]})
            C.log("fleet: %d hosts restart %.1f s rc=%d, teardown %.1f s rc=%d" % (
                n, r["wall"], r["rc"], td["wall"], td["rc"]))
    return {"sizes": sizes, "forks": forks(), "rows": _merge(out)}


def _merge(out: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per size: medians over the runs of that size (the 1-host size has 3)."""
    rows = []
    for n in sorted(set(r["hosts"] for r in out)):
        sel = [r for r in out if r["hosts"] == n]
        rows.append({"hosts": n, "runs": len(sel), "wall": C.median(r["wall"] for r in sel),
                     "each": [r["wall"] for r in sel], "rc": max(r["rc"] for r in sel),
                     "tail": next((r["tail"] for r in sel if r["rc"]), ""),
                     "teardown_wall": C.median(r["teardown_wall"] for r in sel),
                     "teardown_rc": max(r["teardown_rc"] for r in sel)})
    return rows


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    rows = data["rows"]
    one = next((r["wall"] for r in rows if r["hosts"] == 1), None)
    table = []
    for r in rows:
        per_host = r["wall"] / r["hosts"]
        extra = "-" if r["hosts"] == 1 or one is None else C.fmt_s((r["wall"] - one) / (r["hosts"] - 1), 2)
        table.append(["%d (%s)" % (r["hosts"], "median of %d: %s" % (r["runs"], ", ".join(C.fmt_s(x, 1) for x in r["each"]))
                                   if r.get("runs", 1) > 1 else "1 run"), C.fmt_s(r["wall"], 1), C.fmt_s(per_host, 2), extra,
                      "%.1fx" % (r["wall"] / one) if one else "-",
                      "ok" if r["rc"] == 0 else "rc=%d" % r["rc"], C.fmt_s(r["teardown_wall"], 1)])
    plt = C.plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    hs = [r["hosts"] for r in rows]
    a1.plot(hs, [r["wall"] for r in rows], "o-", label="restart_extraction.yml")
    a1.plot(hs, [r["teardown_wall"] for r in rows], "s--", label="teardown.yml")
    if one:
        a1.plot(hs, [one * h for h in hs], ":", color="grey", label="1-host time x N (serial 1)")
    a1.set_xlabel("hosts")
    a1.set_ylabel("wall time (s)")
    a1.set_yscale("log")
    a1.legend(fontsize=7)
    a1.set_title("Playbook wall time (tp 1, forks %d)" % data["forks"], fontsize=10)
    a2.bar([str(h) for h in hs], [r["wall"] / r["hosts"] for r in rows], color="#1f77b4")
    a2.set_xlabel("hosts")
    a2.set_ylabel("seconds per host")
    a2.set_title("Per-host overhead (wall / hosts)", fontsize=10)
    fig.tight_layout()
    figp = os.path.join(fig_dir, fig_prefix + "bench_fleet.png")
    fig.savefig(figp, dpi=110)
    plt.close(fig)
    last = rows[-1] if rows else None
    targets = [{"target": "restart_extraction.yml succeeds on %d local hosts at once" % (last["hosts"] if last else 0),
                "met": bool(last) and last["rc"] == 0,
                "value": "%s for %d hosts (%s per host; 1 host: %s)" % (
                    C.fmt_s(last["wall"], 1), last["hosts"], C.fmt_s(last["wall"] / last["hosts"], 2), C.fmt_s(one, 1))
                if last else "-"}]
    md = ["Generated inventory of local-connection aliases, each host its own emulator (**tp 1**, "
          "phase 0.3 s), port, state/log/dump dirs; `sglang_serial: 100%%`, forks %d (ansible.cfg). "
          "One fresh run per size (three for 1 host, the reference), each followed by `teardown.yml`. All hosts share this machine's 2 cores, so "
          "the per-host figure is an upper bound of the controller cost per host."
          % data["forks"], "", "![fleet](%sbench_fleet.png)" % fig_prefix, "",
          C.md_table(["hosts", "restart wall", "per host", "marginal per extra host", "vs 1 host", "result",
                      "teardown.yml wall"], table)]
    fails = [r for r in rows if r["rc"] != 0]
    if fails:
        md += ["", "Failed run (tail):\n\n```\n%s\n```" % fails[0]["tail"]]
    return {"title": "Fleet (1, 8, 32 hosts)", "markdown": "\n".join(md), "targets": targets, "figures": [figp]}
