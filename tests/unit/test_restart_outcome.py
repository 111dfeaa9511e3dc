"""The restart's state machine, in-process: every way a restart ends, against the host state it
must report (plugins/module_utils/_restart/_restart_outcome.py), and the decisions between its steps. The final
liveness check (`live`) is what the instance looked like right before the line is printed."""
from __future__ import annotations

from typing import Any, Dict

import pytest

from ansible_collections.llmops.sglang.plugins.action.sglang_restart_outcome import (
    _released, check, hold_left, lock_gone, ready_age)
from ansible_collections.llmops.sglang.plugins.filter.restart_outcome import (restart_decide, restart_outcome,
                                                                              restart_rollback)
from ansible_collections.llmops.sglang.plugins.module_utils._readiness._ready_call import release_due
from ansible_collections.llmops.sglang.plugins.module_utils._restart._restart_outcome import STATES

OLD = {"pid": 100, "log_path": "/l/old.log", "fingerprint_inputs": {}}
# the host's last proven-good launch as the plan reads it (what a rollback restores)
GOOD = {"path": "/s/ex.good.json", "launch_id": "g1", "fingerprint": "f0", "promoted_at_utc": "2026-12-02T10:00:00Z",
        "error": None}
LOCK = {"reason": "taken", "lock_path": "/s/x.restart.lock", "holder": {"token": "tok-1"}}
PLAN_CHANGE = {"changed": True, "reason": "config_changed", "record": OLD, "operation_lock": LOCK, "last_good": GOOD,
               "changes": [{"key": "args.--mem-fraction-static", "before": 0.5, "after": 0.6}]}
PLAN_RUNNING = {"changed": False, "reason": "running", "record": OLD, "operation_lock": LOCK, "last_good": GOOD}
PLAN_NEW = {"changed": True, "reason": "new", "operation_lock": LOCK}
TD = {"changed": True, "targets": [{"pid": 100}, {"pid": 101}],
      "killed": [{"pid": 100, "name": "python3", "signal": "SIGTERM"},
                 {"pid": 101, "name": "sglang::scheduler", "signal": "SIGTERM"}],
      "survivors": [], "shm_removed": [], "timings": {"plan": 0.1, "term": 0.4}}
TD_NONE = {"changed": False, "targets": [], "killed": [], "survivors": [], "shm_removed": [], "timings": {}}
LAUNCH = {"changed": True, "pid": 200, "log_path": "/l/new.log", "teardown": TD,
          "record": {"pid": 200, "sglang_version": "0.5.23", "interpreter": "/v/bin/python"}}
READY = {"ready": True, "pid": 200, "since_launch": 9.0, "start_seconds": 8.0, "server_version": "0.5.23",
         "already_running": False, "log_path": "/l/new.log", "operation_lock_released": {"token": "tok-1"},
         "timeline": [{"phase": "weight load begin", "seconds": 1.0}, {"phase": "ready", "seconds": 8.0}]}
READY_OLD = dict(READY, pid=100, already_running=True, since_launch=3600.0, start_seconds=30.0,
                 log_path="/l/old.log", timeline=[])
CRASH = {"ready": False, "failed": True, "reason": "fatal_log", "pid": 200,
         "msg": "the launched process 200 exited (code 1) at phase weight load; its log says: RuntimeError: Not enough memory"}


def live(pid=None, ready=True, reason="ready", held=12.0, msg=""):
    return {"ready": ready, "pid": pid, "reason": reason, "held_since_ready": held, "msg": msg}


DEAD = live(ready=False, reason="record_missing", msg="no launch record /s/x.json: nothing to check")


def refusal(reason: str, msg: str, **extra: Any) -> Dict[str, Any]:
    return dict({"failed": True, "changed": False, "reason": reason, "msg": msg}, **extra)


def run(**steps: Any) -> Dict[str, Any]:
    data: Dict[str, Any] = {"name": "ex", "host": "gpu-1", "verify": "serving"}
    data.update(steps)
    return restart_outcome(data)


# --- refused: nothing was stopped, whatever refused ---------------------------------------------

