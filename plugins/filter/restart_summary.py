# -*- coding: utf-8 -*-
"""Filters that turn one restart's step results into the operator's answer: where the host
stands (first line), then what was planned, stopped, launched, proven. Controller side only.

    {{ {'name': ..., 'host': inventory_hostname, 'plan': ..., 'teardown': ..., 'launch': ...,
        'ready': ..., 'verified': ..., 'failed_task': ..., 'rollback': ...} | llmops.sglang.restart_summary }}
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Mapping, Optional


def _get(data: Mapping[str, Any], key: str) -> Dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _ran(result: Mapping[str, Any]) -> bool:
    """A registered result of a task that really ran (not skipped, not absent)."""
    return bool(result) and not result.get("skipped", False)


def host_state(data: Mapping[str, Any]) -> str:
    """Where the host stands now: the answer an operator looks for first."""
    plan, td, launch, ready = (_get(data, k) for k in ("plan", "teardown", "launch", "ready"))
    rollback = _get(data, "rollback")
    failed = bool(data.get("failed_task"))
    if data.get("check_mode"):
        return "check mode: %s" % ("would restart" if data.get("needed") else "nothing to do")
    if rollback.get("rolled_back"):
        return "serving OLD config (rolled back)"
    if rollback.get("attempted"):
        return "DOWN (no server: the rollback failed too)"
    stopped = _ran(td) and not td.get("failed")
    if failed and _ran(td) and td.get("failed") and (td.get("killed") or td.get("survivors")):
        # it signalled before it failed: some of the old server may be gone, some left (survivors)
        return "FAILED in the teardown: the old server is partly stopped (%d still alive)" % len(
            td.get("survivors") or [])
    if failed and not stopped:
        return "FAILED, nothing was stopped: serving %s" % (
            "OLD config (untouched)" if plan.get("record", {}).get("pid") else "nothing (no server was running)")
    if failed:
        return "DOWN (no server)"
    if _ran(launch) and launch.get("changed"):
        return "serving NEW config" if ready.get("ready") else "DOWN (no server)"
    if ready.get("ready"):
        return "serving (unchanged: the requested server was already running)"
    return "unknown (no step reported a server)"


def _stopped(td: Mapping[str, Any], check_mode: bool) -> str:
    if not _ran(td) or "targets" not in td:
        return "nothing"
    files = len(td.get("shm_removed") or [])
    if check_mode:
        pids = ", ".join(str(t.get("pid")) for t in td.get("targets") or [])
        return "nothing; would stop %d processes (%s) and remove %d files" % (len(td.get("targets") or []), pids, files)
    killed = td.get("killed") or []
    if not killed:
        return "no process was running, %d files removed" % files
    names = ", ".join("%s x%d" % kv for kv in Counter(k.get("name", "?") for k in killed).items())
    signals = ", ".join("%d by %s" % (n, s) for s, n in Counter(k.get("signal", "?") for k in killed).items())
    seconds = round(sum(float(v) for v in (td.get("timings") or {}).values()), 2)
    return "%d processes (%s; %s) in %s s, %d files removed" % (len(killed), names, signals, seconds, files)


def _launched(launch: Mapping[str, Any], plan: Mapping[str, Any]) -> str:
    if _ran(launch) and launch.get("changed"):
        rec = launch.get("record") or {}
        return "pid %s, sglang %s from %s" % (launch.get("pid"), rec.get("sglang_version", "?"), rec.get("interpreter", "?"))
    pid = (plan.get("record") or {}).get("pid")
    return "none (running: pid %s)" % pid if pid else "none"


def _ready(ready: Mapping[str, Any]) -> str:
    if ready.get("ready"):
        text = "yes, after %.1f s of waiting, %.1f s since launch; server %s" % (
            float(ready.get("elapsed") or 0), float(ready.get("since_launch") or 0), ready.get("server_version") or "?")
        if ready.get("slow_start"):
            text += "; SLOW START (%.0f s, the last start took %.0f s)" % (
                float(ready.get("start_seconds") or 0), float(ready.get("last_start_seconds") or 0))
        return text
    if ready.get("reason") == "work_failed":
        return "yes (its log, port owner, configuration and health), but the proof of work failed (work_failed)"
    if ready.get("reason"):
        return "NO (%s)" % ready["reason"]
    return "not checked"


def _timeline(ready: Mapping[str, Any]) -> str:
    steps = ready.get("timeline") or []
    return ", ".join("%s +%.1fs" % (s.get("phase"), float(s.get("seconds") or 0)) for s in steps) or "-"


def _lock(data: Mapping[str, Any]) -> Optional[str]:
    """The operation lock's part in this run (None when the role did not say)."""
    lock = data.get("lock")
    if not isinstance(lock, dict):
        return None
    if not lock.get("used", True):
        return "not used (sglang_restart_lock: false)"
    if lock.get("taken_over"):
        return "taken over: %s" % lock["taken_over"]
    if lock.get("failed"):
        return "REFUSED: %s" % (lock.get("holder_text") or lock.get("msg") or "?")
    if lock.get("lock_path"):
        return "held by this run (%s)" % lock["lock_path"]
    return "not taken"


