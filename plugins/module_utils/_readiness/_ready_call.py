"""PRIVATE to llmops.sglang. One sglang_ready call as the module runs it: the options checked
(work, settle, patterns, slices), the launch record read, the wait (_readiness) or one slice of
it (the action plugin's resume state), then the result: the remembered start, the last-good
promotion and the operation lock given back. sglang_ready's main() hands `run` to _exit.run.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock_refresh
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness_last_good as _last_good_r
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _timeline_store
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _workproof
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns

SETTLE_MAX_S = 600.0
SLICE_MAX_S = 600.0


def load_record(params: Dict[str, Any]) -> Dict[str, Any]:
    """The explicit record, or <state_dir>/<name>.json."""
    if params["record"] is not None:
        return dict(params["record"])
    state_dir = params["state_dir"] or _record.default_state_dir()
    name = _record.validate_name(params["name"])
    path = _record.record_path(state_dir, name)
    try:
        record = _record.read_record(state_dir, name)
    except SglangError as exc:
        details = dict(exc.details)
        details.setdefault("reason", "record_invalid")  # what a failed read means here
        raise SglangError(exc.msg, **details)
    if record is None:
        raise SglangError("no launch record for instance %r at %s: launch it first with "
                          "llmops.sglang.sglang_launch" % (name, path), reason="record_missing")
    record.setdefault("state_dir", state_dir)
    record.setdefault("name", name)
    return record


def check_work(params: Dict[str, Any]) -> None:
    """Bad `work` suboptions fail before anything is read."""
    work = params["work"]
    if not work:
        return
    if work["dump_dir"] and work["kind"] != "generate":
        raise SglangError("work.dump_dir goes with work.kind=generate (got %s)" % work["kind"],
                          reason="invalid_argument")
    for key in ("dump_wait", "timeout"):
        if not 0 < work[key] <= 3600:
            raise SglangError("work.%s must be > 0 and <= 3600 s (got %s)" % (key, work[key]),
                              reason="invalid_argument")


def build_work(params: Dict[str, Any], check_mode: bool) -> Optional[_workproof.WorkCheck]:
    """The proof of work asked for; none in check mode (the request would make the server write)."""
    work = params["work"]
    if not work or check_mode:
        return None
    return _workproof.WorkCheck(kind=work["kind"], dump_dir=work["dump_dir"], dump_wait=work["dump_wait"],
                                timeout=work["timeout"])


def build_options(params: Dict[str, Any], record: Dict[str, Any], check_mode: bool = False) -> _readiness.Options:
    if params["timeout"] <= 0:
        raise SglangError("timeout must be > 0 (got %s)" % params["timeout"], reason="invalid_argument")
    if not 0.01 <= params["poll_interval"] <= 60:
        raise SglangError("poll_interval must be between 0.01 and 60 s (got %s)"
                          % params["poll_interval"], reason="invalid_argument")
    if not 0 <= params["settle"] <= SETTLE_MAX_S:
        raise SglangError("settle must be between 0 and %.0f s (got %s)" % (SETTLE_MAX_S, params["settle"]),
                          reason="invalid_argument")
    ready: List[str] = list(params["ready_patterns"] if params["ready_patterns"] is not None
                            else _logpatterns.READY_PATTERNS) + list(params["extra_ready_patterns"])
    fatal: List[str] = list(params["fatal_patterns"] if params["fatal_patterns"] is not None
                            else _logpatterns.FATAL_PATTERNS) + list(params["extra_fatal_patterns"])
    benign: List[str] = list(_logpatterns.BENIGN_PATTERNS) + list(params["extra_benign_patterns"])
    # Fail on a bad regex now, with the option's name, not mid-wait.
    _logpatterns.compile_patterns(ready, "ready_patterns")
    _logpatterns.compile_patterns(fatal, "fatal_patterns")
    _logpatterns.compile_patterns(benign, "extra_benign_patterns")
    expect = params["expect"] if params["expect"] is not None else (record.get("expect") or {})
    if not isinstance(expect, dict):
        raise SglangError("expect must be a dict of /server_info fields", reason="invalid_argument")
    node_rank: Optional[int] = params["node_rank"]
    if node_rank is None:
        node_rank = int(record.get("node_rank") or 0)
    if node_rank < 0:
        raise SglangError("node_rank must be >= 0 (got %d)" % node_rank, reason="invalid_argument")
    return _readiness.Options(
        timeout=params["timeout"], poll_interval=params["poll_interval"], ready_patterns=ready,
        fatal_patterns=fatal, benign_patterns=benign, settle=params["settle"], expect=dict(expect),
        health=params["health"], api_key=params["api_key"] or None, node_rank=node_rank,
        require_ready_line=params["require_ready_line"], work=build_work(params, check_mode))


def _store_location(params: Dict[str, Any], record: Dict[str, Any]) -> Dict[str, Any]:
    """Where this instance's last start is remembered (none for a record without a name)."""
    name = params["name"] or record.get("name")
    state_dir = params["state_dir"] or record.get("state_dir")
    if params["name"] and not state_dir:
        state_dir = _record.default_state_dir()
    if not name or not state_dir:
        return {"state_dir": None, "name": None}
    return {"state_dir": str(state_dir), "name": str(name)}