REFUSALS = {
    "venv without sglang": refusal("preflight_failed", "preflight failed: sglang is not importable",
                                   preflight={"errors": ["sglang is not importable by /v/bin/python"]}),
    "unknown flag": refusal("preflight_failed", "preflight failed", preflight={"errors": ["--no-such-flag: unknown"]}),
    "invalid choice": refusal("preflight_failed", "preflight failed",
                              preflight={"errors": ["--reasoning-parser='kimi_k9' is not a valid choice"]}),
    "missing model": refusal("preflight_failed", "preflight failed",
                             preflight={"errors": ["model_path /m does not exist"]}),
    "foreign port holder": refusal("port_busy", "port 30000 on 127.0.0.1 is held by pid 77 (python3 -m http.server)",
                                   port_holder=[{"pid": 77, "foreign": True, "cmdline": ["python3"]}]),
    "lock held by another run": refusal("locked", "instance 'ex' is locked by ops@ctl pid 7",
                                        holder_text="ansible-playbook pid 7 of ops@ctl"),
    "read-only state dir": refusal("unsafe_dir", "state_dir /s is not writable"),
    "unreadable record": refusal("record_invalid", "the launch record /s/ex.json is not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_while_the_old_server_serves_says_so(case):
    out = run(plan=REFUSALS[case], live=live(pid=100))
    assert out["state"] == "refused" and out["failed"]
    assert out["head"] == "FAILED, nothing was stopped: serving OLD config (untouched)"
    assert not restart_rollback({"plan": REFUSALS[case], "live": live(pid=100)})["due"]


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_with_no_server_serving_does_not_say_untouched(case):
    out = run(plan=REFUSALS[case], live=DEAD)
    assert out["state"] == "refused" and out["head"] == "FAILED, nothing was stopped: no server serves"


def test_a_refusal_names_its_cause_once():
    plan = REFUSALS["invalid choice"]
    out = run(plan=plan, live=live(pid=100))
    text = "\n".join(out["summary"])
    assert text.count("--reasoning-parser='kimi_k9' is not a valid choice") == 1, text
    assert out["summary"][1].startswith("failed at: Plan the restart - the preflight refused the configuration")
    assert out["failed_task"] == "Plan the restart - the preflight refused the configuration (nothing was stopped)"


def test_a_lock_refusal_is_the_cause_and_no_lock_line_claims_it():
    out = run(plan=REFUSALS["lock held by another run"], live=live(pid=100))
    text = "\n".join(out["summary"])
    assert "lock: taken" not in text and text.count("locked by ops@ctl pid 7") == 1, text
    assert out["failed_task"] == "Plan the restart (its operation lock)"


def test_a_prewarm_that_cannot_read_the_weights_refuses_before_the_teardown():
    plan = dict(PLAN_CHANGE, prewarm={"failed": True, "reason": "unsafe_path", "msg": "a symlink"})
    dec = restart_decide({"plan": plan})
    assert dec["refused"] and not dec["replace"] and not dec["launch_due"]
    memory_floor = dict(PLAN_CHANGE, prewarm={"failed": True, "reason": "memory_floor", "msg": "stopped early"})
    assert restart_decide({"plan": memory_floor})["replace"]


def test_a_later_batch_of_a_stopped_roll_is_not_touched():
    data = {"roll_stopped": ["gpu-1"], "host": "gpu-3", "live": live(pid=100)}
    dec = restart_decide(data)
    assert dec["refused"] and not dec["replace"] and not dec["ready_due"]
    out = run(**data)
    assert "Rolling restart stopped: gpu-1 failed in an earlier batch; gpu-3 was not touched" in out["cause"]
    assert out["head"] == "FAILED, nothing was stopped: serving OLD config (untouched)"


# --- untouched, replaced, adopted ---------------------------------------------------------------

def test_unchanged_and_still_serving():
    out = run(plan=PLAN_RUNNING, ready=READY_OLD, live=live(pid=100))
    assert out["state"] == "unchanged" and not out["failed"]
    assert out["head"] == "serving (unchanged: the requested server was already running)"


def test_unchanged_but_dead_at_the_last_check_is_down():
    out = run(plan=PLAN_RUNNING, ready=READY_OLD, live=DEAD)
    assert out["state"] == "down" and out["failed"]
    assert out["head"] == "DOWN (no server: the running server died after it was checked)"


def test_replaced_and_serving():
    out = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=READY, live=live(pid=200))
    assert out["state"] == "replaced" and out["head"] == "serving NEW config" and not out["failed"]
    assert out["restarted"] and out["serving_pid"] == 200 and out["old_pid"] == 100
    text = "\n".join(out["summary"])
    assert "stopped: 2 processes (python3 x1, sglang::scheduler x1; 2 by SIGTERM) in 0.5 s" in text
    assert "changes: args.--mem-fraction-static: 0.5 -> 0.6" in text


def test_a_crash_seconds_after_ready_is_never_serving_new():
    """Finding 2: ready held its settle window, then the server died before the play ended."""
    crashed = live(ready=False, reason="exited", msg="the launched process 200 exited (code 1) after its ready line")
    data = {"plan": PLAN_CHANGE, "launch": LAUNCH, "ready": READY, "live": crashed}
    out = run(**data)
    assert out["head"] != "serving NEW config" and out["failed"]
    assert restart_rollback(data)["due"]  # the old server was stopped: it comes back
    out = run(rollback_enabled=False, **data)
    assert out["state"] == "down" and out["head"] == "DOWN (no server: the new server died after it was ready)"
    assert out["reason"] == "died_after_ready"


def test_the_last_check_sees_another_server_than_the_launch():
    out = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=READY, live=live(pid=999))
    assert out["head"] != "serving NEW config"


