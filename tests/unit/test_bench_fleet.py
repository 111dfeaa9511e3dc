"""benchmarks/bench_fleet.py: the simulated fleet is a fleet (no two hosts share an instance) and a
failed run is reported as a failure, never as a figure."""
from __future__ import annotations

import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_fleet  # noqa: E402

SEPARATE = ("sglang_name", "sglang_port", "sglang_state_dir", "sglang_log_dir", "sglang_extraction_dump_dir")


def test_no_two_simulated_hosts_share_an_instance(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_fleet.C, "BENCH_ROOT", str(tmp_path))
    with open(bench_fleet.inventory(32)) as fh:
        inv = yaml.safe_load(fh)
    group = inv["all"]["children"]["bench_fleet"]
    hosts = group["hosts"]
    assert len(hosts) == 32
    for key in SEPARATE:
        assert key not in group["vars"], "%s is set for the whole group" % key
        values = [hv[key] for hv in hosts.values()]
        assert len(set(values)) == 32, "%s is shared by simulated hosts" % key


def _run(rc: int = 0, changed: int = 0, hosts: int = 2, cpu: float = 2.0):
    return {"rc": rc, "wall": 10.0, "cpu": cpu, "controller_cpu": cpu / 2, "modules_cpu": cpu / 2, "tail": "boom" if rc else "",
            "recap": {"h%02d" % i: {"ok": 5, "changed": changed} for i in range(1, hosts + 1)}}


def test_a_failed_size_is_a_failure_and_no_figure(tmp_path):
    good = {"hosts": 2, "fresh": _run(changed=1), "converged": _run(), "forced": _run(changed=1), "teardown": _run()}
    failed = {"hosts": 32, "fresh": _run(changed=1), "converged": _run(rc=2, hosts=32), "teardown": _run()}
    not_converged = {"hosts": 8, "fresh": _run(changed=1, hosts=8), "converged": _run(changed=1, hosts=8),
                     "forced": _run(hosts=8), "teardown": _run()}
    out = bench_fleet.report({"forks": 16, "rows": [good, not_converged, failed]}, str(tmp_path))
    table_rows = [line for line in out["markdown"].splitlines() if line.startswith("| ") and "hosts" not in line and "---" not in line]
    assert [line.split("|")[1].strip() for line in table_rows] == ["2"]
    assert "**32 hosts: FAILED** at the converged run (rc=2)" in out["markdown"]
    assert "**8 hosts: FAILED**" in out["markdown"]
    assert not any(t["met"] for t in out["targets"])


def test_the_meter_counts_what_a_module_costs_and_keeps_its_exit_code(tmp_path):
    import subprocess
    wrapper, log = bench_fleet.meter(str(tmp_path))
    burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nsys.exit(3)"
    assert subprocess.run([wrapper, "-c", burn], check=False).returncode == 3
    spent = bench_fleet.module_cpu(log)
    assert 0.3 <= spent < 5.0
    assert bench_fleet.module_cpu(log) == 0.0


def test_the_one_task_comparison_is_a_figure_only_when_every_run_is_green(tmp_path):
    green = {"rounds": 2, "fresh": _run(changed=1, hosts=1), "teardown": _run(hosts=1),
             "converged": [dict(_run(hosts=1), wall=3.0, cpu=3.0), dict(_run(hosts=1), wall=4.0, cpu=3.2)],
             "one_task": [dict(_run(hosts=1), wall=1.0, cpu=1.0), dict(_run(hosts=1), wall=2.0, cpu=1.0)]}
    fig = bench_fleet._one_task_figures(green)
    assert fig["ratio_wall"] == 3.5 / 1.5 and fig["ratio_cpu"] == 3.1
    good = {"hosts": 2, "fresh": _run(changed=1), "converged": _run(), "forced": _run(changed=1), "teardown": _run()}
    out = bench_fleet.report({"forks": 16, "rows": [good], "one_task": green}, str(tmp_path))
    row = [t for t in out["targets"] if "one-task" in t["target"]][0]
    assert not row["met"] and row["value"].startswith("2.33x")
    changed = dict(green, converged=[_run(hosts=1, changed=1)] * 2)
    assert bench_fleet._one_task_figures(changed) is None
    assert bench_fleet._one_task_figures(dict(green, one_task=[_run(rc=2, hosts=1)] * 2)) is None
    out = bench_fleet.report({"forks": 16, "rows": [good], "one_task": changed}, str(tmp_path))
    assert "converged run vs one task: FAILED" in out["markdown"]
    assert not [t for t in out["targets"] if "one-task" in t["target"]][0]["met"]
