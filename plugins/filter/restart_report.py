# -*- coding: utf-8 -*-
"""Filters for the restart report (HTML + Markdown, rendered on the controller by the
sglang_report role): one row per host from its step results, and the startup timeline as an
inline SVG bar chart (no JavaScript, no network)."""
from __future__ import annotations

from html import escape
from typing import Any, Dict, List, Mapping

from ansible_collections.llmops.sglang.plugins.filter.restart_summary import outcome_of

# One colour per startup phase family, in the order SGLang goes through them.
_PHASE_COLOURS = (
    ("init", "#8da0cb"), ("weight", "#fc8d62"), ("kv", "#e78ac3"), ("memory", "#e78ac3"),
    ("cuda graph", "#a6d854"), ("http", "#66c2a5"), ("warmup", "#ffd92f"), ("ready", "#1b9e77"),
)


def _colour(phase: str) -> str:
    for key, colour in _PHASE_COLOURS:
        if key in phase:
            return colour
    return "#b3b3b3"


def _d(data: Mapping[str, Any], key: str) -> Dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


# The row's colour: serving what was asked (ok), serving but the restart failed - rolled back, or
# refused with the old server untouched (warn), not serving (bad).
_STATUS = {"replaced": "ok", "unchanged": "ok", "adopted": "ok", "check": "ok",
           "rolled_back": "warn", "refused": "warn", "partly_stopped": "bad", "down": "bad"}


def _seconds(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def restart_report_row(data: Mapping[str, Any]) -> Dict[str, Any]:
    """One host of the report, from the restart's result (sglang_restart_result) or older step
    results (the same ones restart_summary takes)."""
    out = outcome_of(data)
    plan, td, launch, ready = (_d(out, k) for k in ("plan", "teardown", "launch", "ready"))
    rollback = _d(out, "rollback")
    state = str(out.get("state") or "down")
    serving = not (state in ("down", "partly_stopped") or (state == "refused" and "no server" in out["head"]))
    td_s = sum(_seconds(v) for v in (td.get("timings") or {}).values())
    launched = bool(launch.get("changed"))
    downtime = None  # seconds without a server, while the restart ran; None while the host is down
    if state == "replaced":
        downtime = td_s + _seconds(ready.get("since_launch"))
    elif state == "rolled_back":  # the failed start, then the old configuration's start
        downtime = td_s + _seconds(ready.get("since_launch")) + _seconds(rollback.get("since_launch"))
    changes = [str(c.get("key")) for c in plan.get("changes") or [] if isinstance(c, Mapping) and c.get("key")]
    return {
        "host": out.get("host") or data.get("host", "?"),
        "name": out.get("name") or data.get("name", "?"),
        "state": out["head"],
        "status": _STATUS.get(state, "bad"),
        "ok": state in ("replaced", "unchanged", "adopted", "check"),
        "old_pid": (plan.get("record") or {}).get("pid"),
        "new_pid": launch.get("pid") if launched else None,
        # the server that serves now: the new one, the rollback's, or the untouched old one
        "serving_pid": (out.get("serving_pid") or (rollback.get("pid") if state == "rolled_back" else None)
                        or (launch.get("pid") if state == "replaced" else None)) if serving else None,
        "downtime_s": round(downtime, 2) if downtime is not None else None,
        "down": not serving,
        "changes": ", ".join(changes) or plan.get("reason") or "-",
        "at": out.get("at") or data.get("at") or "",
        "timeline": [{"phase": str(s.get("phase")), "seconds": _seconds(s.get("seconds"))}
                     for s in ready.get("timeline") or []],
        "verified": out.get("verified") or "not run",
        "reason": out.get("reason") or ready.get("reason") or plan.get("reason") or "",
        "cause": out.get("cause") or "",
        "decisive_lines": list(ready.get("decisive_lines") or [])[:40],
        "log_path": ready.get("log_path") or launch.get("log_path") or "",
    }


def timeline_svg(timeline: List[Mapping[str, Any]], width: int = 640, bar_height: int = 18) -> str:
    """Horizontal bars, one per phase, from the previous phase's end to this one's time."""
    steps = [(str(s.get("phase")), float(s.get("seconds") or 0)) for s in timeline or []]
    if not steps:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" ' \
               'aria-label="no startup timeline"><text x="4" y="14" font-size="12">no startup timeline</text></svg>' \
               % (width, bar_height + 4)
    total = max(sec for _phase, sec in steps) or 1.0
    label_w, pad = 150, 4
    scale = (width - label_w - 60) / total
    rows: List[str] = []
    start = 0.0
    for i, (phase, sec) in enumerate(steps):
        y = pad + i * (bar_height + pad)
        x = label_w + start * scale
        w = max(2.0, (sec - start) * scale)
        rows.append('<text x="0" y="%d" font-size="12">%s</text>' % (y + bar_height - 5, escape(phase)))
        rows.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %.1f s to %.1f s</title></rect>'
                    % (x, y, w, bar_height, _colour(phase), escape(phase), start, sec))
        rows.append('<text x="%.1f" y="%d" font-size="11">%.1fs</text>' % (x + w + 3, y + bar_height - 5, sec))
        start = max(start, sec)
    height = pad + len(steps) * (bar_height + pad)
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" '
            'aria-label="startup timeline">%s</svg>' % (width, height, "".join(rows)))


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"restart_report_row": restart_report_row, "timeline_svg": timeline_svg}
