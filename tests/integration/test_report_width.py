"""The restart report of a rolled-back host, rendered by the report role and laid out by a real
headless Chromium at 1400 px (issue finding 5): the row is amber, not a success's green, its
downtime is over, the serving pid is the rollback's, and a long verify cell wraps inside the
page instead of widening it."""
from __future__ import annotations

import json
import os
import re
import subprocess

from helpers.fixtures import ROOT

CHROMIUM = "/usr/bin/chromium"
LONG = "serving: POST /v1/chat/completions -> 200, reasoning_content set: " + " ".join(["/models/Qwen3-8B"] * 40)
ROLLED_BACK = {
    "name": "serving", "host": "gpu-1", "state": "rolled_back", "head": "serving OLD config (rolled back)",
    "summary": ["serving on gpu-1: serving OLD config (rolled back)"], "failed": True, "reason": "fatal_log",
    "cause": "the launched process 200 exited: Not enough memory",
    "at": "2026-12-02 14:00:00", "serving_pid": 300, "verified": LONG,
    "plan": {"changed": True, "reason": "config_changed", "record": {"pid": 100},
             "changes": [{"key": "args.--mem-fraction-static", "before": 0.5, "after": 0.6}]},
    "teardown": {"changed": True, "targets": [{"pid": 100}], "timings": {"term": 0.5}},
    "launch": {"changed": True, "pid": 200, "log_path": "/l/new.log"},
    "ready": {"ready": False, "reason": "fatal_log", "since_launch": 6.0, "timeline": []},
    "rollback": {"attempted": True, "rolled_back": True, "pid": 300, "since_launch": 4.0},
}


def _render(tmp_path) -> str:
    results = tmp_path / "results"
    results.mkdir()
    (results / "gpu-1.json").write_text(json.dumps(ROLLED_BACK))
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpus]\ngpu-1\n[gpus:vars]\nansible_connection=local\nansible_python_interpreter=%s\n"
                   % os.path.join(ROOT, ".venv", "bin", "python"))
    out_dir = tmp_path / "report"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", str(inv),
                          os.path.join(ROOT, "tests", "integration", "playbooks", "report_synthetic.yml"),
                          "-e", "results_dir=%s" % results, "-e", "sglang_report_dir=%s" % out_dir],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                         check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return str(out_dir / "report.html")


def _laid_out_width(html_path: str, tmp_path) -> int:
    """The page's scroll width in Chromium at a 1400 px window (a copy of the page that writes it
    into the DOM once laid out)."""
    probe = tmp_path / "probe.html"
    probe.write_text(open(html_path).read().replace(
        "</body>", "<script>window.addEventListener('load', () => document.body.setAttribute("
                   "'data-width', document.documentElement.scrollWidth))</script></body>"))
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--window-size=1400,900", "--dump-dom",
                          "file://%s" % probe], capture_output=True, text=True, timeout=120, check=False).stdout
    found = re.search(r'data-width="(\d+)"', dom)
    assert found, dom[-2000:]
    return int(found.group(1))


def test_a_rolled_back_host_is_amber_and_its_row_fits_1400_px(tmp_path) -> None:
    html_path = _render(tmp_path)
    html = open(html_path).read()
    row = html[html.index('<tr data-host="gpu-1"'):html.index("</tr>", html.index('<tr data-host="gpu-1"'))]
    assert 'data-status="warn"' in row and 'class="state warn"' in row, row
    assert "ongoing" not in row and "10.5 s" in row, row  # teardown 0.5 + failed start 6.0 + rollback 4.0
    assert "<td>300</td>" in row and "2026-12-02 14:00:00" in row and "args.--mem-fraction-static" in row, row
    assert _laid_out_width(html_path, tmp_path) <= 1400