def test_an_interrupted_restart_run_again_adopts_the_starting_server_and_says_so():
    """Finding 3: the re-run finds the requested server still starting and waits for it."""
    adopted = dict(READY, already_running=False)
    out = run(plan=PLAN_RUNNING, ready=adopted, live=live(pid=200, held=5.2))
    assert out["state"] == "adopted" and not out["failed"]
    assert out["head"] == "serving (adopted: the requested server was still starting, from an earlier run)"
    dead = run(plan=PLAN_RUNNING, ready=adopted, live=live(ready=False, reason="exited", msg="exited"))
    assert dead["state"] == "down" and dead["failed"]


def test_an_interrupted_restart_whose_server_never_came_up_launches_again():
    plan = {"changed": True, "reason": "not_running", "operation_lock": LOCK}
    out = run(plan=plan, launch=dict(LAUNCH, teardown=TD_NONE), ready=READY, live=live(pid=200))
    assert out["state"] == "replaced" and out["head"] == "serving NEW config"


# --- rolled back, down ----------------------------------------------------------------------------

def test_rolled_back_when_the_new_server_crashes():
    data = {"plan": PLAN_CHANGE, "launch": LAUNCH, "ready": CRASH}
    assert restart_rollback(data)["due"]
    back = dict(data, rollback={"launch": {"changed": True, "pid": 300}, "ready": dict(READY, pid=300)},
                live=live(pid=300))
    out = run(**back)
    assert out["state"] == "rolled_back" and out["head"] == "serving OLD config (rolled back)" and out["failed"]
    assert out["rollback"]["pid"] == 300 and out["rolled_back"] and not restart_rollback(back)["due"]
    text = "\n".join(out["summary"])
    assert "rollback: last proven-good config relaunched, pid 300" in text and "ready: NO (fatal_log)" in text
    assert text.count("Not enough memory") == 1, text


def test_the_interim_rollback_record_is_read_too():
    out = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=CRASH,
              rollback={"record": {"attempted": True, "rolled_back": True, "pid": 300}}, live=live(pid=300))
    assert out["state"] == "rolled_back"


def test_a_rolled_back_server_that_died_is_down():
    out = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=CRASH,
              rollback={"launch": {"pid": 300}, "ready": dict(READY, pid=300)}, live=DEAD)
    assert out["state"] == "down" and out["head"] == "DOWN (no server: the rolled-back server died after it was ready)"


def test_a_failed_rollback_is_down():
    failed = {"failed": True, "ready": False, "reason": "fatal_log", "msg": "old config crashed too"}
    out = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=CRASH,
              rollback={"launch": {"changed": True, "pid": 300}, "ready": failed}, live=DEAD)
    assert out["state"] == "down" and out["head"] == "DOWN (no server: the rollback failed too)"


def test_a_failed_first_launch_has_nothing_to_roll_back_to():
    data = {"plan": PLAN_NEW, "launch": dict(LAUNCH, teardown=TD_NONE), "ready": CRASH, "live": DEAD}
    assert not restart_rollback(data)["due"]
    assert run(**data)["head"] == "DOWN (no server)"


def test_the_rollback_restores_the_last_proven_good_launch_or_says_why_not():
    """The rollback restores <name>.good.json (sglang_launch restore: last_good), not the plan's
    in-memory record: none kept, or one that cannot be used, is no rollback, said in the summary."""
    base = {"launch": LAUNCH, "ready": CRASH, "live": DEAD}
    assert restart_rollback(dict(base, plan=PLAN_CHANGE))["due"]
    never = dict(PLAN_CHANGE, last_good=None)
    why = restart_rollback(dict(base, plan=never))
    assert not why["due"] and "ever proven good" in why["why"]
    out = run(plan=never, **base)
    assert out["state"] == "down" and "rollback: none (no launch of this instance was ever proven good" in \
        "\n".join(out["summary"])
    broken = dict(PLAN_CHANGE, last_good=dict(GOOD, error="symlink refused"))
    assert "cannot be used: symlink refused" in restart_rollback(dict(base, plan=broken))["why"]


def test_a_later_run_after_an_interrupted_bad_restart_rolls_back_from_the_last_good_record():
    """Finding 10: the interrupted run's new record replaced the good one, its server is dead;
    the next run's plan sees nothing running but the host still keeps the last-good launch."""
    plan = {"changed": True, "reason": "not_running", "operation_lock": LOCK, "last_good": GOOD,
            "record": {"pid": 150}}
    data = {"plan": plan, "launch": dict(LAUNCH, teardown=TD_NONE), "ready": CRASH, "live": DEAD}
    assert restart_rollback(data)["due"]


