"""hosts_failed: a restart failure counts only when this run reported it (a persistent fact
cache hands the next run the last run's facts)."""
from __future__ import annotations

import os

from ansible_collections.llmops.sglang.plugins.filter.hosts_failed import failed_now, hosts_failed
from ansible_collections.llmops.sglang.plugins.plugin_utils._operation_lock import run_id

NOW, BEFORE = "ctl:100:5000", "ctl:99:4000"


def _facts(failed, run):
    return {"ansible_facts": {"sglang_restart_failed": failed, "sglang_restart_result": {"run": run, "failed": failed}}}


HOSTVARS = {
    "w1": _facts(True, NOW),        # failed in this run
    "w2": _facts(True, BEFORE),     # failed in an earlier run, kept by the fact cache
    "w3": _facts(False, NOW),       # restarted fine in this run
    "w4": {"ansible_facts": {}},    # never restarted
    "w5": {"ansible_facts": {"sglang_restart_failed": True}},  # a result without a run (an older collection)
    "w6": _facts(True, NOW),
}


def test_only_this_runs_failures_count_in_the_lists_order():
    assert hosts_failed(["w6", "w5", "w4", "w3", "w2", "w1", "w6", "gone"], HOSTVARS, run=NOW) == ["w6", "w1"]


def test_an_earlier_runs_failure_is_not_this_runs():
    assert hosts_failed(["w2"], HOSTVARS, run=NOW) == []
    assert hosts_failed(["w2"], HOSTVARS, run=BEFORE) == ["w2"]


def test_facts_that_are_not_a_restart_result_say_nothing():
    assert not failed_now(None, NOW) and not failed_now({"sglang_restart_failed": True,
                                                          "sglang_restart_result": "x"}, NOW)


def test_the_run_is_this_process_and_its_start():
    node, pid, start = run_id().split(":")
    assert node == os.uname().nodename and int(pid) == os.getpid() and start.isdigit()
    assert run_id() == run_id()
