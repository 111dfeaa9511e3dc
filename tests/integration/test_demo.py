"""`make demo` (scripts/demo.sh) as an operator sees it, with its own directories and port:
the summary's first line, the log path printed right after the launch (before the readiness
wait's output), the report path at the end; and the report the demo wrote, opened in headless
Chromium: every host's startup timeline drawn, no console error.

The demo runs once for this file (four playbook runs, about a minute or more on a loaded
machine); both tests read its output.
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import Dict, List

import pytest

from helpers.fixtures import ROOT, free_port
from helpers import browser
from test_report_browser import browser_tools  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http

DEMO = os.path.join(ROOT, "scripts", "demo.sh")
# a task banner, its title without the role prefix (the restart's steps may come from the thin roles)
TASK = re.compile(r"^TASK \[(?:[\w.]+ : )?(.*)\] \**$")
LAUNCH_TASK = "Launch the new server, once the old one is stopped and proven gone (one call)"
READY_TASK = "Wait until the server is ready"


def _env(demo_dir: str, port: int, report_dir: str) -> Dict[str, str]:
    env = dict(os.environ, LLMOPS_DEMO_DIR=demo_dir, LLMOPS_DEMO_PORT=str(port), LLMOPS_DEMO_REPORT_DIR=report_dir,
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    # what an operator's shell gets by default: ansible.cfg's callback, no verbosity, live progress
    for key in ("ANSIBLE_CONFIG", "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_RESULT_FORMAT", "ANSIBLE_VERBOSITY",
                "LLMOPS_SGLANG_PROGRESS"):
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    base = tmp_path_factory.mktemp("demo")
    demo_dir, report_dir, port = str(base / "demo"), str(base / "report"), free_port()
    env = _env(demo_dir, port, report_dir)
    run = None
    try:
        run = subprocess.run(["bash", DEMO], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
                             stdin=subprocess.DEVNULL, check=False)
        names = dict(line.split("=", 1) for line in subprocess.run(
            ["bash", DEMO, "--env"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
            check=True).stdout.splitlines())
        yield {"run": run, "out": run.stdout + run.stderr, "port": port, "report_dir": report_dir, **names}
    finally:
        # the demo tears its server down itself (step 4, or its error path); this only covers a
        # demo killed by the timeout above or one that failed and left its server or its launch
        # record (a playbook run less when the demo ended well and left nothing). Same instance,
        # same lock: nothing else is touched.
        if not _left_nothing(run, demo_dir, port):
            _teardown(env, demo_dir, port)


def _left_nothing(run, demo_dir: str, port: int) -> bool:
    """The demo ran to its end, no launch record (`demo-<8 hex>.json`, scripts/demo.sh's instance) is
    left in its state dir, nothing serves on its port."""
    state = os.path.join(demo_dir, "state")
    records = [n for n in (os.listdir(state) if os.path.isdir(state) else []) if re.match(r"demo-[0-9a-f]{8}\.json$", n)]
    return (run is not None and run.returncode == 0 and not records
            and _http.request("127.0.0.1", port, "/health", timeout=2).status is None)


def _teardown(env: Dict[str, str], demo_dir: str, port: int) -> None:
    down = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i",
                           os.path.join(ROOT, "inventory", "local.yml"), os.path.join(ROOT, "playbooks", "teardown.yml"),
                           "-e", "sglang_demo_dir=%s" % demo_dir, "-e", "sglang_port=%d" % port],
                          cwd=ROOT, env=dict(env, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def _first_run(out: str) -> List[str]:
    """Run 1's ansible output (step 1/4 up to step 2/4), line by line."""
    start = out.index("==> 1/4 ")
    return out[start:out.index("==> 2/4 ", start)].splitlines()


def _report_path(demo) -> str:
    """The demo's last line on stdout (stderr carries ansible's warnings): the report's path."""
    last = demo["run"].stdout.rstrip().splitlines()[-1]
    assert last.startswith("restart report: "), demo["out"][-2000:]
    return last[len("restart report: "):].strip()


def _summary_phases(lines: List[str]) -> List[str]:
    """The phases of run 1's 'startup timeline:' summary line (YAML may wrap it)."""
    text = " ".join(line.strip() for line in lines)
    m = re.search(r"startup timeline: (.*?) verify:", text)
    assert m, text[-3000:]
    return [re.sub(r" \+[\d.]+s$", "", step.strip()) for step in m.group(1).split(",")]


# The report's file name is sglang_report_name, whose default calls now(): evaluated again for
# the HTML, the Markdown and the printed path, they differ as soon as the tasks cross a second
# (always on a loaded machine): the printed path does not exist. Not strict: on a fast machine
# the three can fall in one second. This marker goes with the role change that names the report
# once (a set_fact of the name before the two templates and the message).


def test_demo_shows_where_the_host_stands_the_log_early_and_the_report(demo):
    out = demo["out"]
    assert demo["run"].returncode == 0, out[-6000:]
    lines = _first_run(out)
    name = demo["name"]

    # the summary's first line: where the host stands (in run 1 and again in the demo's closing lines)
    heads = [line for line in lines if "%s on localhost: " % name in line]
    assert heads and heads[0].strip().strip("-'\" ") == "%s on localhost: serving NEW config" % name, heads
    assert "where the host stood after run 1: %s on localhost: serving NEW config" % name in out

    # the log path, printed right after the launch task: before the readiness wait shows anything
    banners = [(i, TASK.match(line).group(1)) for i, line in enumerate(lines) if TASK.match(line)]
    launch = [i for i, task in banners if task == LAUNCH_TASK]
    ready = [i for i, task in banners if task.startswith(READY_TASK)]
    assert len(launch) == 1 and len(ready) == 1, "\n".join(lines)
    early = min(i for i, line in enumerate(lines) if "tail -f " in line)
    assert launch[0] < early <= ready[0], "\n".join(lines)  # the readiness wait's title names it
    assert "changed: [localhost]" in lines[launch[0] + 1:early]
    # the wait's own lines ('localhost <name>: ... ready in 5s') come after the launch and before
    # the ready task's verdict; the demo's ansible.cfg (display_skipped_hosts = false) makes
    # Ansible print that task's banner with its verdict, after them (docs/limits.md)
    waits = [i for i, line in enumerate(lines) if line.startswith("localhost %s: " % name) and i > launch[0]]
    assert waits and max(waits) < ready[0] + 2 and lines[ready[0] + 1].startswith("ok: "), "\n".join(lines)
    log_path = re.search(r"tail -f (\S+?)\)?\]? ", lines[early] + " ").group(1)
    assert log_path.startswith(demo["log_dir"] + "/") and os.path.isfile(log_path), log_path
    assert "The server is fired up and ready to roll!" in open(log_path, encoding="utf-8", errors="replace").read()

    # the report path, printed at the end; the file is this demo's report
    report = _report_path(demo)
    assert os.path.dirname(report) == demo["report_dir"] and report.endswith(".html"), report
    assert os.path.isfile(report) and os.path.isfile(report[:-len(".html")] + ".md")

    # and nothing is left serving: the demo's step 4 tore it down
    assert _http.request("127.0.0.1", demo["port"], "/health", timeout=2).status is None


def test_demo_report_renders_in_headless_chromium(demo, browser_tools, tmp_path):  # noqa: F811
    out = demo["out"]
    assert demo["run"].returncode == 0, out[-6000:]
    report = _report_path(demo)
    phases = _summary_phases(_first_run(out))
    with browser.opened(report, height=700) as (page, errors):
        rows = page.locator("#summary tbody tr")
        assert rows.count() == 1 and rows.nth(0).get_attribute("data-host") == "localhost"
        assert rows.nth(0).locator("td").nth(2).inner_text() == "serving NEW config"
        sections = page.locator("section.host")
        assert sections.count() == rows.count()
        for i in range(sections.count()):
            svg = sections.nth(i).locator("div.timeline svg")
            assert svg.count() == 1
            # one bar per phase of the summary's timeline, labelled with it, drawn with real width
            bars = svg.locator("rect")
            assert bars.count() == len(phases), phases
            labels = [(svg.locator("text").nth(2 * k).text_content() or "").strip() for k in range(len(phases))]
            assert labels == phases
            boxes = [bars.nth(k).bounding_box() for k in range(bars.count())]
            assert all(box is not None and box["width"] >= 2 and box["height"] > 0 for box in boxes), boxes
            # the bars tile the chart from launch to ready: 640 px wide less the labels and margin
            assert sum(box["width"] for box in boxes) >= 400, boxes
        shot = os.environ.get("LLMOPS_DEMO_REPORT_SCREENSHOT") or str(tmp_path / "demo-report.png")
        page.screenshot(path=shot, full_page=True)
        assert os.path.getsize(shot) > 10000
    assert errors == []