def test_a_rollback_that_failed_before_its_ready_task_is_not_read_as_the_restarts_ready():
    """The rollback's tasks register under the restart's names: a ready result equal to the
    restart's own is not the rollback's; an error its rescue kept is the cause."""
    stale = {"plan": PLAN_CHANGE, "launch": LAUNCH, "ready": READY, "live": DEAD,
             "rollback": {"launch": {"changed": True, "pid": 300}, "ready": READY,
                          "record": {"attempted": True, "rolled_back": False, "reason": "Roll back: template error"}}}
    out = run(**stale)
    assert out["state"] == "down" and out["head"] == "DOWN (no server: the rollback failed too)"
    assert "Roll back: template error" in "\n".join(out["summary"])


def test_a_teardown_that_failed_after_signalling_is_partly_stopped_and_not_rolled_back():
    td = {"failed": True, "reason": "survivors", "targets": [{"pid": 5}, {"pid": 6}],
          "killed": [{"pid": 5, "name": "python3", "signal": "SIGTERM"}], "survivors": [{"pid": 6}]}
    data = {"plan": PLAN_CHANGE, "launch": {"failed": True, "reason": "survivors", "teardown": td}, "live": DEAD}
    assert not restart_rollback(data)["due"]
    assert run(**data)["head"] == "FAILED in the teardown: the old server is partly stopped (1 still alive)"


def test_a_teardown_refused_before_any_signal_stopped_nothing():
    td = {"failed": True, "reason": "foreign_gpu_processes", "targets": [{"pid": 5}], "killed": [], "survivors": []}
    out = run(plan=PLAN_CHANGE, launch={"failed": True, "reason": "foreign_gpu_processes", "teardown": td},
              live=live(pid=100))
    assert out["head"] == "FAILED, nothing was stopped: serving OLD config (untouched)"


def test_a_port_taken_during_the_teardowns_check_is_rolled_back_or_said_down():
    """Finding 9: every target is gone, someone else took the port: not 'partly stopped (0 still alive)'."""
    td = dict(TD, failed=True, reason="port_still_held", ports_after=[{"port": 30000, "pids": [77]}])
    data = {"plan": PLAN_CHANGE, "launch": {"failed": True, "reason": "port_still_held", "teardown": td},
            "live": DEAD}
    assert restart_rollback(data)["due"]
    out = run(rollback_enabled=False, **data)
    assert out["state"] == "down"
    assert out["head"] == "DOWN (no server: the old server is stopped; port 30000 was taken during the teardown's check)"
    assert "partly stopped" not in "\n".join(out["summary"])
    # the rollback ran and was refused (the port is still someone else's): still said in those words
    refused = {"changed": False, "failed": True, "reason": "port_busy", "msg": "port 30000 is held by pid 77 [foreign]"}
    out = run(rollback={"launch": refused, "ready": {"skipped": True}}, **data)
    assert out["head"] == ("DOWN (no server: the old server is stopped; port 30000 was taken during the teardown's "
                           "check, and the rollback failed too)")
    assert "rollback: FAILED (port_busy: port 30000 is held by pid 77 [foreign])" in out["summary"]


def test_a_failure_its_task_reported_instead_of_failing_on_is_a_failure():
    """The restart's steps do not fail their tasks (failed_when): Ansible sets failed false and
    keeps the module's exception under failed_when_suppressed_exception."""
    reported = dict(CRASH, failed=False, failed_when_result=False, failed_when_suppressed_exception="(traceback)")
    data = {"plan": PLAN_CHANGE, "launch": LAUNCH, "ready": reported, "live": DEAD}
    assert restart_rollback(data)["due"]
    out = run(**data)
    assert out["reason"] == "fatal_log" and out["failed_task"] == "Wait until the server is ready"
    plan = dict(REFUSALS["unknown flag"], failed=False, failed_when_suppressed_exception="(traceback)")
    assert restart_decide({"plan": plan})["refused"]
    died = {"changed": True, "failed": False, "failed_when_suppressed_exception": "(traceback)", "reason": "died",
            "msg": "the server died right after the launch", "teardown": TD}
    data = {"plan": PLAN_CHANGE, "launch": died, "live": DEAD}
    assert not restart_decide(data)["ready_due"] and restart_rollback(data)["due"]
    assert run(**data)["failed_task"] == "Launch the new server, once the old one is stopped and proven gone (one call)"


