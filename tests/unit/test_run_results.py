"""hosts_failed and run_results: a restart result counts only when this run reported it (a persistent fact
cache hands the next run the last run's facts)."""
from __future__ import annotations

import multiprocessing
import os

from ansible_collections.llmops.sglang.plugins.filter.run_results import failed_now, hosts_failed, run_results, this_run
from ansible_collections.llmops.sglang.plugins.plugin_utils._operation_lock import run_id

NOW, BEFORE = "ctl:100:5000", "ctl:99:4000"


def _facts(failed, run):
    return {"ansible_facts": {"sglang_restart_failed": failed, "sglang_restart_result": {"run": run, "failed": failed}}}


HOSTVARS = {
    "w1": _facts(True, NOW),        # failed in this run
    "w2": _facts(True, BEFORE),     # failed in an earlier run, kept by the fact cache
    "w3": _facts(False, NOW),       # restarted fine in this run
    "w4": {"ansible_facts": {}},    # never restarted
    "w5": {"ansible_facts": {"sglang_restart_failed": True}},  # names no run: set by hand, or an older collection
    "w6": _facts(True, NOW),
}


def test_only_this_runs_failures_count_in_the_lists_order():
    assert hosts_failed(["w6", "w5", "w4", "w3", "w2", "w1", "w6", "gone"], HOSTVARS, run=NOW) == ["w6", "w5", "w1"]


def test_an_earlier_runs_failure_is_not_this_runs():
    assert hosts_failed(["w2"], HOSTVARS, run=NOW) == []
    assert hosts_failed(["w2"], HOSTVARS, run=BEFORE) == ["w2"]


def test_facts_that_are_not_a_restart_result_say_nothing():
    assert not failed_now(None, NOW)
    assert not failed_now({"sglang_restart_failed": True, "sglang_restart_result": "x"}, NOW)
    assert failed_now({"sglang_restart_failed": True}, NOW)  # names no run: taken as it is


def _in_a_worker(queue):
    queue.put(run_id())


def test_the_run_is_this_process_its_start_and_a_nonce_its_forked_workers_share():
    node, pid, start, nonce = run_id().split(":")
    assert node == os.uname().nodename and int(pid) == os.getpid() and start.isdigit() and len(nonce) == 12
    assert run_id() == run_id()
    ctx = multiprocessing.get_context("fork")  # as ansible-playbook starts its workers
    queue = ctx.Queue()
    worker = ctx.Process(target=_in_a_worker, args=(queue,))
    worker.start()
    assert queue.get(timeout=30) == run_id()
    worker.join(30)


def test_this_run_keeps_only_this_runs_result():
    assert this_run({"run": NOW, "head": "x"}, run=NOW) == {"run": NOW, "head": "x"}
    assert this_run({"run": BEFORE, "head": "x"}, run=NOW) == {}
    assert this_run({"head": "by hand"}, run=NOW) == {"head": "by hand"}
    assert this_run(None, run=NOW) == {} and this_run("x", run=NOW) == {}


def test_run_results_keeps_this_runs_results_in_order():
    got = run_results(["w6", "w2", "w4", "w3", "gone"], HOSTVARS, run=NOW)
    assert got == [{"run": NOW, "failed": True}, {"run": NOW, "failed": False}]
    assert run_results(["w2"], HOSTVARS, run=BEFORE) == [{"run": BEFORE, "failed": True}]
    nested = {"h": {"facts": {"r": {"run": NOW, "head": "x"}}}, "i": {"facts": {"r": {"head": "by hand"}}}}
    assert run_results(["h", "i"], nested, fact="facts.r", run=NOW) == [{"run": NOW, "head": "x"}, {"head": "by hand"}]
    assert run_results(["h"], nested, fact="facts.nope", run=NOW) == []