def _context(params: Dict[str, Any], record: Dict[str, Any], opts: _readiness.Options) -> Dict[str, Any]:
    """What a wait needs besides the readiness state, fixed when it begins."""
    where = _store_location(params, record)
    last = _timeline_store.baseline(where["state_dir"], where["name"], record.get("launch_id"))
    # a launch never judged ready is a start, even when it bound its port before the first poll
    opts.proven_before = _timeline_store.proven(where["state_dir"], where["name"], record.get("launch_id"))
    return dict(where, expect=opts.expect, node_rank=opts.node_rank, launch_id=record.get("launch_id"),
                launch_key=_last_good_r.wants_launch_key(params["api_key"], record),
                last_start_seconds=last.get("start_seconds") if last else None,
                warm=_timeline_store.warm_baseline(where["state_dir"], where["name"], record.get("launch_id")))


def _use_launch_key(module: Any, ctx: Dict[str, Any], opts: _readiness.Options) -> _readiness.Options:
    """No api key given for a server started with one: the key this launch ran with (its private
    secrets file), masked in everything the module returns."""
    key = _last_good_r.launch_key(ctx.get("state_dir"), ctx.get("name"), ctx.get("launch_id")) \
        if ctx.get("launch_key") else None
    if not key:
        return opts
    module.no_log_values.add(key)
    return dataclasses.replace(opts, api_key=key)


def _start_seconds(details: Dict[str, Any]) -> Optional[float]:
    for entry in details.get("timeline") or []:
        if entry.get("phase") in (_logpatterns.READY_PHASE, _logpatterns.NODE_READY_PHASE):
            return entry.get("seconds")
    return None


def _finish(module: Any, outcome: _readiness.Outcome, ctx: Dict[str, Any]) -> Dict[str, Any]:
    """The verdict as today's result, with this start compared with the last one (and
    remembered when it became ready)."""
    result = dict(outcome.details, ready=outcome.ready, reason=outcome.reason, changed=False,
                  msg=outcome.msg)
    fresh = outcome.ready and not result.get("already_running")
    start = _start_seconds(result)
    last = ctx.get("last_start_seconds")
    result.update(start_seconds=start, last_start_seconds=last,
                  slow_start=bool(fresh and _timeline_store.is_slow(start, last)))
    cold = _timeline_store.cold_phases(result.get("timeline") or [], ctx.get("warm") or {}) if fresh else []
    result.update(cold_start=bool(cold), cold_phases=cold)
    if cold:
        module.warn(_timeline_store.cold_text(cold))
    if fresh and start and ctx.get("state_dir") and ctx.get("name") and not module.check_mode:
        try:
            _timeline_store.remember(ctx["state_dir"], ctx["name"], result.get("launch_id"), start,
                                     result.get("timeline") or [])
        except SglangError as exc:  # the server is ready: a bookkeeping file does not undo that
            module.warn("the start's timeline was not remembered: %s" % exc.msg)
    if not outcome.ready:
        raise SglangError(result.pop("msg"), **result)
    promoted, warning = _last_good_r.promotion(module.params["promote"], ctx.get("state_dir"), ctx.get("name"),
                                               result.get("launch_id") or ctx.get("launch_id"), module.check_mode)
    result.update(promoted)
    if warning:
        module.warn(warning)
    if module.params["release_lock"] and ctx.get("state_dir") and ctx.get("name"):
        if not release_due(module.params.get("release_lock_after") or 0.0, result):
            # not yet held past the restart's hold: the lock stays with the run (a later call,
            # or the play's own release, gives it back)
            result["operation_lock_released"] = {
                "changed": False, "deferred": True, "lock_path": _lock.lock_path(ctx["state_dir"], ctx["name"])}
        else:
            result["operation_lock_released"] = _release_lock(module, ctx)
    return result


def release_due(after: float, result: Dict[str, Any]) -> bool:
    """The lock may go back: no minimum age asked, or the ready line is known to be that old."""
    age = ready_line_age(result)
    return after <= 0 or (age is not None and age >= after)


