"""Fleet: playbooks/restart_extraction.yml for 1, 8, 32 and 64 simulated hosts, and the
controller's CPU per host.

The hosts are local-connection aliases (h01..hNN) in a generated inventory. Each is a separate
SGLang host as far as the collection can tell: its own instance name (`bench-fleet-hNN`, hence
its own cgroup, lock, record and marker), emulator port, state dir, log dir and dump dir. A real
fleet never has two hosts sharing an instance; the previous version of this benchmark gave every
alias the same name, so their cgroups and records collided and the 8- and 32-host runs failed.

**tp 1** per host (32 hosts x 8 ranks would be 384 processes on a 2-core machine; the per-host
playbook work does not depend on tp). `sglang_serial: 100%` so that every host restarts at once,
limited by the configured forks. Per size, in one run: a fresh start, a converged re-run
(changed=0 expected), a forced restart (`sglang_force`), then playbooks/teardown.yml.

The controller's CPU is the CPU time of the `ansible-playbook` process tree (getrusage of the
waited-for children: the playbook, its forks, and - with the local connection - the modules they
run; the launched servers are not in it: they leave the tree at their spawn). A run that fails is
reported as a failure and publishes no figure.
"""
from __future__ import annotations

import configparser
import json
import os
import re
import resource
import shlex
import time
from typing import Any, Dict, List, Optional, Tuple

import common as C


def recaps(text: str) -> Dict[str, Dict[str, int]]:
    """PLAY RECAP's counters per host (the last recap in `text`)."""
    tail = text.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in text else ""
    return {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
            for m in re.finditer(r"^(\S+)\s*:\s*(ok=.*)$", tail, re.M)}


def meter(base: str) -> Tuple[str, str]:
    """An interpreter wrapper that logs the CPU of each module it runs (bash `times` after the
    module's python exits): with the local connection the modules are children of the playbook's
    forks, but on a real fleet they run on the managed host, so they are subtracted."""
    log = os.path.join(base, "module-cpu.log")
    wrapper = os.path.join(base, "python-meter")
    with open(wrapper, "w") as fh:
        fh.write("#!/bin/bash\n%s \"$@\"\nrc=$?\ntimes >> %s\nexit $rc\n"
                 % (shlex.quote(C.CTL_PY), shlex.quote(log)))
    os.chmod(wrapper, 0o755)
    return wrapper, log


def module_cpu(log: str) -> float:
    """Seconds the metered modules used since the last call (the log is emptied)."""
    total = 0.0
    if os.path.exists(log):
        with open(log) as fh:
            for line in fh.readlines()[1::2]:  # `times`: the shell's line, then its children's
                for m, sec in re.findall(r"(\d+)m([\d.]+)s", line):
                    total += int(m) * 60 + float(sec)
        os.unlink(log)
    return total


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def playbook(pb: str, extra: Dict[str, Any], more: Optional[List[str]] = None, inventory: Optional[str] = None,
             timeout: int = 900) -> Dict[str, Any]:
    """One ansible-playbook run with `extra` as an extra-vars file: rc, wall, the recap."""
    ev = C.path("fleet", "ev-%s.json" % time.time())
    with open(ev, "w") as fh:
        json.dump(extra, fh)
    argv = [C.ANSIBLE_PLAYBOOK, "-i", inventory or os.path.join(C.ROOT, "inventory", "local.yml"),
            os.path.join(C.ROOT, "playbooks", pb), "-e", "@" + ev] + (more or [])
    cpu0 = _children_cpu()
    rc, wall, out = C.run_timed(argv, timeout=timeout)
    cpu = _children_cpu() - cpu0
    with open(C.path("fleet", "out-%s-%d.log" % (pb, int(time.time() * 1000))), "w") as fh:
        fh.write(out)
    return {"rc": rc, "wall": wall, "cpu": cpu, "recap": recaps(out), "tail": out[-1500:] if rc else ""}


def forks() -> int:
    cp = configparser.ConfigParser()
    cp.read(os.path.join(C.ROOT, "ansible.cfg"))
    return cp.getint("defaults", "forks", fallback=5)


