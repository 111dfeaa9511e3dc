"""The restart_summary / restart_state filters: the role's result is read as it is; step results
in the older shape (plan, teardown, launch, ready, rollback, failed_task: the report's synthetic
rows, a playbook of one's own) are judged by the same state machine (test_restart_outcome.py
holds the table of outcomes)."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.filter.restart_outcome import restart_outcome
from ansible_collections.llmops.sglang.plugins.filter.restart_summary import host_state, restart_summary

PLAN = {"changed": True, "reason": "config_changed", "record": {"pid": 100, "log_path": "/l/old.log"},
        "changes": [{"key": "args"}]}
TD = {"changed": True, "targets": [{"pid": 100}],
      "killed": [{"pid": 100, "name": "python3", "signal": "SIGTERM"},
                 {"pid": 101, "name": "sglang::scheduler", "signal": "SIGTERM"}],
      "shm_removed": [], "timings": {"plan": 0.1, "term": 0.4}}
LAUNCH = {"changed": True, "pid": 200, "log_path": "/l/new.log",
          "record": {"sglang_version": "0.5.23", "interpreter": "/v/bin/python"}}
READY = {"ready": True, "elapsed": 3.0, "since_launch": 3.2, "server_version": "0.5.23", "log_path": "/l/new.log",
         "timeline": [{"phase": "weight load begin", "seconds": 1.0}, {"phase": "ready", "seconds": 3.2}]}


def test_the_roles_result_is_read_as_it_is():
    result = restart_outcome({"name": "ex", "host": "gpu-1", "plan": PLAN, "launch": dict(LAUNCH, teardown=TD),
                              "ready": READY, "live": {"ready": True, "pid": 200}})
    assert restart_summary(result) == result["summary"] and host_state(result) == "serving NEW config"


def test_older_step_results_get_the_same_verdicts():
    new = {"name": "ex", "host": "gpu-1", "plan": PLAN, "teardown": TD, "launch": LAUNCH, "ready": READY,
           "verified": "dump written"}
    lines = restart_summary(new)
    assert lines[0] == "ex on gpu-1: serving NEW config"
    assert "stopped: 2 processes (python3 x1, sglang::scheduler x1; 2 by SIGTERM) in 0.5 s, 0 files removed" in lines
    assert "verify: dump written" in lines and lines[-1] == "log: tail -f /l/new.log"
    crashed = dict(new, ready={"ready": False, "reason": "fatal_log"}, failed_task="Wait until the server is ready")
    assert host_state(crashed) == "DOWN (no server)" and "ready: NO (fatal_log)" in restart_summary(crashed)
    back = dict(crashed, rollback={"attempted": True, "rolled_back": True, "pid": 300})
    assert host_state(back) == "serving OLD config (rolled back)"
    assert host_state(dict(crashed, rollback={"attempted": True, "rolled_back": False})) == \
        "DOWN (no server: the rollback failed too)"
    assert host_state({"plan": dict(PLAN, changed=False, reason="running"), "ready": READY}).startswith(
        "serving (unchanged")
    assert host_state({"check_mode": True, "plan": PLAN}) == "check mode: would restart"