def _changes(plan: Mapping[str, Any]) -> str:
    keys = [c.get("key", "?") for c in plan.get("changes") or [] if isinstance(c, dict)]
    return ", ".join(keys)


def _log_path(data: Mapping[str, Any]) -> str:
    ready, launch, plan = _get(data, "ready"), _get(data, "launch"), _get(data, "plan")
    return ready.get("log_path") or launch.get("log_path") or (plan.get("record") or {}).get("log_path") or "-"


def restart_summary(data: Mapping[str, Any]) -> List[str]:
    """The summary lines; the first says where the host stands."""
    plan, td, launch, ready = (_get(data, k) for k in ("plan", "teardown", "launch", "ready"))
    check_mode = bool(data.get("check_mode"))
    head = "%s on %s: %s" % (data.get("name", "?"), data.get("host", "?"), host_state(data))
    plan_line = "plan: %s%s" % (plan.get("reason", "not run"), " (forced)" if data.get("force") else "")
    if _changes(plan):
        plan_line += "; changes: " + _changes(plan)
    errors = (plan.get("preflight") or {}).get("errors") or []
    if errors:
        plan_line += "; preflight errors: " + " | ".join(str(e) for e in errors)
    foreign = [h for h in plan.get("port_holder") or [] if isinstance(h, dict) and h.get("foreign")]
    if foreign:
        plan_line += "; foreign port holder (%s): %s" % (data.get("foreign_port_holders", "?"), "; ".join(
            "%s %s" % (h.get("pid"), " ".join(h.get("cmdline") or [])) for h in foreign))
    lines = [head, plan_line]
    if data.get("failed_task"):
        lines.append("failed at: %s" % data["failed_task"])
    lock = _lock(data)
    if lock:
        lines.append("lock: " + lock)
    spared = td.get("spared") or []
    stopped = "stopped: " + _stopped(td, check_mode)
    if spared:
        stopped += "; %d spared (%s)" % (len(spared), ", ".join(
            "%s: %s" % (p.get("pid"), p.get("why_not", "?")) for p in spared[:5]))
    lines += [stopped,
              "launch: " + _launched(launch, plan),
              "ready: " + _ready(ready), "startup timeline: " + _timeline(ready),
              "verify: %s" % (data.get("verified") or "not run")]
    rollback = _get(data, "rollback")
    if rollback.get("attempted"):
        lines.append("rollback: %s" % ("old config relaunched, pid %s" % rollback.get("pid")
                                       if rollback.get("rolled_back") else "FAILED (%s)" % rollback.get("reason", "?")))
    log = _log_path(data)
    lines.append("log: %s" % (("tail -f " + log) if log != "-" else "-"))
    return lines


def restart_state(data: Mapping[str, Any]) -> str:
    return host_state(data)


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"restart_summary": restart_summary, "restart_state": restart_state}
