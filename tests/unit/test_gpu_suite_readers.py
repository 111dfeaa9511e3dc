"""The GPU suite's readers of a restart's task results (issue 34): since the teardown runs inside
the replacement's sglang_launch call, `R3.gpus_after` (tests/gpu/validate.py) and the prewarm
playbook's downtime_s / teardown_s (tests/gpu/prewarm_playbook.py) read the teardown there. The
task results below have the shape the suite's callback records for a forced restart through
restart_extraction.yml (the plan's check-mode launch first, then the launch that tears down)."""
from __future__ import annotations

import os
import sys

import pytest

GPU_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu")


@pytest.fixture
def suite(monkeypatch):
    """validate.py and prewarm_playbook.py, imported as run.sh runs them (their dir on sys.path);
    the environment defaults they set at import are undone after the test."""
    monkeypatch.syspath_prepend(GPU_DIR)
    saved = dict(os.environ)
    for name in ("validate", "prewarm_playbook", "containment_prewarm"):
        sys.modules.pop(name, None)
    import prewarm_playbook
    import validate
    yield validate, prewarm_playbook
    os.environ.clear()
    os.environ.update(saved)


TEARDOWN = {"killed": [{"pid": 4242, "signal": "SIGTERM"}], "survivors": [], "changed": True,
            "gpus_after": [{"index": 0, "processes": [], "memory_used_mib": 0}],
            "timings": {"plan": 0.05, "term_wait": 0.4, "verify": 0.15}}


def forced_restart():
    plan_td = {"targets": [{"pid": 4242}], "would_kill": [4242]}   # check mode: nothing killed
    return [
        {"action": "llmops.sglang.sglang_launch", "status": "ok", "task": "sglang_launch : Plan the restart",
         "task_start": 100.0, "time": 101.0, "result": {"changed": True, "teardown": plan_td}},
        {"action": "llmops.sglang.sglang_prewarm", "status": "ok", "task": "Warm the new weights",
         "task_start": 101.0, "time": 104.0, "result": {"changed": True, "seconds": 3.0}},
        {"action": "llmops.sglang.sglang_launch", "status": "ok",
         "task": "sglang_launch : Launch the new server, once the old one is stopped and proven gone (one call)",
         "task_start": 104.5, "time": 106.0, "result": {"changed": True, "pid": 5151, "teardown": TEARDOWN}},
        {"action": "llmops.sglang.sglang_ready", "status": "ok", "task": "sglang_ready : Wait until ready",
         "task_start": 106.0, "time": 115.5, "result": {"ready": True}},
    ]


def test_r3_reads_the_teardown_inside_the_launch_call(suite):
    validate, _pp = suite
    td = validate.restart_teardown(forced_restart())
    assert td["gpus_after"] == TEARDOWN["gpus_after"] and td["killed"] == TEARDOWN["killed"]
    assert td["_task"]["task_start"] == 104.5            # the launch that tore down, not the plan


def test_a_teardown_task_of_its_own_is_still_read(suite):
    validate, _pp = suite
    own = [{"action": "llmops.sglang.sglang_teardown", "status": "ok", "task": "Tear down",
            "task_start": 50.0, "time": 52.0, "result": dict(TEARDOWN)}]
    assert validate.restart_teardown(own)["gpus_after"] == TEARDOWN["gpus_after"]
    assert validate.restart_teardown([]) == {}


def test_prewarm_playbook_downtime_and_teardown_are_figures_not_null(suite):
    _v, pp = suite
    fig = pp.figures({"rc": 0, "seconds": 16.0, "stats": {}, "results": forced_restart()})
    assert fig["downtime_s"] == 11.0                     # launch task start (104.5) to ready's end (115.5)
    assert fig["teardown_s"] == 0.6                      # the teardown's own phases
    assert fig["ready_task_s"] == 9.5 and fig["prewarm"]["task_s"] == 3.0