def test_an_unexpected_task_error_is_named():
    out = run(plan=PLAN_RUNNING, error={"task": "Keep the plan", "msg": "template error"}, live=live(pid=100))
    assert out["failed"] and out["failed_task"] == "Keep the plan"
    assert out["head"] == "FAILED, nothing was stopped: serving OLD config (untouched)"


# --- check mode -----------------------------------------------------------------------------------

def test_check_mode_says_what_it_would_do_and_never_claims_the_lock():
    plan = dict(PLAN_CHANGE, operation_lock=dict(LOCK, reason="taken"), teardown=dict(TD, killed=[]))
    out = run(check_mode=True, plan=plan, live=live(pid=100))
    assert out["state"] == "check" and out["head"] == "check mode: would restart" and not out["failed"]
    text = "\n".join(out["summary"])
    assert "stopped: nothing; would stop 2 processes (100, 101) and remove 0 files" in text
    assert "lock: free (check mode: checked, not taken)" in text and "released" not in text
    assert run(check_mode=True, plan=PLAN_RUNNING)["head"] == "check mode: nothing to do"
    refused = run(check_mode=True, plan=REFUSALS["unknown flag"])
    assert refused["head"] == "check mode: would refuse (preflight_failed); nothing was changed" and refused["failed"]
    dec = restart_decide({"check_mode": True, "plan": PLAN_CHANGE})
    assert dec["plan_teardown"] and not dec["launch_due"] and not dec["ready_due"] and dec["release_token"] is None


# --- the lock's line -------------------------------------------------------------------------------

def test_the_lock_line_says_whether_it_was_given_back():
    done = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=READY, live=live(pid=200))
    assert "lock: taken (/s/x.restart.lock); released" in done["summary"][1]
    kept = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=dict(READY, operation_lock_released=None), live=live(pid=200))
    assert "still held" in kept["summary"][1]
    by_end = run(plan=PLAN_CHANGE, launch=LAUNCH, ready=dict(READY, operation_lock_released=None), live=live(pid=200),
                 lock_released=True)
    assert "released" in by_end["summary"][1] and "still held" not in by_end["summary"][1]
    assert "lock: not used" in run(plan=PLAN_RUNNING, lock_used=False, live=live(pid=100))["summary"][1]


def test_the_lock_goes_back_at_the_end_only_when_the_wait_did_not_give_it_back():
    assert not restart_decide({"plan": PLAN_CHANGE, "ready": READY})["release_at_end"]
    assert restart_decide({"plan": PLAN_CHANGE, "ready": CRASH})["release_at_end"]
    assert not restart_decide({"plan": REFUSALS["lock held by another run"]})["release_at_end"]


# --- the decisions between the steps ---------------------------------------------------------------

def test_dumps_are_kept_by_default_and_never_purged_for_an_unresponsive_server():
    base = {"verify": "extraction", "dump_dir": "/d", "plan": PLAN_CHANGE}
    assert not restart_decide(base)["purge_dumps"]
    assert restart_decide(dict(base, dump_purge=True))["purge_dumps"]
    stalled = dict(PLAN_RUNNING, changed=True, reason="unresponsive")
    assert not restart_decide(dict(base, dump_purge=True, plan=stalled))["purge_dumps"]


def test_a_converged_run_runs_no_proof_of_work_and_no_settle_window():
    """Finding 14: every proof writes a dump into the training data."""
    base = {"verify": "extraction", "dump_dir": "/d", "ready_settle": 2.0}
    converged = restart_decide(dict(base, plan=PLAN_RUNNING))
    assert converged["work"] == {} and converged["settle"] == 0 and not converged["replace"]
    restart = restart_decide(dict(base, plan=PLAN_CHANGE))
    assert restart["work"]["kind"] == "generate" and restart["settle"] == 2.0


def test_the_readiness_wait_follows_the_launch():
    # the tags skipped the launch: the wait proves what the state dir records
    assert restart_decide({"plan": PLAN_CHANGE})["ready_due"]
    assert restart_decide({"plan": PLAN_CHANGE})["ready_record"] is None
    assert restart_decide({"plan": PLAN_CHANGE, "launch": LAUNCH})["ready_due"]
    assert not restart_decide({"plan": PLAN_CHANGE, "launch": dict(LAUNCH, changed=False, failed=True)})["ready_due"]
    assert restart_decide({"plan": PLAN_RUNNING})["ready_due"]
    assert restart_decide({"plan": PLAN_CHANGE, "launch": LAUNCH})["ready_record"] == LAUNCH["record"]


def test_the_tags_pick_one_call_or_the_teardown_alone():
    assert restart_decide({"plan": PLAN_CHANGE, "run_tags": ["all"]})["one_call"]
    alone = restart_decide({"plan": PLAN_CHANGE, "run_tags": ["teardown"]})
    assert alone["teardown_alone"] and not alone["one_call"]
    assert not restart_decide({"plan": PLAN_CHANGE, "run_tags": ["launch"]})["one_call"]