def ready_line_age(result: Mapping[str, Any]) -> Optional[float]:
    """Seconds since the server's ready line at the end of this call (None when unknown)."""
    since, start = result.get("since_launch"), result.get("start_seconds")
    if not isinstance(since, (int, float)) or not isinstance(start, (int, float)):
        return None
    return max(0.0, float(since) - float(start))


def _release_lock(module: Any, ctx: Dict[str, Any]) -> Dict[str, Any]:
    """The operation lock given back by its token: the server is ready, the restart is done.
    A failure to remove it does not undo readiness (the play's own release task tries again)."""
    try:
        out = _lock.release(ctx["state_dir"], ctx["name"], {}, token=module.params["release_lock"],
                            check_mode=module.check_mode)
    except SglangError as exc:
        module.warn("the operation lock was not released: %s" % exc.msg)
        return {"changed": False, "lock_path": _lock.lock_path(ctx["state_dir"], ctx["name"]), "kept": None,
                "error": exc.msg}
    if out["kept"]:
        module.warn("the lock %s is held by %s; left in place" % (out["path"], out["kept"]))
    if module.check_mode:  # nothing was removed: the play's own release task still must
        return {"changed": False, "would_release": out["changed"], "lock_path": out["path"], "kept": out["kept"]}
    return {"changed": out["changed"], "lock_path": out["path"], "kept": out["kept"],
            "token": module.params["release_lock"] if out["changed"] else None}


def _slice_seconds(params: Dict[str, Any]) -> float:
    value = params["slice_seconds"]
    value = 10.0 if value is None else value
    if not 0 < value <= SLICE_MAX_S:
        raise SglangError("slice_seconds must be > 0 and <= %.0f for a sliced wait (got %s)"
                          % (SLICE_MAX_S, value), reason="invalid_argument")
    return value


def _wait_sleep(module: Any, ctx: Dict[str, Any]) -> Callable[[float], None]:
    """The wait's sleep: one that refreshes the restart's operation lock while the wait lasts
    (O(release_lock) or O(refresh_lock)), after a first refresh now; else time.sleep."""
    token = module.params["release_lock"] or module.params["refresh_lock"]
    beat = _lock_refresh.heartbeat(ctx.get("state_dir"), ctx.get("name"), token, module.check_mode, module.warn)
    if beat is None:
        return time.sleep
    beat.beat()
    return beat.sleep


def _one_slice(module: Any, resume: Dict[str, Any]) -> Dict[str, Any]:
    """One slice of a sliced wait: the final result, or pending with the state to go on."""
    params = module.params
    seconds = _slice_seconds(params)
    if resume.get("state"):
        ctx = resume.get("ctx")
        if not isinstance(ctx, dict):
            raise SglangError("the resume state of a sliced wait has no context", reason="invalid_argument")
        opts = build_options(params, {"expect": ctx.get("expect") or {}, "node_rank": ctx.get("node_rank")},
                             module.check_mode)
        opts = _use_launch_key(module, ctx, opts)
        step = _readiness.wait_ready_slice(None, opts, resume["state"], seconds, sleep=_wait_sleep(module, ctx))
    else:
        record = load_record(params)
        opts = build_options(params, record, module.check_mode)
        ctx = _context(params, record, opts)
        opts = _use_launch_key(module, ctx, opts)
        step = _readiness.wait_ready_slice(record, opts, None, seconds, sleep=_wait_sleep(module, ctx))
    if step.outcome is not None:
        return _finish(module, step.outcome, ctx)
    return dict(step.pending, changed=False, ready=False, pending=True, reason="pending",
                msg="waiting for %s" % step.pending.get("waiting_for"), instance=ctx.get("name"),
                last_start_seconds=ctx.get("last_start_seconds"),
                resume_state={"state": step.state, "ctx": ctx})


def run(module: Any) -> Dict[str, Any]:
    """The module's whole work (module: its AnsibleModule): the result, or SglangError with ready false."""
    try:
        check_work(module.params)
        resume = module.params["_resume"]
        if resume is not None:
            return _one_slice(module, resume)
        record = load_record(module.params)
        opts = build_options(module.params, record, module.check_mode)
        ctx = _context(module.params, record, opts)
        opts = _use_launch_key(module, ctx, opts)
        outcome = _readiness.wait_ready(record, opts, sleep=_wait_sleep(module, ctx))
        return _finish(module, outcome, ctx)
    except SglangError as exc:  # its reason stays the one set where it was raised
        raise SglangError(exc.msg, **dict(exc.details, ready=False, changed=False))
