# -*- coding: utf-8 -*-
"""The operation lock's lifetime: how long one restart of one host may hold it, computed from
every step it may take, so that a second controller never takes over the lock of a run that is
still alive. Controller side only.

    {{ {'ready_timeout': sglang_restart_timeout, 'teardown_timeout': sglang_restart_teardown_timeout,
        'grace_period': sglang_restart_grace_period, 'spawn_timeout': sglang_restart_spawn_timeout,
        'settle': sglang_restart_ready_settle, 'verify_timeout': sglang_restart_verify_timeout,
        'dump_wait': sglang_restart_dump_wait,
        'prewarm_timeout': sglang_restart_prewarm_timeout if sglang_restart_prewarm else 0,
        'hold': sglang_restart_hold, 'check_timeout': sglang_restart_final_check_timeout,
        'rollback': sglang_restart_rollback} | llmops.sglang.lock_lifetime }}
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

# Seconds the plan's call may take besides the prewarm and the flag introspection: the
# interpreter's answer (30 s) and the instance lock (lock_timeout, 30 s).
PLAN_SECONDS = 60.0
INTROSPECT_SECONDS = 180.0  # sglang_launch's introspect_timeout default
# Ansible's own time around the module calls of one restart (task start-up, slices, the summary).
MARGIN_SECONDS = 300.0


def _seconds(steps: Mapping[str, Any], key: str) -> float:
    try:
        return max(0.0, float(steps.get(key) or 0))
    except (TypeError, ValueError):
        raise ValueError("lock_lifetime: %s must be a number of seconds, got %r" % (key, steps.get(key)))


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def breakdown(steps: Mapping[str, Any]) -> Dict[str, float]:
    """The seconds each step may take, by step: plan (+ prewarm), replace (teardown: the grace
    period, then up to its timeout; the spawn), ready (the wait and its settle window), verify
    (the proof of work and the dump it waits for), check (the last check, which keeps the lock
    until the server held for `hold` seconds after its ready line, then up to its own
    `check_timeout`), the rollback (the same teardown, spawn, readiness wait, proof and last
    check again, when it is on) and Ansible's margin."""
    teardown = _seconds(steps, "grace_period") + _seconds(steps, "teardown_timeout")
    launch = _seconds(steps, "spawn_timeout")
    ready = _seconds(steps, "ready_timeout") + _seconds(steps, "settle")
    verify = _seconds(steps, "verify_timeout") + _seconds(steps, "dump_wait")
    check = _seconds(steps, "hold") + _seconds(steps, "check_timeout")
    introspect = _seconds(steps, "introspect_timeout") if "introspect_timeout" in steps else INTROSPECT_SECONDS
    out = {"plan": PLAN_SECONDS + introspect, "prewarm": _seconds(steps, "prewarm_timeout"),
           "teardown": teardown, "launch": launch, "ready": ready, "verify": verify, "check": check,
           "rollback": (teardown + launch + ready + verify + check) if _truthy(steps.get("rollback", True)) else 0.0,
           "margin": MARGIN_SECONDS}
    return out


def lock_lifetime(steps: Mapping[str, Any]) -> float:
    """Seconds one restart may hold the operation lock: the sum of every step's longest time."""
    if not isinstance(steps, Mapping):
        raise ValueError("lock_lifetime needs a dict of the restart's timeouts, got %s" % type(steps).__name__)
    return round(sum(breakdown(steps).values()), 1)


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"lock_lifetime": lock_lifetime}