def test_the_role_prefixed_tags_pick_the_same_steps():
    """sglang_restart_<step> is the step's short tag; sglang_restart is every step."""
    assert restart_decide({"plan": PLAN_CHANGE, "run_tags": ["sglang_restart"]})["one_call"]
    alone = restart_decide({"plan": PLAN_CHANGE, "run_tags": ["sglang_restart_teardown"]})
    assert alone["teardown_alone"] and not alone["one_call"]
    assert not restart_decide({"plan": PLAN_CHANGE, "run_tags": ["sglang_restart_launch"]})["one_call"]
    skipped = restart_decide({"plan": PLAN_CHANGE, "skip_tags": ["sglang_restart_launch"]})
    assert skipped["teardown_alone"] and not skipped["one_call"]
    assert not restart_decide({"plan": PLAN_CHANGE, "skip_tags": ["sglang_restart"]})["one_call"]


def test_tags_that_pick_the_teardown_alone_leave_the_host_down_as_asked():
    data = {"plan": PLAN_CHANGE, "run_tags": ["teardown"], "teardown": TD, "live": DEAD}
    out = run(**data)
    assert out["state"] == "stopped" and not out["failed"] and out["head"].startswith("DOWN (stopped as asked")
    assert not restart_rollback(data)["due"]


def test_a_forced_restart_whose_plan_could_not_warm_the_weights_is_refused():
    """The plan's call warms a forced restart's weights too: an unreadable shard refuses the
    restart before anything is stopped; a memory floor does not."""
    unreadable = dict(PLAN_RUNNING, prewarm={"failed": True, "reason": "unsafe_path", "msg": "a link"})
    dec = restart_decide({"plan": unreadable, "force": True, "prewarm": True})
    assert dec["refused"] and dec["reason"] == "prewarm_failed" and not dec["launch_due"]
    floor = dict(PLAN_RUNNING, prewarm={"failed": True, "reason": "memory_floor", "msg": "no room"})
    dec = restart_decide({"plan": floor, "force": True, "prewarm": True})
    assert dec["replace"] and dec["launch_due"] and not dec["refused"]


def test_every_outcome_is_one_of_the_documented_states():
    cases = [dict(plan=p, live=l) for p in (PLAN_CHANGE, PLAN_RUNNING, REFUSALS["unknown flag"]) for l in (DEAD, live(100))]
    for case in cases:
        assert run(**case)["state"] in STATES


# --- the final check's hold (the action plugin's part) ------------------------------------------------

def test_the_hold_waits_only_for_what_is_left_after_the_ready_line():
    assert ready_age({"since_launch": 12.0, "start_seconds": 9.5}) == 2.5
    assert hold_left(5.0, 2.5) == 2.5 and hold_left(5.0, 60.0) == 0.0 and hold_left(0.0, 1.0) == 0.0
    calls = []

    def server(since_launch, start_seconds):
        def execute(args):  # each call takes 0.3 s plus the settle it was asked for
            calls.append(args["settle"])
            return {"ready": True, "since_launch": since_launch + sum(calls) + len(calls) * 0.3,
                    "start_seconds": start_seconds}
        return execute
    out = check(server(9.0, 8.0), {"name": "ex"}, 5.0, READY)  # the wait ended 1 s after the ready line
    assert calls == [4.0] and out["held_since_ready"] >= 5.0
    calls.clear()
    check(server(3600.0, 30.0), {"name": "ex"}, 5.0, READY_OLD)  # hours old: one check, no wait
    assert calls == [0.0]
    calls.clear()
    out = check(server(8.5, 8.0), {"name": "ex"}, 5.0, {})  # adopted: no wait of its own before
    assert calls[0] == 0.0 and len(calls) == 2 and out["held_since_ready"] >= 5.0


def test_a_server_dead_at_the_check_is_not_held_for():
    calls = []

    def execute(args):
        calls.append(args["settle"])
        return {"ready": False, "reason": "exited"}
    assert not check(execute, {"name": "ex"}, 5.0, READY)["ready"] and len(calls) == 1


# --- the last-good record: promoted by the last check, once held (findings 2 and 10) ---------------

