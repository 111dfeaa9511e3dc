"""sglang_launch's decision as a table: facts in, decision out, in-process (no process, file or
socket is touched by _launch_plan.decide).

Each row is one situation the module meets - first launch, stale record, running, config changed,
unresponsive, port busy (an sglang server of ours, a foreign holder, the instance itself), busy
cgroup, failed preflight - once in check mode and once for real.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._launch._launch_plan import (
    LAUNCH, NOOP, REFUSE, RELAUNCH, Facts, decide)

PORT = 8000
INPUTS = {"interpreter": "/venv/bin/python", "model_path": "/models/m", "port": PORT,
          "args": {"--reasoning-parser": "kimi_k2"}, "api_key": "********"}
OLD_INPUTS = dict(INPUTS, args={"--reasoning-parser": "qwen3"})
RECORD = {"name": "serving", "pid": 4242, "start_time": 1.5, "port": PORT, "fingerprint": "fp-new",
          "fingerprint_inputs": INPUTS, "log_path": "/logs/serving.log", "containment": "cgroup",
          "containment_why": "auto", "cgroup": "/sys/fs/cgroup/llmops-sglang.slice/serving", "unit": None}
OURS = {"pid": 4242, "user": "root", "cmdline": ["python", "-m", "sglang.launch_server"], "address": "127.0.0.1",
        "instance": True, "sglang": "this instance", "foreign": False}
SGLANG = {"pid": 5151, "user": "root", "cmdline": ["python", "-m", "sglang.launch_server", "--port", "8000"],
          "address": "127.0.0.1", "instance": False, "sglang": "command line: -m sglang.launch_server",
          "foreign": False}
FOREIGN = {"pid": 700, "user": "alice", "cmdline": ["python3", "-m", "http.server", "8000"], "address": "0.0.0.0",
           "instance": False, "sglang": None, "foreign": True}
HUNG = {"endpoint": "/v1/models", "timeout": 5.0, "answered": False, "status": None, "error": "timed out",
        "state": "T"}
CGROUP = "cgroup /sys/fs/cgroup/llmops-sglang.slice/serving already holds 1 process(es) (pids 99): " \
         "another launch of instance 'serving' is still running"
FOREIGN_ERROR = "port 8000 is held by pid 700 (user alice: python3 -m http.server 8000) [foreign], which is not " \
                "an sglang server of user root: nothing was stopped"


def facts(check_mode: bool, *situations: Dict[str, Any], **kw: Any) -> Facts:
    """The request of INPUTS, in the situations given (later ones win), then `kw`."""
    base: Dict[str, Any] = dict(name="serving", host="127.0.0.1", port=PORT, check_mode=check_mode,
                                fingerprint="fp-new", inputs=INPUTS)
    for situation in situations:
        base.update(situation)
    base.update(kw)
    return Facts(**base)


RUNNING = dict(record=RECORD, running=True, port_state="instance", holders=(OURS,))
CHANGED = dict(RUNNING, record=dict(RECORD, fingerprint="fp-old", fingerprint_inputs=OLD_INPUTS))
STALE = dict(record=dict(RECORD, pid=999999))

# (situation, facts, check mode, action, reason, changed)
TABLE = [
    ("first launch", {}, True, LAUNCH, "new", True),
    ("first launch", {}, False, LAUNCH, "new", True),
    ("stale record", STALE, True, LAUNCH, "not_running", True),
    ("stale record", STALE, False, LAUNCH, "not_running", True),
    ("running", RUNNING, True, NOOP, "running", False),
    ("running", RUNNING, False, NOOP, "running", False),
    ("running, not listening yet", dict(RUNNING, port_state="free", holders=()), True, NOOP, "running", False),
    ("running, another holder too", dict(RUNNING, holders=(OURS, SGLANG)), True, NOOP, "running", False),
    ("running, another holder too", dict(RUNNING, holders=(OURS, SGLANG)), False, NOOP, "running", False),
    ("config changed", CHANGED, True, RELAUNCH, "config_changed", True),
    ("config changed", CHANGED, False, REFUSE, "config_changed", False),
    ("unresponsive", dict(RUNNING, probe=HUNG), True, RELAUNCH, "unresponsive", True),
    ("unresponsive", dict(RUNNING, probe=HUNG), False, REFUSE, "unresponsive", False),
    ("port busy, our sglang", dict(port_state="busy", holders=(SGLANG,)), True, RELAUNCH, "port_busy", True),
    ("port busy, our sglang", dict(port_state="busy", holders=(SGLANG,)), False, REFUSE, "port_busy", False),
    ("port busy, stale record", dict(STALE, port_state="busy", holders=(SGLANG,)), True, RELAUNCH, "port_busy", True),
    ("port busy, foreign, kill", dict(port_state="busy", holders=(FOREIGN,)), True, RELAUNCH, "port_busy", True),
    ("port busy, foreign, kill", dict(port_state="busy", holders=(FOREIGN,)), False, REFUSE, "port_busy", False),
    ("port busy, foreign, fail", dict(port_state="busy", holders=(FOREIGN,), preflight_errors=(FOREIGN_ERROR,),
                                      preflight_reason="port_busy"), True, REFUSE, "port_busy", False),
    ("port busy, foreign, fail", dict(port_state="busy", holders=(FOREIGN,), preflight_errors=(FOREIGN_ERROR,),
                                      preflight_reason="port_busy"), False, REFUSE, "port_busy", False),
    ("cgroup busy", dict(cgroup_problem=CGROUP), True, RELAUNCH, "cgroup_busy", True),
    ("cgroup busy", dict(cgroup_problem=CGROUP), False, REFUSE, "cgroup_busy", False),
    ("preflight failed", dict(preflight_errors=("no space", "no sglang"), fingerprint=None, inputs=None),
     True, REFUSE, "preflight_failed", False),
    ("preflight failed, running", dict(RUNNING, preflight_errors=("tp_size 0",), preflight_reason="preflight_failed"),
     False, REFUSE, "preflight_failed", False),
]


@pytest.mark.parametrize("situation,kw,check_mode,action,reason,changed", TABLE,
                         ids=["%s-%s" % (row[0], "check" if row[2] else "real") for row in TABLE])
def test_decision_table(situation, kw, check_mode, action, reason, changed):
    d = decide(facts(check_mode, kw))
    assert (d.action, d.reason, d.changed) == (action, reason, changed)
    assert d.message
    # A refusal always says why (the task's message); nothing else fails.
    assert (d.failure is not None) == (action == REFUSE)
    # The diff: the requested server after, the running one (if any) before, other holders first.
    assert d.diff["after"] == _text(facts(check_mode, kw).inputs)
    before = kw["record"]["fingerprint_inputs"] if kw.get("running") else None
    others = [h for h in kw.get("holders", ()) if not h["instance"]]
    assert d.diff["before"].endswith(_text(before))
    assert d.diff["before"].count("# port holder: ") == len(others)
    assert list(d.port_holder) == others


def _text(inputs: Optional[Dict[str, Any]]) -> str:
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs
    return _cliargs.inputs_text(inputs)


def test_first_launch_says_would_be_in_check_mode_and_was_for_real():
    assert decide(facts(True)).message == "no launch record: a server would be started"
    assert decide(facts(False)).message == "no launch record: a server was started"
    assert decide(facts(True, STALE)).message == "the recorded server is gone: a server would be started"
    assert decide(facts(True)).diff["before"] == ""


def test_running_reports_the_record_and_warns_about_another_holder():
    quiet = decide(facts(False, RUNNING))
    assert quiet.current == RECORD and quiet.blockers == () and quiet.warnings == ()
    assert quiet.message == "instance 'serving' is running (pid 4242) with the requested configuration: nothing to do"
    shared = decide(facts(False, RUNNING, holders=(OURS, SGLANG)))
    assert shared.blockers == ("port 8000 is also held by %s" % _preflight.describe_holders([SGLANG]),)
    assert shared.warnings == ("instance 'serving' is running but port 8000 is also held by %s"
                               % _preflight.describe_holders([SGLANG]),)


def test_config_changed_lists_each_difference():
    plan = decide(facts(True, CHANGED))
    assert plan.changes == ({"key": "args.--reasoning-parser", "before": "qwen3", "after": "kimi_k2"},)
    assert "'qwen3' -> 'kimi_k2'" in plan.message and plan.current["fingerprint"] == "fp-old"
    assert '"--reasoning-parser": "qwen3"' in plan.diff["before"]
    assert '"--reasoning-parser": "kimi_k2"' in plan.diff["after"]
    real = decide(facts(False, CHANGED))
    assert real.failure == real.message + ("; stop it first with sglang_teardown, or give sglang_launch `teardown` - "
                                           "without it sglang_launch never stops a server")


def test_unresponsive_names_the_stopped_server_and_keeps_the_probe():
    plan = decide(facts(True, RUNNING, probe=HUNG))
    assert plan.probe == HUNG and plan.changes is None
    assert plan.message == ("instance 'serving' (pid 4242, stopped (state T)) runs the requested configuration but "
                            "did not answer /v1/models within 5 s: it must be replaced")
    hung = decide(facts(False, RUNNING, probe=dict(HUNG, state="S", timeout=0.5)))
    assert "(pid 4242)" in hung.message and "within 0.5 s" in hung.message and "sglang_teardown" in hung.failure


def test_port_busy_names_the_holder_and_the_foreign_label_reaches_the_diff():
    plan = decide(facts(True, port_state="busy", holders=(FOREIGN,)))
    text = _preflight.describe_holders([FOREIGN])
    assert text.endswith("[foreign]")
    assert plan.message == "port 8000 on 127.0.0.1 is held by %s" % text
    assert plan.blockers == (plan.message,)
    assert plan.diff["before"] == "# port holder: %s\n" % text
    real = decide(facts(False, port_state="busy", holders=(SGLANG,)))
    assert real.failure.endswith("run sglang_teardown with ports: [8000] or choose another port")


def test_preflight_failure_joins_every_error_and_keeps_the_diff():
    d = decide(facts(True, RUNNING, preflight_errors=("a", "b"), preflight_reason="no_space"))
    assert d.failure == d.message == "preflight failed: a; b" and d.reason == "no_space"
    assert d.current is None and d.blockers == ()
    assert d.diff["before"] == _text(INPUTS)


def test_cgroup_busy_is_the_blocker():
    d = decide(facts(False, cgroup_problem=CGROUP))
    assert d.blockers == (CGROUP,) and d.failure == CGROUP + "; stop it first with sglang_teardown"


# What the executor reads before deciding: only what the decision depends on.
@pytest.mark.parametrize("kw,probe,cgroup", [
    ({}, False, True),
    (STALE, False, True),
    (RUNNING, True, False),
    (dict(RUNNING, port_state="free"), False, False),       # not listening yet: still starting
    (dict(RUNNING, record=dict(RECORD, port=None)), False, False),
    (CHANGED, False, False),
    (dict(port_state="busy"), False, False),
    (dict(preflight_errors=("x",)), False, False),
    (dict(RUNNING, preflight_errors=("x",)), False, False),
])
def test_probe_and_cgroup_are_read_only_when_the_decision_needs_them(kw, probe, cgroup):
    f = facts(True, kw)
    assert (_launch_plan.wants_probe(f), _launch_plan.wants_containment_check(f)) == (probe, cgroup)


def test_record_containment_of_an_old_record():
    assert _launch_plan.record_containment({"record_version": 1})["backend"] == "none"
    assert "predates containment" in _launch_plan.record_containment({"record_version": 1})["why"]
    assert _launch_plan.record_containment(RECORD) == {"backend": "cgroup", "why": "auto", "cgroup": RECORD["cgroup"],
                                                       "unit": None}


def test_outcome_is_the_module_result_of_a_decision():
    base = {"changed": False, "reason": None, "decision": None, "pid": None, "log_path": None, "port_holder": [],
            "blockers": [], "preflight": {}, "containment": {"backend": "none", "why": "", "cgroup": None,
                                                             "unit": None}}
    report = _preflight.Report()
    report.ok("port_free", "port 8000 is held by instance 'serving' itself (pid 4242)")
    shared = decide(facts(True, RUNNING, holders=(OURS, SGLANG)))
    result = _launch_exec.outcome(base, report, shared, diff=False)
    assert result["reason"] == "running" and result["changed"] is False and result["pid"] == 4242
    assert result["record"] == RECORD and result["containment"]["backend"] == "cgroup"
    assert result["preflight"]["warnings"] == list(shared.warnings) and "diff" not in result
    assert "changes" not in result and "probe" not in result and report.warnings == []
    changed = _launch_exec.outcome(base, report, decide(facts(True, CHANGED)), diff=True)
    assert changed["changed"] is True and changed["changes"][0]["key"] == "args.--reasoning-parser"
    assert set(changed["diff"]) == {"before", "after", "before_header", "after_header"}


def test_a_failure_carries_the_result_so_far_with_its_own_reason():
    exc = _launch_exec._carrying(SglangError("server died", reason="died", log_tail="boom"),
                                 {"reason": "new", "changed": True, "preflight": {"errors": []}})
    assert exc.msg == "server died"
    assert exc.details == {"reason": "died", "changed": True, "preflight": {"errors": []}, "log_tail": "boom"}
    assert _launch_exec._carrying(SglangError("odd"), {"reason": None}).details["reason"] == "error"


def test_facts_and_decisions_are_frozen():
    d = decide(facts(True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.action = NOOP  # type: ignore[misc]