def distinct_ports(n: int) -> List[int]:
    """n free ports, no two alike: the kernel may hand the same free port out twice in a row."""
    ports: List[int] = []
    while len(ports) < n:
        p = C.free_port()
        if p not in ports:
            ports.append(p)
    return ports


def host_vars(n: int, base: str) -> Dict[str, Dict[str, Any]]:
    """Per simulated host: everything that makes it a separate host to the collection."""
    hosts = {}
    ports = distinct_ports(n)
    for i in range(1, n + 1):
        h = "h%02d" % i
        hosts[h] = {"sglang_name": "bench-fleet-%s" % h, "sglang_port": ports[i - 1],
                    "sglang_state_dir": "%s/%s/state" % (base, h), "sglang_log_dir": "%s/%s/logs" % (base, h),
                    "sglang_extraction_dump_dir": "%s/fleet-n%d-%s" % (C.SHM_ROOT, n, h)}
    return hosts


def inventory(n: int) -> str:
    base = C.mkdir("fleet", "n%d" % n)
    wrapper = meter(base)[0]
    lines = ["---", "all:", "  children:", "    bench_fleet:", "      hosts:"]
    for h, hv in host_vars(n, base).items():
        lines.append("        %s:" % h)
        lines += ["          %s: %s" % (k, v) for k, v in hv.items()]
    lines += [
        "      vars:",
        "        ansible_connection: local",
        "        ansible_python_interpreter: %s" % wrapper,
        "        sglang_venv: %s" % C.EMU_VENV,
        "        sglang_model_path: %s" % os.path.join(C.ROOT, "inventory", "files", "demo-model"),
        "        sglang_host: 127.0.0.1",
        "        sglang_tp_size: 1",
        "        sglang_keep_logs: 2",
        "        sglang_startup_timeout: 300",
        "        sglang_grace_period: 5",
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


def sizes_asked(quick: bool) -> List[int]:
    """1, 8, 32, 64 hosts (1 and 4 quick); LLMOPS_BENCH_FLEET_SIZES=1,8 runs those only."""
    env = os.environ.get("LLMOPS_BENCH_FLEET_SIZES")
    if env:
        return [int(x) for x in env.split(",") if x.strip()]
    return [1, 4] if quick else [1, 8, 32, 64]


ONE_TASK = """---
- name: One task
  hosts: bench_fleet
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def one_task(rounds: int) -> Dict[str, Any]:
    """A converged restart_extraction.yml against one running server next to a playbook of one task
    (ping) on the same host, interleaved: wall and CPU of the whole ansible-playbook tree (the
    modules included: the local connection runs both playbooks' modules on this machine)."""
    inv = inventory(1)
    book = C.path("fleet", "one_task.yml")
    with open(book, "w") as fh:
        fh.write(ONE_TASK)
    common = {"sglang_hosts": "bench_fleet", "sglang_serial": "100%"}
    out: Dict[str, Any] = {"rounds": rounds, "converged": [], "one_task": []}
    out["fresh"] = playbook("restart_extraction.yml", common, inventory=inv)
    if not out["fresh"]["rc"]:
        for _round in range(rounds):
            out["converged"].append(playbook("restart_extraction.yml", common, inventory=inv))
            out["one_task"].append(playbook(book, common, inventory=inv))
    out["teardown"] = playbook("teardown.yml", dict(common, sglang_purge_dumps_on_teardown=True), inventory=inv)
    C.log("fleet: one task vs converged: %s" % json.dumps(_one_task_figures(out)))
    return out


def _one_task_figures(data: Optional[Dict[str, Any]]) -> Optional[Dict[str, float]]:
    """Medians and ratios, or None when any run failed or a converged run changed something."""
    if not data or data["fresh"]["rc"] or data["teardown"]["rc"] or not data["converged"]:
        return None
    runs = data["converged"] + data["one_task"]
    if any(r["rc"] for r in runs) or any(h.get("changed", 0) for r in data["converged"] for h in r["recap"].values()):
        return None
    fig = {"%s_%s" % (k, m): C.median(r[m] for r in data[k]) for k in ("converged", "one_task") for m in ("wall", "cpu")}
    fig["ratio_wall"] = fig["converged_wall"] / fig["one_task_wall"]
    fig["ratio_cpu"] = fig["converged_cpu"] / fig["one_task_cpu"]
    return fig


def run(quick: bool = False) -> Dict[str, Any]:
    sizes = sizes_asked(quick)
    os.makedirs(C.SHM_ROOT, exist_ok=True)  # the dump dirs' parent (the role runs df on it)
    rows = []
    for n in sizes:
        inv = inventory(n)
        common = {"sglang_hosts": "bench_fleet", "sglang_serial": "100%"}
        row: Dict[str, Any] = {"hosts": n}
        for phase, extra in (("fresh", {}), ("converged", {}), ("forced", {"sglang_force": True})):
            module_cpu(os.path.join(os.path.dirname(inv), "module-cpu.log"))
            r = playbook("restart_extraction.yml", dict(common, **extra), inventory=inv, timeout=600 + 30 * n)
            r["modules_cpu"] = module_cpu(os.path.join(os.path.dirname(inv), "module-cpu.log"))
            r["controller_cpu"] = max(0.0, r["cpu"] - r["modules_cpu"])
            row[phase] = r
            C.log("fleet: %d hosts %s %.1f s cpu %.1f s (modules %.1f s) rc=%d changed=%d" % (
                n, phase, r["wall"], r["cpu"], r["modules_cpu"], r["rc"], sum(h.get("changed", 0) for h in r["recap"].values())))
            if r["rc"]:
                break
        row["teardown"] = playbook("teardown.yml", dict(common, sglang_purge_dumps_on_teardown=True), inventory=inv,
                                   timeout=600 + 30 * n)
        rows.append(row)
        # what ran so far survives a run cut short (the report of a full run comes from run_all)
        C.save_json("fleet-partial", {"sizes": sizes, "forks": forks(), "rows": rows})
    # LLMOPS_BENCH_FLEET_ONE_TASK=0 leaves the comparison out
    rounds = int(os.environ.get("LLMOPS_BENCH_FLEET_ONE_TASK", "2" if quick else "5"))
    return {"sizes": sizes, "forks": forks(), "rows": rows, "one_task": one_task(rounds) if rounds > 0 else None}


def _ok(row: Dict[str, Any]) -> bool:
    """Green: every phase ran with rc 0 and the converged run changed nothing on any host."""
    phases = [row.get(p) for p in ("fresh", "converged", "forced")]
    if any(p is None or p["rc"] for p in phases) or row["teardown"]["rc"]:
        return False
    conv = row["converged"]["recap"]
    return len(conv) == row["hosts"] and all(h.get("changed", 0) == 0 for h in conv.values())


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    rows = data["rows"]
    green = [r for r in rows if _ok(r)]
    failed = [r for r in rows if not _ok(r)]
    table = []
    for r in green:
        n = r["hosts"]
        table.append([str(n), C.fmt_s(r["fresh"]["wall"], 1), C.fmt_s(r["converged"]["wall"], 1),
                      C.fmt_s(r["forced"]["wall"], 1), C.fmt_s(r["converged"]["controller_cpu"] / n, 2),
                      C.fmt_s(r["forced"]["controller_cpu"] / n, 2), C.fmt_s(r["converged"]["modules_cpu"] / n, 2),
                      C.fmt_s(r["forced"]["modules_cpu"] / n, 2), C.fmt_s(r["teardown"]["wall"], 1)])
    plt = C.plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    hs = [r["hosts"] for r in green]
    for phase, style in (("forced", "o-"), ("converged", "s--")):
        a1.plot(hs, [r[phase]["wall"] for r in green], style, label="%s run" % phase)
        a2.plot(hs, [r[phase]["controller_cpu"] / r["hosts"] for r in green], style, label="%s run" % phase)
    a1.set_xlabel("hosts")
    a1.set_ylabel("wall time (s)")
    a1.legend(fontsize=7)
    a1.set_title("restart_extraction.yml wall (tp 1, forks %d)" % data["forks"], fontsize=10)
    a2.set_xlabel("hosts")
    a2.set_ylabel("CPU seconds per host")
    a2.legend(fontsize=7)
    a2.set_title("controller CPU per host (modules excluded)", fontsize=10)
    fig.tight_layout()
    figp = os.path.join(fig_dir, fig_prefix + "bench_fleet.png")
    fig.savefig(figp, dpi=110)
    plt.close(fig)
    by_n = {r["hosts"]: r for r in green}
    r32 = by_n.get(32)
    targets = [
        {"target": "32 simulated hosts restart green (serial 100%) and converge green on a second run",
         "met": r32 is not None, "value": "green" if r32 else "failed or not run"},
        {"target": "controller CPU per host at 32 hosts: converged <= 1.0 s",
         "met": bool(r32) and r32["converged"]["controller_cpu"] / 32 <= 1.0,
         "value": C.fmt_s(r32["converged"]["controller_cpu"] / 32, 2) if r32 else "-"},
        {"target": "controller CPU per host at 32 hosts: forced restart <= 2.0 s",
         "met": bool(r32) and r32["forced"]["controller_cpu"] / 32 <= 2.0,
         "value": C.fmt_s(r32["forced"]["controller_cpu"] / 32, 2) if r32 else "-"},
    ]
    md = ["Generated inventory of local-connection aliases; each host its own instance name, emulator "
          "(**tp 1**, phase 0.3 s), port, state/log/dump dirs; `sglang_serial: 100%%`, forks %d (ansible.cfg). "
          "Per size, in one run: a fresh start, a converged re-run, a forced restart (`sglang_force`), then "
          "`teardown.yml`. Controller CPU is the `ansible-playbook` process tree's (the playbook, its forks, the "
          "action plugins) minus the modules' own processes, which the local connection runs as its children "
          "but a real fleet runs on the managed hosts (measured apart through a metering interpreter wrapper, "
          "shown as module CPU); the servers are in neither. All hosts share this machine's 2 cores, "
          "so wall times are upper bounds; the CPU per host is what one controller pays per host."
          % data["forks"], "", "![fleet](%sbench_fleet.png)" % fig_prefix, "",
          C.md_table(["hosts", "fresh start wall", "converged wall", "forced restart wall",
                      "controller CPU per host, converged", "controller CPU per host, forced",
                      "module CPU per host, converged", "module CPU per host, forced", "teardown.yml wall"], table)]
    one = data.get("one_task")
    fig = _one_task_figures(one)
    if fig:
        md += ["", "One host, a converged run of `restart_extraction.yml` (its server running: changed=0) next to a "
               "playbook of one task (`ansible.builtin.ping`) on the same host, %d rounds interleaved, medians of the "
               "whole `ansible-playbook` tree (modules included, both on this machine): converged %s wall, %s CPU; "
               "one task %s wall, %s CPU; converged / one task **%.2fx** wall, %.2fx CPU."
               % (one["rounds"], C.fmt_s(fig["converged_wall"], 2), C.fmt_s(fig["converged_cpu"], 2),
                  C.fmt_s(fig["one_task_wall"], 2), C.fmt_s(fig["one_task_cpu"], 2), fig["ratio_wall"], fig["ratio_cpu"])]
    elif one:
        md += ["", "**One host, converged run vs one task: FAILED** (a run failed or the converged run changed "
               "something); no figure is published for it."]
    if one is not None:
        targets.append({"target": "a converged run of restart_extraction.yml costs at most 2.0x a one-task playbook "
                                  "(median wall, one host)",
                        "met": bool(fig) and fig["ratio_wall"] <= 2.0,
                        "value": "%.2fx (%s vs %s)" % (fig["ratio_wall"], C.fmt_s(fig["converged_wall"], 2),
                                                       C.fmt_s(fig["one_task_wall"], 2)) if fig else "failed"})
    for r in failed:
        phase = next((p for p in ("fresh", "converged", "forced") if r.get(p) is None or r[p]["rc"]), "teardown")
        detail = r.get(phase) or r["teardown"]
        md += ["", "**%d hosts: FAILED** at the %s run (rc=%s); no figure is published for it. Tail:\n\n```\n%s\n```"
               % (r["hosts"], phase, detail["rc"] if detail else "-", (detail or {}).get("tail", "")[-1200:])]
    return {"title": "Fleet (%s hosts)" % ", ".join(str(r["hosts"]) for r in rows), "markdown": "\n".join(md), "targets": targets, "figures": [figp]}