def test_the_last_check_promotes_only_a_server_that_held_past_the_hold():
    """A crash 2.5 s after the ready line must never become the launch a rollback restores."""
    calls = []

    def server(alive: bool):
        def execute(args):
            calls.append(dict(args))
            return {"ready": alive, "since_launch": 9.0 + args["settle"] + 0.3, "start_seconds": 8.0}
        return execute
    out = check(server(True), {"name": "ex"}, 5.0, READY, promote=True)
    assert calls == [{"name": "ex", "settle": 4.0, "promote": True}] and out["ready"]
    calls.clear()
    check(server(False), {"name": "ex"}, 5.0, READY, promote=True)  # died inside the hold: not ready
    assert len(calls) == 1  # the module promotes only a ready server, and this one was not
    calls.clear()
    check(server(True), {"name": "ex"}, 5.0, {}, promote=True)  # no age known before: the first call does not promote
    assert "promote" not in calls[0] and any(c.get("promote") for c in calls[1:])
    calls.clear()
    check(server(True), {"name": "ex"}, 5.0, READY)
    assert not any(c.get("promote") for c in calls)


def test_promotion_is_due_for_a_proven_server_of_this_run_only():
    assert restart_decide({"plan": PLAN_CHANGE, "launch": LAUNCH, "ready": READY})["promote_due"]
    assert restart_decide({"plan": PLAN_RUNNING, "ready": READY_OLD})["promote_due"]
    assert not restart_decide({"plan": PLAN_CHANGE, "launch": LAUNCH, "ready": CRASH})["promote_due"]
    assert not restart_decide({"check_mode": True, "plan": PLAN_RUNNING, "ready": READY_OLD})["promote_due"]
    assert not restart_decide({"plan": REFUSALS["unknown flag"]})["promote_due"]


# --- a converged run whose server is the last proven-good one: no readiness wait ---------------------

PLAN_PROVEN = dict(PLAN_RUNNING, record=dict(OLD, launch_id="g1"))  # GOOD's launch_id: promoted earlier


def test_a_converged_server_that_is_the_last_good_one_needs_no_readiness_wait():
    dec = restart_decide({"plan": PLAN_PROVEN})
    assert dec["proven"] and not dec["ready_due"] and not dec["replace"] and dec["release_at_end"]
    # the readiness wait stays due: a server not yet promoted (an adopted one), a forced restart,
    # a --check run, expectations only the wait checks, a refusal
    assert restart_decide({"plan": PLAN_RUNNING})["ready_due"]
    assert not restart_decide({"plan": PLAN_PROVEN, "force": True})["proven"]
    assert restart_decide({"plan": PLAN_PROVEN, "check_mode": True})["ready_due"]
    assert restart_decide({"plan": PLAN_PROVEN, "expect": {"dtype": "bfloat16"}})["ready_due"]
    assert not restart_decide({"plan": dict(PLAN_PROVEN, last_good=dict(GOOD, error="unreadable"))})["proven"]
    # a roll stopped by an earlier batch skips the plan: nothing is proven, the host is untouched
    stopped = restart_decide({"plan": {"skipped": True}, "roll_stopped": ["gpu-0"]})
    assert not stopped["proven"] and stopped["refused"] and stopped["reason"] == "roll_stopped"


def test_a_host_failing_beside_this_one_after_its_plan_ran_changes_nothing_of_its_outcome():
    # the last check re-reads the roll: a host of the same batch that failed (or became
    # unreachable) after this host's plan ran is no reason to call this host refused
    assert restart_decide({"plan": PLAN_PROVEN, "roll_stopped": ["gpu-0"]})["proven"]
    replaced = restart_decide({"plan": dict(PLAN_RUNNING, changed=True), "roll_stopped": ["gpu-0"]})
    assert replaced["replace"] and not replaced["refused"]


def test_a_proven_converged_run_is_unchanged_when_the_check_says_it_serves():
    out = run(plan=PLAN_PROVEN, live=live(pid=100), lock_released=True)
    assert out["state"] == "unchanged" and not out["failed"] and out["serving_pid"] == 100
    text = "\n".join(out["summary"])
    assert "server: checked now: pid 100 serving" in text and "ready:" not in text, text
    assert "lock: taken (/s/x.restart.lock); released" in text, text
    dead = run(plan=PLAN_PROVEN, live=DEAD)
    assert dead["state"] == "down" and dead["failed"] and dead["head"] == "DOWN (no server)"
    assert not restart_rollback({"plan": PLAN_PROVEN, "live": DEAD})["due"]


def test_the_check_gives_the_lock_back_in_its_own_call_until_one_did():
    calls = []

    def server(alive: bool):
        def execute(args):
            calls.append(dict(args))
            res = {"ready": alive, "since_launch": 3600.0, "start_seconds": 30.0}
            if alive and args.get("release_lock"):
                res["operation_lock_released"] = {"changed": True, "token": args["release_lock"]}
            return res
        return execute
    out = check(server(True), {"name": "ex"}, 5.0, {}, release="tok-1")
    assert calls == [{"name": "ex", "settle": 0.0, "release_lock": "tok-1", "release_lock_after": 5.0}]
    assert out["operation_lock_released"]["token"] == "tok-1"
    calls.clear()
    out = check(server(False), {"name": "ex"}, 5.0, {}, release="tok-1")  # not ready: the lock stays
    assert len(calls) == 1 and "operation_lock_released" not in out
    calls.clear()
    check(server(True), {"name": "ex"}, 5.0, READY_OLD)
    assert "release_lock" not in calls[0]


