"""The restart report's row of a host (plugins/filter/restart_report.py), from the restart's
result as the state machine leaves it: a rolled-back host is not shown as a success, its
downtime is over, the pid that serves is the rollback's, and the row says when it was checked
and what changed (issue finding 5)."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.filter.restart_report import restart_report_row
from ansible_collections.llmops.sglang.plugins.module_utils._restart._restart_outcome import restart_outcome

GOOD = {"path": "/s/ex.good.json", "launch_id": "g1", "fingerprint": "f0", "error": None}
PLAN = {"changed": True, "reason": "config_changed", "record": {"pid": 100}, "last_good": GOOD,
        "changes": [{"key": "args.--mem-fraction-static", "before": 0.5, "after": 0.6}]}
TD = {"changed": True, "targets": [{"pid": 100}], "killed": [{"pid": 100, "name": "python3", "signal": "SIGTERM"}],
      "survivors": [], "timings": {"term": 0.5}}
LAUNCH = {"changed": True, "pid": 200, "teardown": TD, "log_path": "/l/new.log", "record": {"pid": 200}}
CRASH = {"ready": False, "failed": True, "reason": "fatal_log", "pid": 200, "since_launch": 6.0,
         "msg": "the launched process 200 exited; its log says: RuntimeError: Not enough memory"}
BACK = {"launch": {"changed": True, "pid": 300, "log_path": "/l/back.log"},
        "ready": {"ready": True, "pid": 300, "since_launch": 4.0, "start_seconds": 3.5}}


def _result(**extra):
    data = dict({"name": "ex", "host": "gpu-1", "verify": "serving", "plan": PLAN, "launch": LAUNCH}, **extra)
    out = restart_outcome(data)
    out["at"] = "2026-12-02 14:00:00"  # the action plugin adds the time of the check
    return out


def test_a_rolled_back_host_is_amber_served_by_the_rollbacks_pid_and_not_down():
    row = restart_report_row(_result(ready=CRASH, rollback=BACK, live={"ready": True, "pid": 300}))
    assert row["state"] == "serving OLD config (rolled back)"
    assert row["status"] == "warn" and not row["ok"]  # never the green of a success
    assert row["serving_pid"] == 300 and row["new_pid"] == 200 and row["old_pid"] == 100
    assert not row["down"] and row["downtime_s"] == 10.5  # teardown 0.5 + failed start 6.0 + rollback 4.0
    assert row["at"] == "2026-12-02 14:00:00" and row["changes"] == "args.--mem-fraction-static"
    assert "Not enough memory" in row["cause"]


def test_a_replaced_host_is_green_and_a_down_one_red_with_its_downtime_ongoing():
    ok = restart_report_row(_result(ready={"ready": True, "pid": 200, "since_launch": 9.0, "start_seconds": 8.0},
                                    live={"ready": True, "pid": 200}))
    assert ok["status"] == "ok" and ok["serving_pid"] == 200 and ok["downtime_s"] == 9.5
    down = restart_report_row(_result(ready=CRASH, rollback_enabled=False,
                                      live={"ready": False, "reason": "exited", "msg": "gone"}))
    assert down["status"] == "bad" and down["down"] and down["downtime_s"] is None and down["serving_pid"] is None


def test_a_refusal_with_the_old_server_untouched_is_amber_and_serves_the_old_pid():
    refused = {"failed": True, "reason": "preflight_failed", "msg": "preflight failed",
               "preflight": {"errors": ["--x: unknown"]}}
    row = restart_report_row(_result(plan=refused, launch=refused, live={"ready": True, "pid": 100}))
    assert row["status"] == "warn" and row["serving_pid"] == 100 and not row["down"]
