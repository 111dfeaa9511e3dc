"""The restart summary: its first line says where the host stands, for every way a restart ends."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.filter.restart_summary import host_state, restart_summary

PLAN_RUNNING = {"changed": True, "reason": "config_changed", "record": {"pid": 100, "log_path": "/l/old.log"},
                "changes": [{"key": "args"}]}
TD = {"changed": True, "targets": [{"pid": 100}],
      "killed": [{"pid": 100, "name": "python3", "signal": "SIGTERM"},
                 {"pid": 101, "name": "sglang::scheduler", "signal": "SIGTERM"}],
      "shm_removed": [], "timings": {"plan": 0.1, "term": 0.4}}
LAUNCH = {"changed": True, "pid": 200, "log_path": "/l/new.log", "record": {"sglang_version": "0.5.23", "interpreter": "/v/bin/python"}}
READY = {"ready": True, "elapsed": 3.0, "since_launch": 3.2, "server_version": "0.5.23", "log_path": "/l/new.log",
         "timeline": [{"phase": "weight load begin", "seconds": 1.0}, {"phase": "ready", "seconds": 3.2}]}


def test_new_config_serving() -> None:
    lines = restart_summary({"name": "ex", "host": "gpu-1", "plan": PLAN_RUNNING, "teardown": TD,
                             "launch": LAUNCH, "ready": READY, "verified": "dump written"})
    assert lines[0] == "ex on gpu-1: serving NEW config"
    assert "plan: config_changed; changes: args" in lines
    assert "stopped: 2 processes (python3 x1, sglang::scheduler x1; 2 by SIGTERM) in 0.5 s, 0 files removed" in lines
    assert "launch: pid 200, sglang 0.5.23 from /v/bin/python" in lines
    assert "startup timeline: weight load begin +1.0s, ready +3.2s" in lines
    assert lines[-1] == "log: tail -f /l/new.log"


def test_unchanged() -> None:
    assert host_state({"plan": {"changed": False, "record": {"pid": 5}}, "teardown": {"skipped": True},
                       "launch": {"skipped": True}, "ready": READY}).startswith("serving (unchanged")


def test_preflight_failure_stopped_nothing() -> None:
    state = host_state({"plan": dict(PLAN_RUNNING, failed=True), "failed_task": "Plan the restart"})
    assert state == "FAILED, nothing was stopped: serving OLD config (untouched)"


def test_crash_after_teardown_is_down() -> None:
    data = {"plan": PLAN_RUNNING, "teardown": TD, "launch": LAUNCH, "ready": {"ready": False, "reason": "fatal_log"},
            "failed_task": "Wait until the server is ready"}
    assert host_state(data) == "DOWN (no server)"
    assert "ready: NO (fatal_log)" in restart_summary(data)


def test_rolled_back_and_rollback_failed() -> None:
    base = {"plan": PLAN_RUNNING, "teardown": TD, "launch": LAUNCH, "failed_task": "Wait until the server is ready"}
    assert host_state(dict(base, rollback={"attempted": True, "rolled_back": True, "pid": 300})) == \
        "serving OLD config (rolled back)"
    assert host_state(dict(base, rollback={"attempted": True, "rolled_back": False, "reason": "fatal_log"})) == \
        "DOWN (no server: the rollback failed too)"


def test_check_mode() -> None:
    data = {"check_mode": True, "needed": True, "plan": PLAN_RUNNING, "teardown": dict(TD, killed=[])}
    lines = restart_summary(data)
    assert lines[0].endswith("check mode: would restart")
    assert "stopped: nothing; would stop 1 processes (100) and remove 0 files" in lines


def test_a_slow_start_is_flagged() -> None:
    ready = dict(READY, slow_start=True, start_seconds=61.0, last_start_seconds=30.0)
    lines = restart_summary({"plan": PLAN_RUNNING, "teardown": TD, "launch": LAUNCH, "ready": ready})
    assert any(line.endswith("SLOW START (61 s, the last start took 30 s)") for line in lines)


def test_foreign_port_holder_and_spared_processes_are_named() -> None:
    plan = dict(PLAN_RUNNING, port_holder=[{"pid": 77, "cmdline": ["python3", "-m", "http.server"], "foreign": True},
                                           {"pid": 100, "foreign": False}])
    td = dict(TD, spared=[{"pid": 9, "why_not": "owned by bob (all_users is false)"}])
    lines = restart_summary({"plan": plan, "teardown": td, "launch": LAUNCH, "ready": READY,
                             "foreign_port_holders": "kill"})
    assert "foreign port holder (kill): 77 python3 -m http.server" in lines[1]
    assert any("1 spared (9: owned by bob (all_users is false))" in line for line in lines)


def test_the_lock_line_says_how_the_lock_was_had() -> None:
    base = {"plan": PLAN_RUNNING, "ready": READY}
    assert "lock: taken over: run 4242 on ctl is no longer running" in restart_summary(
        dict(base, lock={"used": True, "taken_over": "run 4242 on ctl is no longer running", "lock_path": "/s/x"}))
    assert "lock: REFUSED: held by ops@ctl pid 7 for 30 s" in restart_summary(
        dict(base, lock={"used": True, "failed": True, "holder_text": "held by ops@ctl pid 7 for 30 s"}))
    assert "lock: not used (sglang_restart_lock: false)" in restart_summary(dict(base, lock={"used": False}))


def test_a_failed_proof_of_work_is_not_called_a_failed_start() -> None:
    """The readiness held; the server did not do its job: the summary says which."""
    data = {"plan": PLAN_RUNNING, "teardown": TD, "launch": LAUNCH, "failed_task": "Wait until the server is ready",
            "ready": {"ready": False, "reason": "work_failed"}, "verified": "FAILED: no new file appeared"}
    lines = restart_summary(data)
    assert "ready: yes (its log, port owner, configuration and health), but the proof of work failed (work_failed)" \
        in lines
    assert "verify: FAILED: no new file appeared" in lines


def test_a_teardown_that_failed_after_signalling_is_not_called_untouched():
    td = {"failed": True, "reason": "survivors", "targets": [{"pid": 5}, {"pid": 6}],
          "killed": [{"pid": 5, "name": "python3", "signal": "SIGTERM"}], "survivors": [{"pid": 6}]}
    data = {"plan": {"changed": True, "record": {"pid": 5}}, "teardown": td,
            "failed_task": "Launch the new server, once the old one is stopped and proven gone (one call)"}
    assert host_state(data) == "FAILED in the teardown: the old server is partly stopped (1 still alive)"
    refused = dict(td, killed=[], survivors=[])  # refused before any signal: untouched
    assert host_state(dict(data, teardown=refused)) == "FAILED, nothing was stopped: serving OLD config (untouched)"