def _held_server(calls, ready_line_age):
    """sglang_ready as it answers a re-check: the ready line `ready_line_age` s old when the call
    begins, older by the call's settle when it ends; the lock given back only at release_lock_after."""
    def execute(args):
        calls.append(dict(args))
        res = {"ready": True, "pid": 100, "since_launch": 30.0 + ready_line_age + args.get("settle", 0),
               "start_seconds": 30.0}
        if args.get("release_lock"):
            age = res["since_launch"] - res["start_seconds"]
            if age >= (args.get("release_lock_after") or 0):
                res["operation_lock_released"] = {"changed": True, "token": args["release_lock"]}
            else:
                res["operation_lock_released"] = {"changed": False, "deferred": True}
        return res
    return execute


def test_the_proven_check_gives_the_lock_back_only_once_the_hold_has_passed():
    # a proven server whose ready line is younger than this run's hold (the hold was raised since
    # it was promoted): the lock stays until the call that held it to the end of the hold
    calls = []
    live = check(_held_server(calls, 20.0), {"name": "ex"}, 60.0, {}, release="tok-1")
    assert [c["settle"] for c in calls] == [0.0, 40.0]
    assert all(c.get("release_lock_after") == 60.0 for c in calls if c.get("release_lock"))
    # and the result says it was given back, whichever call did (the summary must not say "still held")
    assert _released(live, "tok-1")
    out = restart_outcome({"name": "ex", "host": "gpu-1", "plan": PLAN_PROVEN, "live": live,
                           "lock_released": _released(live, "tok-1")})
    assert "still held" not in "\n".join(out["summary"])


def test_the_lock_goes_back_only_in_a_call_that_promotes_when_promotion_is_due():
    # the readiness result gave no age of the ready line: the first call is not asked to promote,
    # so it must not give the lock back either - the promoting call after it may find the server
    # dead, and its rollback must run under the lock
    calls = []
    live = check(_held_server(calls, 30.0), {"name": "ex"}, 5.0, {"ready": True}, promote=True, release="tok-1")
    assert "release_lock" not in calls[0] and "promote" not in calls[0], calls
    assert calls[-1]["promote"] and calls[-1]["release_lock"] == "tok-1", calls
    assert _released(live, "tok-1")
    calls.clear()

    def dies(args):
        calls.append(dict(args))
        if len(calls) == 1:
            return _held_server([], 30.0)(args)
        return {"ready": False, "reason": "process_exited"}
    dead = check(dies, {"name": "ex"}, 5.0, {"ready": True}, promote=True, release="tok-1")
    assert not dead["ready"] and "operation_lock_released" not in dead, dead
    assert "release_lock" not in calls[0]


def test_the_end_says_released_for_a_lock_that_no_longer_exists():
    # sglang_lock state=absent: removed now, or nothing left to remove (an earlier call of this
    # run gave it back and then raised: the rescue's call finds none) - not "still held"
    assert lock_gone({"changed": True, "reason": "released", "lock_path": "/s/x.restart.lock", "previous": {}})
    assert lock_gone({"changed": False, "reason": "not_held", "lock_path": "/s/x.restart.lock"})
    assert not lock_gone({"changed": False, "reason": "kept", "kept": "pid 7 of another run"})  # another holder's
    assert not lock_gone({"failed": True, "msg": "cannot remove the lock"})
    assert not lock_gone({})


def test_sglang_ready_gives_the_lock_back_only_past_release_lock_after():
    # the module's side of the rule above: a ready line younger than the hold, or of unknown age,
    # keeps the lock; without a minimum age (the restart's own readiness wait) it goes back at once
    assert release_due(0.0, {})
    assert not release_due(5.0, {})
    assert not release_due(5.0, {"since_launch": 34.0, "start_seconds": 30.0})
    assert release_due(5.0, {"since_launch": 35.0, "start_seconds": 30.0})


def test_a_run_whose_tags_skipped_the_plan_does_not_call_the_running_server_the_requested_one():
    # --skip-tags verify (or launch, ready, ...) skips the plan, which carries every step's tag
    out = run(plan={"skipped": True}, live=live(pid=100))
    assert out["state"] == "unchanged" and not out["failed"]
    assert "not compared: the plan did not run" in out["head"], out["head"]
    assert "requested server was already running" not in "\n".join(out["summary"])
