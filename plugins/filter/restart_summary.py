# -*- coding: utf-8 -*-
"""Filters that turn one restart's results into the operator's answer: where the host stands
(first line), then what was planned, stopped, launched, proven. Controller side only; the
words come from the restart's state machine (module_utils/_restart/_restart_outcome.py).

    {{ sglang_restart_result | llmops.sglang.restart_summary }}

A result set by the restart role (it has `head` and `summary`) is read as it is; older step
results (plan, teardown, launch, ready, rollback, failed_task) are judged by the state machine
without a final check.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping

from ansible_collections.llmops.sglang.plugins.module_utils._restart._restart_outcome import restart_outcome


def _inputs(data: Mapping[str, Any]) -> Dict[str, Any]:
    """Step results in the shape the role's facts had before the state machine."""
    out = dict(data)
    out["teardown_is_the_old_servers"] = True
    ready = data.get("ready")
    if isinstance(ready, Mapping) and ready and ready.get("ready") is False and ready.get("reason"):
        out["ready"] = dict(ready, failed=True)
    rollback = data.get("rollback")
    if isinstance(rollback, Mapping) and "record" not in rollback and "launch" not in rollback:
        out["rollback"] = {"record": dict(rollback)}
    if data.get("failed_task") and not data.get("error") and not any(
            isinstance(data.get(k), Mapping) and data[k].get("failed") for k in ("plan", "teardown", "launch", "ready")):
        out["error"] = {"task": data["failed_task"], "msg": data.get("failed_msg") or ""}
    return out


def outcome_of(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The role's result as it is, or the state machine's verdict on older step results."""
    if isinstance(data, Mapping) and data.get("head") and isinstance(data.get("summary"), list):
        return dict(data)
    return restart_outcome(_inputs(data if isinstance(data, Mapping) else {}))


def host_state(data: Mapping[str, Any]) -> str:
    """Where the host stands: the answer an operator looks for first."""
    return str(outcome_of(data)["head"])


def restart_summary(data: Mapping[str, Any]) -> List[str]:
    """The summary lines; the first says where the host stands."""
    return list(outcome_of(data)["summary"])


def restart_state(data: Mapping[str, Any]) -> str:
    return host_state(data)


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"restart_summary": restart_summary, "restart_state": restart_state}
