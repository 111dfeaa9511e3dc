# -*- coding: utf-8 -*-
"""The restart's decisions and its outcome: one state machine over the modules' results.

The restart role runs modules; every choice between its steps and every word it prints about
where the host stands is made here, in Python, from what the modules returned and from a
final liveness check of the instance (plugins/action/sglang_restart_outcome.py; the filters
of plugins/filter/restart_outcome.py expose the same functions to the role's Jinja):

    restart_decide(data)    after the plan: refused? replace? purge the dumps? which proof,
                            which settle window, whose lock to give back; after the launch:
                            is the readiness wait due?
    restart_rollback(data)  after a failure: is a rollback due, and why (not)
    restart_outcome(data)   the end: the state (one of STATES), the summary's lines, the cause
                            once, and the fact sglang_restart_result

Controller side only; pure functions of their input (docs/roles.md, "The summary's contract",
says what each state means on the host).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Tuple

# The states of a finished restart; docs/roles.md states each one's wording and what is true
# on the host when it is printed.
STATES = ("check", "refused", "unchanged", "adopted", "replaced", "rolled_back", "partly_stopped", "down", "stopped")

# Plan reasons that mean a server of the instance runs (alive, recorded).
_RUNNING_REASONS = ("running", "config_changed", "unresponsive")
# A teardown failure after which no target is alive: the old server is fully stopped.
_STOPPED_FAILURES = ("port_still_held", "gpu_not_released")
# The readiness reason of a server that answers but refuses the request's api key: alive.
_ALIVE_REASONS = ("unauthorized",)


def _d(data: Mapping[str, Any], key: str) -> Dict[str, Any]:
    value = data.get(key) if isinstance(data, Mapping) else None
    return dict(value) if isinstance(value, Mapping) else {}


def _ran(result: Mapping[str, Any]) -> bool:
    """A registered result of a task that really ran (not skipped, not absent)."""
    return bool(result) and not result.get("skipped", False)


def _failed(result: Mapping[str, Any]) -> bool:
    """The module failed: `failed`, or a failure its task reported instead of failing on
    (failed_when: Ansible keeps the module's exception under failed_when_suppressed_exception)."""
    return _ran(result) and (bool(result.get("failed")) or "failed_when_suppressed_exception" in result)


def _pid(result: Mapping[str, Any]) -> Optional[int]:
    pid = result.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _first_line(text: Any, limit: int = 300) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# The steps as this run left them
# --------------------------------------------------------------------------------------------

def _launch(data: Mapping[str, Any]) -> Dict[str, Any]:
    """This run's launch: the launch task's result, never the plan's (both register as
    sglang_launch_result; `launch` equal to `plan` means the launch never ran)."""
    launch, plan = _d(data, "launch"), _d(data, "plan")
    if not _ran(launch) or launch == plan:
        return {}
    return launch


def _teardown(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The old server's teardown: the launch's own (one call), the plan's in a --check run (what
    it would stop), or the teardown task's when the tags picked it alone."""
    launch, plan = _launch(data), _d(data, "plan")
    if isinstance(launch.get("teardown"), Mapping):
        return dict(launch["teardown"])
    if data.get("check_mode") and isinstance(plan.get("teardown"), Mapping):
        return dict(plan["teardown"])
    td = _d(data, "teardown")
    return td if _ran(td) and (_tags(data)["teardown_alone"] or data.get("teardown_is_the_old_servers")) else {}


def _selected(data: Mapping[str, Any], tag: str) -> bool:
    """Does the step tagged `tag` run with this run's --tags / --skip-tags? A step carries its
    short tag, its role-prefixed one (`sglang_restart_<tag>`) and the role's (`sglang_restart`)."""
    run = set(data.get("run_tags") or ["all"])
    skip = set(data.get("skip_tags") or [])
    names = {tag, "sglang_restart_%s" % tag, "sglang_restart"}
    return bool(run & ({"all", "tagged"} | names)) and not (skip & ({"tagged"} | names))


def _tags(data: Mapping[str, Any]) -> Dict[str, bool]:
    """Teardown and launch in one call whenever both steps run and it is no --check run; the
    teardown alone when `--tags teardown` picks it without the launch."""
    check = bool(data.get("check_mode"))
    teardown, launch = _selected(data, "teardown"), _selected(data, "launch")
    return {"one_call": not check and teardown and launch,
            "teardown_alone": not check and teardown and not launch}


def _old_record(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The record of the server the plan found running ({} when none ran)."""
    plan = _d(data, "plan")
    record = plan.get("record")
    if isinstance(record, Mapping) and plan.get("reason") in _RUNNING_REASONS:
        return dict(record)
    return {}


def _old_pid(data: Mapping[str, Any]) -> Optional[int]:
    pid = _old_record(data).get("pid")
    return pid if isinstance(pid, int) else None


def _rollback(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The rollback's results: its launch and ready (registered as
    __sglang_restart_rollback_launch/_ready), or the interim record of the role's own rollback
    (attempted, rolled_back, pid, reason)."""
    rb = _d(data, "rollback")
    launch, ready, record = _d(rb, "launch"), _d(rb, "ready"), _d(rb, "record")
    # the rollback's tasks register under the restart's names: a result equal to the restart's
    # own is one the rollback never replaced (it failed before that task)
    launch = {} if launch and launch in (_d(data, "launch"), _d(data, "plan")) else launch
    ready = {} if ready and ready == _d(data, "ready") else ready
    attempted = bool(record.get("attempted")) or _ran(launch) or _ran(ready)
    out = {"attempted": attempted, "launch": launch, "ready": ready}
    if record.get("reason") and not record.get("rolled_back"):
        # an unexpected error in the rollback's tasks (its rescue kept it)
        out.update(rolled_back=False, pid=None, reason=str(record["reason"]))
    elif _ran(ready) and ready.get("ready"):
        out.update(rolled_back=True, pid=_pid(ready) or _pid(launch), reason="")
    elif _ran(ready) or _ran(launch):
        failed = ready if _failed(ready) else launch
        out.update(rolled_back=False, pid=None,
                   reason="%s: %s" % (failed.get("reason") or "failed", _first_line(failed.get("msg"), 900)))
    else:
        out.update(rolled_back=bool(record.get("rolled_back")), pid=record.get("pid"),
                   reason=str(record.get("reason") or ""))
    return out


def _last_good(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The host's last proven-good launch as the plan read it ({} when there is none)."""
    good = _d(data, "plan").get("last_good")
    return dict(good) if isinstance(good, Mapping) else {}


def _live(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The final liveness check: serving (bool or None when not checked), pid, why not."""
    live = data.get("live")
    if not isinstance(live, Mapping) or not live or live.get("skipped"):
        return {"checked": False, "serving": None, "pid": None, "why": ""}
    serving = bool(live.get("ready")) or live.get("reason") in _ALIVE_REASONS
    why = "" if serving else "%s: %s" % (live.get("reason") or "not ready", _first_line(live.get("msg"), 240))
    return {"checked": True, "serving": serving, "pid": _pid(live), "why": why,
            "held": live.get("held_since_ready"), "reason": live.get("reason") or ""}


# --------------------------------------------------------------------------------------------
# After the plan
# --------------------------------------------------------------------------------------------

def _plan_cause(plan: Mapping[str, Any]) -> str:
    """The plan's refusal in one line: the preflight's errors, else the module's message."""
    errors = (plan.get("preflight") or {}).get("errors") or []
    if errors:
        return " | ".join(str(e) for e in errors)
    return _first_line(plan.get("msg") or plan.get("decision") or plan.get("reason") or "the plan failed", 600)


def _lock(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The operation lock as the plan had it: reason taken | held | taken_over | check_only |
    locked | lock_failed | not_used | not_taken, with its token and line."""
    if not data.get("lock_used", True):
        return {"reason": "not_used"}
    plan = _d(data, "plan")
    if plan.get("reason") in ("locked", "lock_failed"):
        return {"reason": plan["reason"], "holder_text": plan.get("holder_text") or _first_line(plan.get("msg")),
                "lock_path": plan.get("lock_path")}
    lock = plan.get("operation_lock")
    if not isinstance(lock, Mapping):
        return {"reason": "not_taken"}
    out = {"reason": "check_only" if data.get("check_mode") else lock.get("reason", "taken"),
           "lock_path": lock.get("lock_path"), "holder_text": lock.get("holder_text"),
           "token": (lock.get("holder") or {}).get("token"), "taken_over": lock.get("taken_over")}
    return out


def _prewarm(data: Mapping[str, Any]) -> Dict[str, Any]:
    """What warmed the new weights: the plan's own call (also for a forced restart)."""
    return _d(_d(data, "plan"), "prewarm")


def _prewarm_failed(data: Mapping[str, Any]) -> bool:
    """A prewarm that could not read the weights (an unsafe link, an unreadable shard) stops the
    restart before anything is stopped; a memory floor or a model without weight files does not."""
    warm = _prewarm(data)
    return bool(warm.get("failed")) and warm.get("reason") not in ("memory_floor", "no_weights")


def _settings_error(data: Mapping[str, Any]) -> str:
    if data.get("verify") == "extraction" and not data.get("dump_dir"):
        return "sglang_restart_verify=extraction needs sglang_restart_dump_dir (the directory SGLANG_HS_DUMP_DIR points at)"
    return ""


def _work(data: Mapping[str, Any]) -> Dict[str, Any]:
    verify = data.get("verify")
    timeout = float(data.get("verify_timeout") or 60)
    if verify == "extraction":
        return {"kind": "generate", "dump_dir": data.get("dump_dir"), "dump_wait": float(data.get("dump_wait") or 30),
                "timeout": timeout}
    if verify == "serving":
        return {"kind": "chat_reasoning", "timeout": timeout}
    return {}


def _log_hint(path: Any) -> str:
    """' (log: tail -f PATH)' for a task's title, or nothing."""
    return " (log: tail -f %s)" % path if path else ""


def _proven(data: Mapping[str, Any]) -> bool:
    """The plan found the requested server running, and it is the host's last proven-good launch
    (a restart's last check held it and promoted it): no readiness wait is due - the last check
    proves it serves, right before the summary says so. Not in a --check run, not with
    expectations of /server_info that only the readiness wait applies (sglang_restart_expect)."""
    plan = _d(data, "plan")
    record, good = _d(plan, "record"), _last_good(data)
    if data.get("check_mode") or data.get("expect") or plan.get("changed") or plan.get("reason") != "running":
        return False
    return bool(record.get("launch_id")) and record.get("launch_id") == good.get("launch_id") and not good.get("error")


def restart_decide(data: Mapping[str, Any]) -> Dict[str, Any]:
    """Every decision between the restart's steps, from the results so far.

    data: check_mode, force, verify, dump_dir, dump_wait, verify_timeout, dump_purge, lock_used,
    prewarm (wanted for this model), ready_settle, one_call (teardown and launch in one call:
    the tags pick both and it is no check run), roll_stopped (hosts of earlier batches that
    failed), expect (sglang_restart_expect), plan, launch (sglang_launch_result: the plan's
    until the launch ran)."""
    plan, check = _d(data, "plan"), bool(data.get("check_mode"))
    # an earlier batch's failure stops hosts the roll has not touched yet; once this host's plan
    # ran, a host that fails beside it (or after it) changes nothing of its own outcome
    stopped = [] if _ran(plan) else [str(h) for h in data.get("roll_stopped") or []]
    reason, cause = "", ""
    if stopped:
        reason, cause = "roll_stopped", "Rolling restart stopped: %s failed in an earlier batch; %s was not touched" % (
            ", ".join(stopped), data.get("host", "this host"))
    elif _settings_error(data):
        reason, cause = "bad_settings", _settings_error(data)
    elif _failed(plan):
        reason, cause = str(plan.get("reason") or "plan_failed"), _plan_cause(plan)
    elif _prewarm_failed(data):
        warm = _prewarm(data)
        reason, cause = "prewarm_failed", "the prewarm of the new weights failed (%s): %s" % (
            warm.get("reason") or "?", _first_line(warm.get("msg")))
    refused = bool(reason)
    replace = not refused and _ran(plan) and (bool(plan.get("changed")) or bool(data.get("force")))
    launch = _launch(data)
    launched = bool(launch.get("changed")) and not _failed(launch)
    lock = _lock(data)
    token = lock.get("token") if lock.get("reason") in ("taken", "taken_over", "held") else None
    # the old dumps are the operator's data: emptied only when asked, and never when the server
    # is replaced because it did not answer (it may only have been busy writing them)
    purge = (replace and data.get("verify") == "extraction" and bool(data.get("dump_purge"))
             and plan.get("reason") != "unresponsive")
    tags = _tags(data)
    proven = not refused and not replace and _proven(data)
    return {
        "refused": refused, "reason": reason, "cause": cause,
        "replace": replace,
        "one_call": tags["one_call"],
        "teardown_alone": replace and tags["teardown_alone"],
        "launch_due": replace and not check,
        # a --check run: the plan's own call says what the teardown would stop
        "plan_teardown": check,
        "purge_dumps": purge,
        # the proof of work writes into the dump directory: only for a server this run launches
        "work": _work(data) if replace else {},
        "launched": launched,
        "ready_due": (not refused and _ran(plan) and not (check and replace)
                      and (launched or not launch) and not proven),
        # a converged run whose server is the last proven-good one: the last check alone proves
        # it (and gives the lock back in its call)
        "proven": proven,
        "log_hint": _log_hint(launch.get("log_path") or (plan.get("record") or {}).get("log_path")),
        "ready_record": launch.get("record") if launched else None,
        # the last check makes the proven server the host's last proven-good launch (what a
        # rollback restores), once it held: not in a --check run, not after a refusal
        "promote_due": (not refused and not check and not _d(data, "error") and (launched or not launch)
                        and _ran(_d(data, "ready")) and bool(_d(data, "ready").get("ready"))),
        # the settle window guards the seconds after a fresh ready line; for a server this run
        # did not launch, the final check holds what is left of it (restart_outcome)
        "settle": float(data.get("ready_settle") or 0) if replace else 0.0,
        "lock": lock,
        "release_token": None if check else token,
        # the lock this run took, unless the readiness wait gave it back: the final check does
        "release_at_end": bool(token) and not check and not (
            (_d(data, "ready").get("operation_lock_released") or {}).get("token") == token),
    }


# --------------------------------------------------------------------------------------------
# After a failure
# --------------------------------------------------------------------------------------------

def _teardown_fully_stopped(td: Mapping[str, Any]) -> bool:
    """Every target of the teardown is gone (it succeeded, or it failed only on a check after
    the stop: a port taken by someone else, GPU memory not yet released)."""
    if not _ran(td) or "targets" not in td:
        return False
    if not td.get("failed"):
        return True
    return td.get("reason") in _STOPPED_FAILURES and not td.get("survivors") and not td.get("d_state")


def _new_serving(data: Mapping[str, Any]) -> bool:
    """The server this run wanted serves: its launch and readiness held, and so did the
    final check (when it ran)."""
    dec = restart_decide(data)
    ready = _d(data, "ready")
    if dec["refused"] or _d(data, "error"):
        return False
    if dec["replace"] and not dec["launched"]:
        return False
    if not (_ran(ready) and ready.get("ready")):
        return False
    live = _live(data)
    return live["serving"] is not False


def restart_rollback(data: Mapping[str, Any]) -> Dict[str, Any]:
    """Is a rollback due? `due` and `why` (why it is, or why not).

    Due when rollback is on, this is no check run, the restart failed, this run's teardown
    stopped every process of the old server (a port taken during the teardown's own check
    included), the host keeps a readable last proven-good launch (the plan's `last_good`: the
    rollback restores it, also after an interrupted earlier run) and no rollback ran yet."""
    if not data.get("rollback_enabled", True):
        return {"due": False, "why": "sglang_restart_rollback is false"}
    if data.get("check_mode"):
        return {"due": False, "why": "check mode"}
    if _rollback(data)["attempted"]:
        return {"due": False, "why": "the rollback ran"}
    if _tags(data)["teardown_alone"]:
        return {"due": False, "why": "--tags teardown stops the server and leaves it down"}
    if _new_serving(data):
        return {"due": False, "why": "the new server serves"}
    td = _teardown(data)
    if not _ran(td):
        return {"due": False, "why": "nothing was stopped"}
    good = _last_good(data)
    if not good:
        return {"due": False, "why": "no launch of this instance was ever proven good: nothing to roll back to"}
    if good.get("error"):
        return {"due": False, "why": "the last-good record cannot be used: %s" % _first_line(good["error"])}
    if not _teardown_fully_stopped(td):
        return {"due": False, "why": "the old server is only partly stopped (%d still alive)"
                % len(td.get("survivors") or [])}
    return {"due": True, "why": "the old server is stopped and the new one does not serve"}


# --------------------------------------------------------------------------------------------
# The end
# --------------------------------------------------------------------------------------------

def _failure_cause(data: Mapping[str, Any]) -> Tuple[str, str]:
    """(reason, one line) of what made the restart fail first."""
    dec = restart_decide(data)
    if dec["refused"]:
        return dec["reason"], dec["cause"]
    error = _d(data, "error")
    launch, ready, td = _launch(data), _d(data, "ready"), _teardown(data)
    if _failed(td):
        return str(td.get("reason") or "teardown_failed"), _first_line(td.get("msg"), 600)
    if _failed(launch):
        return str(launch.get("reason") or "launch_failed"), _first_line(launch.get("msg"), 600)
    if _failed(ready):
        work = ready.get("work") if isinstance(ready.get("work"), Mapping) else {}
        if ready.get("reason") == "work_failed" and work:
            return "work_failed", "the proof of work failed: %s" % _first_line(work.get("msg"))
        return str(ready.get("reason") or "not_ready"), _first_line(ready.get("msg"), 600)
    live = _live(data)
    if live["serving"] is False and _ran(ready) and ready.get("ready"):
        return "died_after_ready", "the server died after it was ready (%s)" % live["why"]
    if error:
        return "task_failed", "%s: %s" % (error.get("task") or "?", _first_line(error.get("msg")))
    if live["serving"] is False:
        return live["reason"] or "not_serving", live["why"]
    return "", ""


_STEP_OF = {
    "roll_stopped": "Stop the roll when a host of an earlier batch failed",
    "bad_settings": "Check the restart settings",
    "prewarm_failed": "Warm the new weights",
    "locked": "Plan the restart (its operation lock)", "lock_failed": "Plan the restart (its operation lock)",
    "died_after_ready": "Check the instance once more",
}


def _failed_step(data: Mapping[str, Any], reason: str) -> str:
    """The step that failed, in the words of its task (sglang_restart_result.failed_task)."""
    if _d(data, "error"):
        return str(_d(data, "error").get("task") or "?")
    if reason in _STEP_OF:
        return _STEP_OF[reason]
    plan = _d(data, "plan")
    if _failed(plan):
        if (plan.get("preflight") or {}).get("errors"):
            return "Plan the restart - the preflight refused the configuration (nothing was stopped)"
        return "Plan the restart"
    if _failed(_teardown(data)):
        return "Tear down the old server and prove it is gone"
    if _failed(_launch(data)):
        return "Launch the new server, once the old one is stopped and proven gone (one call)"
    if _failed(_d(data, "ready")):
        return "Wait until the server is ready"
    return "Check the instance once more"


def _ports_after(td: Mapping[str, Any]) -> str:
    """The ports the teardown found taken after the old server was gone."""
    return ", ".join(str(p.get("port")) for p in td.get("ports_after") or [] if isinstance(p, Mapping)) or "?"


def _state(data: Mapping[str, Any]) -> Tuple[str, str]:
    """(state, head): where the host stands, as the first line says it."""
    dec = restart_decide(data)
    live, rb = _live(data), _rollback(data)
    old_pid, launch, td = _old_pid(data), _launch(data), _teardown(data)
    if data.get("check_mode"):
        if dec["refused"]:
            return "check", "check mode: would refuse (%s); nothing was changed" % dec["reason"]
        return "check", "check mode: %s" % ("would restart" if dec["replace"] else "nothing to do")
    serving, pid = live["serving"], live["pid"]
    if rb["attempted"]:
        if rb["rolled_back"] and serving is not False:
            return "rolled_back", "serving OLD config (rolled back)"
        if rb["rolled_back"]:
            return "down", "DOWN (no server: the rolled-back server died after it was ready)"
        if _failed(td) and td.get("reason") == "port_still_held":
            return "down", ("DOWN (no server: the old server is stopped; port %s was taken during the teardown's "
                            "check, and the rollback failed too)" % _ports_after(td))
        return "down", "DOWN (no server: the rollback failed too)"
    signalled = _ran(td) and bool(td.get("killed") or td.get("signals"))
    if _failed(td) and not _teardown_fully_stopped(td) and signalled:
        return "partly_stopped", "FAILED in the teardown: the old server is partly stopped (%d still alive)" % len(
            td.get("survivors") or [])
    stopped_nothing = not signalled and not launch.get("changed")
    if dec["refused"] or (stopped_nothing and (_failed(td) or _failed(launch) or _d(data, "error"))):
        # the last check says which: a refused plan returns no record of the running server
        if serving or (serving is None and old_pid is not None):
            return "refused", "FAILED, nothing was stopped: serving OLD config (untouched)"
        return "refused", "FAILED, nothing was stopped: no server serves"
    if dec["replace"] and _teardown_fully_stopped(td) and _failed(td):
        return "down", ("DOWN (no server: the old server is stopped; port %s was taken during the teardown's "
                        "check)" % _ports_after(td) if td.get("reason") == "port_still_held"
                        else "DOWN (no server: the old server is stopped; %s)" % td.get("reason"))
    ready = _d(data, "ready")
    if dec["teardown_alone"] and _ran(td) and not _failed(td) and not launch:
        return "stopped", "DOWN (stopped as asked: --tags teardown runs the teardown without the launch)"
    if launch.get("changed"):
        if ready.get("ready") and serving is not False and (pid is None or pid == _pid(launch)):
            return "replaced", "serving NEW config"
        if ready.get("ready"):
            return "down", "DOWN (no server: the new server died after it was ready)"
        return "down", "DOWN (no server)"
    if not _ran(_d(data, "plan")) and not launch and serving:
        # the tags skipped the plan (--skip-tags verify skips it too: it carries every step's tag):
        # what runs was never compared with the requested configuration
        return "unchanged", ("serving what ran before (not compared: the plan did not run, the tags "
                             "skipped it; nothing was changed)")
    if ready.get("ready") and serving is not False:
        if ready.get("already_running") is False:
            return "adopted", "serving (adopted: the requested server was still starting, from an earlier run)"
        return "unchanged", "serving (unchanged: the requested server was already running)"
    if ready.get("ready"):
        return "down", "DOWN (no server: the running server died after it was checked)"
    if _ran(ready):
        return "down", "DOWN (no server)" if serving is not True else "FAILED: the server does not prove ready"
    if serving:
        return "unchanged", "serving (unchanged: the requested server was already running)"
    return "down", "DOWN (no server)"


def _stopped_line(td: Mapping[str, Any], check_mode: bool) -> str:
    if not _ran(td) or "targets" not in td:
        return "nothing"
    killed = td.get("killed") or []
    files = len(td.get("shm_removed") or [])
    if check_mode:
        pids = ", ".join(str(t.get("pid")) for t in td.get("targets") or [])
        return "nothing; would stop %d processes (%s) and remove %d files" % (len(td.get("targets") or []), pids, files)
    if not killed:
        return "no process was running, %d files removed" % files
    names = Counter(str(k.get("name", "?")) for k in killed)
    shown = ", ".join("%s x%d" % kv for kv in list(names.items())[:4]) + (", ..." if len(names) > 4 else "")
    signals = ", ".join("%d by %s" % (n, s) for s, n in Counter(k.get("signal", "?") for k in killed).items())
    seconds = round(sum(float(v) for v in (td.get("timings") or {}).values()), 2)
    return "%d processes (%s; %s) in %s s, %d files removed" % (len(killed), shown, signals, seconds, files)


def _ready_line(ready: Mapping[str, Any]) -> str:
    if ready.get("ready"):
        text = "yes, %.1f s since launch; server %s" % (float(ready.get("since_launch") or 0),
                                                        ready.get("server_version") or "?")
        if ready.get("slow_start"):
            text += "; SLOW START (%.0f s, the last start took %.0f s)" % (
                float(ready.get("start_seconds") or 0), float(ready.get("last_start_seconds") or 0))
        return text
    if ready.get("reason") == "work_failed":
        return "yes (its log, port owner, configuration and health), but the proof of work failed (work_failed)"
    if ready.get("reason"):
        return "NO (%s)" % ready["reason"]
    return "not checked"


def _verified(data: Mapping[str, Any]) -> str:
    if isinstance(data.get("verified"), str) and data.get("verified"):
        return str(data["verified"])  # older step results say it themselves
    work = _d(data, "ready").get("work")
    verify = data.get("verify") or "none"
    if isinstance(work, Mapping) and work:
        return ("%s: %s" % (verify, work.get("msg"))) if work.get("ok") else "FAILED: %s" % work.get("msg")
    if verify == "none":
        return "none requested"
    return "not run" + (" (the server was not replaced)" if _ran(_d(data, "ready")) and not _launch(data) else "")


def _lock_line(data: Mapping[str, Any], released: bool) -> str:
    lock = restart_decide(data)["lock"]
    why = lock.get("reason")
    if why == "not_used":
        return "not used (sglang_restart_lock: false)"
    if why in ("locked", "lock_failed"):
        return "REFUSED: %s" % (lock.get("holder_text") or "?")
    if why == "check_only":
        return "free (check mode: checked, not taken)"
    if why == "not_taken":
        return "not taken"
    how = "taken over: %s" % lock["taken_over"] if lock.get("taken_over") else "taken (%s)" % lock.get("lock_path")
    return how + ("; released" if released else "; still held (the next run from this controller takes it over)")


def _changes(plan: Mapping[str, Any]) -> str:
    out = []
    for c in plan.get("changes") or []:
        if isinstance(c, Mapping):
            out.append("%s: %r -> %r" % (c.get("key", "?"), c.get("before"), c.get("after"))
                       if "before" in c or "after" in c else str(c.get("key", "?")))
    return ", ".join(out)


def _plan_line(data: Mapping[str, Any]) -> str:
    plan = _d(data, "plan")
    line = "plan: %s%s" % (plan.get("reason", "not run"), " (forced)" if data.get("force") else "")
    if _changes(plan):
        line += "; changes: " + _changes(plan)
    foreign = [h for h in plan.get("port_holder") or [] if isinstance(h, Mapping) and h.get("foreign")]
    if foreign and not plan.get("failed"):  # a refusal names them in its cause
        line += "; foreign port holder (%s): %s" % (data.get("foreign_port_holders", "?"), "; ".join(
            "%s %s" % (h.get("pid"), " ".join(h.get("cmdline") or [])) for h in foreign))
    exit_info = plan.get("exit") if isinstance(plan.get("exit"), Mapping) else None
    if exit_info:
        line += "; the previous server exited on its own (%s)" % _first_line(
            exit_info.get("text") or exit_info.get("status") or exit_info)
    return line


def _log_path(data: Mapping[str, Any]) -> str:
    """This run's launch's log (where a failure's cause is), else the running server's."""
    for res in (_d(data, "ready"), _launch(data)):
        if res.get("log_path"):
            return str(res["log_path"])
    return str((_d(data, "plan").get("record") or {}).get("log_path") or "-")


def _timeline(ready: Mapping[str, Any]) -> str:
    steps = ready.get("timeline") or []
    return ", ".join("%s +%.1fs" % (s.get("phase"), float(s.get("seconds") or 0)) for s in steps) or "-"


def _live_text(live: Mapping[str, Any]) -> str:
    if live["serving"]:
        held = "" if live["held"] is None else ", %.1f s after its ready line" % float(live["held"])
        return "checked now: pid %s serving%s" % (live["pid"], held)
    return "checked now: NOT serving (%s)" % live["why"]


def _summary(data: Mapping[str, Any], head: str, cause: str, released: bool) -> List[str]:
    """The summary's lines: where the host stands, the cause once, then one line per step that
    ran (docs/roles.md, "The summary's contract")."""
    dec = restart_decide(data)
    check = bool(data.get("check_mode"))
    td, launch, ready = _teardown(data), _launch(data), _d(data, "ready")
    rb, live = _rollback(data), _live(data)
    lines = ["%s on %s: %s" % (data.get("name", "?"), data.get("host", "?"), head)]
    if cause:
        lines.append("failed at: %s: %s" % (_failed_step(data, _failure_cause(data)[0]), cause))
    plan_line = _plan_line(data)
    if dec["lock"].get("reason") not in ("locked", "lock_failed"):  # a lock refusal is the cause
        plan_line += "; lock: " + _lock_line(data, released)
    lines.append(plan_line)
    if (_ran(td) and (td.get("targets") or td.get("killed") or td.get("failed") or not launch.get("changed"))) \
            or check:
        spared = td.get("spared") or []
        stopped = "stopped: " + _stopped_line(td, check)
        if spared:
            stopped += "; %d spared (%s)" % (len(spared), ", ".join(
                "%s: %s" % (p.get("pid"), p.get("why_not", "?")) for p in spared[:5]))
        if data.get("dump_dir") and data.get("verify") == "extraction" and launch:
            stopped += "; dumps %s" % ("emptied (sglang_restart_dump_purge)" if dec["purge_dumps"] else "kept")
        lines.append(stopped)
    if launch.get("changed"):
        rec = launch.get("record") or {}
        text = "launch: pid %s, sglang %s from %s" % (launch.get("pid"), rec.get("sglang_version", "?"),
                                                      rec.get("interpreter", "?"))
        lines.append(text)
    if _ran(ready):
        text = "ready: " + _ready_line(ready)
        if live["checked"] and not check and not rb["attempted"] and (live["serving"] or ready.get("ready")):
            text += "; " + _live_text(live)
        lines.append(text)
        if ready.get("ready") and launch.get("changed"):
            lines.append("startup timeline: " + _timeline(ready))
        # a server that never got ready was never verified: "ready: NO" says it (no "verify: not run")
        if (data.get("verify") not in (None, "none") and ready.get("ready")) or ready.get("work") or data.get("verified"):
            lines.append("verify: " + _verified(data))
    elif live["checked"] and not check and not rb["attempted"]:
        lines.append("server: " + _live_text(live))
    if rb["attempted"]:
        text = "rollback: %s" % ("last proven-good config relaunched, pid %s" % rb["pid"]
                                 if rb["rolled_back"] else "FAILED (%s)" % (rb["reason"] or "?"))
        if live["checked"] and rb["rolled_back"]:
            text += "; " + _live_text(live)
        lines.append(text)
    elif head.startswith(("DOWN", "FAILED in the teardown")) and _ran(td) and not check:
        lines.append("rollback: none (%s)" % restart_rollback(data)["why"])
    log = _log_path(data)
    if log != "-":
        lines.append("log: tail -f " + log)
    return lines


def restart_outcome(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The finished restart: sglang_restart_result, with `state`, `summary` (the lines to
    print; the first says where the host stands), `cause` (printed once, in the summary) and
    `failed` (the host fails the play: the roll stops)."""
    dec = restart_decide(data)
    state, head = _state(data)
    check = bool(data.get("check_mode"))
    plan, td, launch, ready = _d(data, "plan"), _teardown(data), _launch(data), _d(data, "ready")
    rb, live = _rollback(data), _live(data)
    failed = state not in ("replaced", "unchanged", "adopted", "check", "stopped") or (check and dec["refused"])
    reason, cause = _failure_cause(data) if failed else ("", "")
    token = dec["lock"].get("token")
    by_ready = bool(token) and (ready.get("operation_lock_released") or {}).get("token") == token
    released = bool(data.get("lock_released")) or by_ready
    lines = _summary(data, head, cause, released)
    serving_pid = live["pid"] if live["serving"] else None
    if serving_pid is None and live["serving"] is None and state in ("replaced", "unchanged", "adopted"):
        serving_pid = _pid(launch) or _pid(ready)
    return {
        "name": data.get("name"), "host": data.get("host"), "check_mode": check,
        "needed": dec["replace"], "force": bool(data.get("force")),
        "foreign_port_holders": data.get("foreign_port_holders"),
        "lock": dict(dec["lock"], used=dec["lock"].get("reason") != "not_used", released=released),
        "plan": plan, "teardown": td, "launch": launch, "ready": ready,
        "prewarm": _prewarm(data), "verified": _verified(data),
        "state": state, "head": head, "summary": lines, "failed": failed, "reason": reason, "cause": cause,
        "failed_task": _failed_step(data, reason) if failed else "",
        "failed_msg": cause,
        "rollback": dict({k: rb[k] for k in ("attempted", "rolled_back", "pid", "reason")},
                         since_launch=rb["ready"].get("since_launch")) if rb["attempted"] else {},
        "restarted": state == "replaced",
        "rolled_back": state == "rolled_back",
        "serving_pid": serving_pid,
        "old_pid": _old_pid(data),
        "purged_dumps": dec["purge_dumps"] and bool(launch),
        "live": {k: live[k] for k in ("checked", "serving", "pid", "why")},
        # the restart's own steps as judged here: after a rollback (whose tasks register under
        # the same names) the second call judges these again
        "steps": {k: data.get(k) for k in ("plan", "launch", "teardown", "ready", "run_tags",
                                           "skip_tags") if k in data},
    }
