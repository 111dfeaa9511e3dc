"""The restart report: rendered on the controller from every host's step results, HTML with an
inline-SVG timeline per host (checked in a real headless Chromium) and a Markdown twin."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Dict

from helpers.fixtures import ROOT

RESTARTED = {"name": "extraction", "host": "gpu-1",
             "plan": {"changed": True, "reason": "config_changed", "record": {"pid": 100}},
             "teardown": {"changed": True, "targets": [{"pid": 100}], "killed": [{"pid": 100, "name": "python3", "signal": "SIGTERM"}],
                          "timings": {"plan": 0.1, "term": 0.5}},
             "launch": {"changed": True, "pid": 200, "log_path": "/var/log/sglang/extraction.log"},
             "ready": {"ready": True, "since_launch": 42.5, "log_path": "/var/log/sglang/extraction.log",
                       "timeline": [{"phase": "init distributed", "seconds": 3.0}, {"phase": "weight load begin", "seconds": 4.1},
                                    {"phase": "weight load end", "seconds": 30.2}, {"phase": "cuda graph end", "seconds": 40.0},
                                    {"phase": "ready", "seconds": 42.5}]},
             "verified": "dump file written"}
CRASHED = {"name": "extraction", "host": "gpu-2", "failed_task": "Wait until the server is ready",
           "plan": {"changed": True, "reason": "config_changed", "record": {"pid": 101}},
           "teardown": {"changed": True, "targets": [{"pid": 101}], "killed": [], "timings": {"plan": 0.1}},
           "launch": {"changed": True, "pid": 201},
           "ready": {"ready": False, "reason": "fatal_log", "timeline": [{"phase": "weight load begin", "seconds": 4.0}],
                     "decisive_lines": ["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory <&>"]}}


def render(tmp_path) -> Dict[str, str]:
    results = tmp_path / "results"
    results.mkdir()
    (results / "gpu-1.json").write_text(json.dumps(RESTARTED))
    (results / "gpu-2.json").write_text(json.dumps(CRASHED))
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpus]\ngpu-1\ngpu-2\ngpu-3\n[gpus:vars]\nansible_connection=local\n"
                   "ansible_python_interpreter=%s\n" % os.path.join(ROOT, ".venv", "bin", "python"))
    out_dir = tmp_path / "report"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", str(inv),
                          os.path.join(ROOT, "tests", "integration", "playbooks", "report_synthetic.yml"),
                          "-e", "results_dir=%s" % results, "-e", "sglang_report_dir=%s" % out_dir],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                         check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "restart report: %s/report.html" % out_dir in run.stdout
    return {"html": str(out_dir / "report.html"), "md": str(out_dir / "report.md")}


def test_report_has_every_host_and_escapes_log_lines(tmp_path) -> None:
    paths = render(tmp_path)
    html = open(paths["html"]).read()
    assert html.count("<svg") == 2
    assert "serving NEW config" in html and "DOWN (no server)" in html
    assert "no result from this run (the host never reached the restart)" in html  # gpu-3
    assert "CUDA out of memory &lt;&amp;&gt;" in html and "<&>" not in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    md = open(paths["md"]).read()
    assert "| gpu-1 | extraction | serving NEW config | 100 | 200 | 43.1 s | dump file written |" in md
    assert "torch.OutOfMemoryError" in md
