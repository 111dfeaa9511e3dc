"""The last successful start of each instance, remembered in its state dir.

`<state_dir>/<name>.timeline.json` (0600, written atomically through `_record`'s safe writer)
holds the start that last became ready: its launch_id, the seconds from the launch to the
ready line, the phases with their seconds, and the start before it. A wait compares the start
it watches with the last one: how far along it is (progress), and whether it took more than
SLOW_FACTOR times as long (`slow_start`). A re-check of the same launch compares with the start
before it, so checking a server twice never makes it its own baseline.

A cold start is named: the phases that compile (COMPILING: CUDA graph capture - torch.compile
with --enable-torch-compile, DeepGEMM's JIT warm-up and the Triton/FlashInfer kernels the capture
builds - and, with --disable-cuda-graph, the first forward of the warm-up request, where those
JIT compiles land instead) are compared with the last WARM start's (`warm`: per phase the last
start in which it did not run cold). A phase ran cold when it took more than COLD_FACTOR times
as long, and at least COLD_MIN_EXTRA seconds more (`cold_phases`).
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

SLOW_FACTOR = 1.5
FORMAT = 1
COLD_FACTOR = 3.0
COLD_MIN_EXTRA = 5.0
# (what is reported, the phase it starts at, the phase it ends at) in _logpatterns' phase names
COMPILING = (
    ("cuda graph capture", "cuda graph begin", "cuda graph end"),
    ("warm-up request (first forward)", "http up", "ready"),
)


def timeline_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.timeline.json" % _record.validate_name(name))


def _entry(data: Any) -> Optional[Dict[str, Any]]:
    """A usable remembered start, or None (a hand-edited or foreign file is ignored)."""
    if not isinstance(data, dict):
        return None
    seconds = data.get("start_seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        return None
    return data


def read(state_dir: str, name: str) -> Optional[Dict[str, Any]]:
    """The stored file, or None when there is none or it cannot be read as one."""
    try:
        return _entry(_record.read_json(timeline_path(state_dir, name)))
    except SglangError:
        return None


def baseline(state_dir: Optional[str], name: Optional[str], launch_id: Optional[str]) -> Optional[Dict[str, Any]]:
    """The start to compare this launch with: the last one, or the one before it when the last
    one is this very launch (a re-check)."""
    if not state_dir or not name:
        return None
    stored = read(state_dir, name)
    if stored is None:
        return None
    if launch_id and stored.get("launch_id") == launch_id:
        return _entry(stored.get("previous"))
    return stored


def proven(state_dir: Optional[str], name: Optional[str], launch_id: Optional[str]) -> Optional[bool]:
    """Was this launch judged ready before (it is the remembered start, or the one before it)?
    None when that cannot be known: no state dir, name or launch id."""
    if not state_dir or not name or not launch_id:
        return None
    stored = read(state_dir, name)
    if stored is None:
        return False
    previous = _entry(stored.get("previous")) or {}
    return launch_id in (stored.get("launch_id"), previous.get("launch_id"))


def is_slow(start_seconds: Optional[float], last_seconds: Optional[float]) -> bool:
    return bool(start_seconds and last_seconds and start_seconds > SLOW_FACTOR * last_seconds)


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def compiling_phases(timeline: List[Dict[str, Any]]) -> Dict[str, float]:
    """Seconds of each compiling phase this start went through (from its timeline)."""
    at = {t.get("phase"): _number(t.get("seconds")) for t in timeline if isinstance(t, dict)}
    out: Dict[str, float] = {}
    for label, begin, end in COMPILING:
        a, b = at.get(begin), at.get(end)
        if a is not None and b is not None and b >= a:
            out[label] = round(b - a, 3)
    return out


def _warm_map(data: Any) -> Dict[str, Dict[str, Any]]:
    """A stored `warm` map, without what a hand-edited file could put there."""
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and (_number(v.get("seconds")) or 0) > 0}


def warm_baseline(state_dir: Optional[str], name: Optional[str], launch_id: Optional[str]) -> Dict[str, Dict[str, Any]]:
    """Per compiling phase the last warm start's seconds, launch_id and recorded_at (a re-check
    of the last start compares with what was warm before it)."""
    if not state_dir or not name:
        return {}
    stored = read(state_dir, name)
    if stored is None:
        return {}
    if launch_id and stored.get("launch_id") == launch_id:
        return _warm_map(stored.get("warm_before"))
    return _warm_map(stored.get("warm"))


def cold_phases(timeline: List[Dict[str, Any]], warm: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The compiling phases of this start that ran cold against the last warm start."""
    out: List[Dict[str, Any]] = []
    for label, seconds in compiling_phases(timeline).items():
        last = warm.get(label) or {}
        before = _number(last.get("seconds"))
        if before and seconds > COLD_FACTOR * before and seconds - before >= COLD_MIN_EXTRA:
            out.append({"phase": label, "seconds": seconds, "warm_seconds": before,
                        "warm_launch_id": last.get("launch_id"), "warm_recorded_at": last.get("recorded_at")})
    return out


def cold_text(cold: List[Dict[str, Any]]) -> str:
    """`cold start: cuda graph capture took 186.0 s, 6.5x the last warm start's 28.7 s (...)`."""
    parts = []
    for c in cold:
        when = c.get("warm_recorded_at")
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when)) if _number(when) else "?"
        parts.append("%s took %.1f s, %.1fx the last warm start's %.1f s (launch %s, %s)"
                     % (c["phase"], c["seconds"], c["seconds"] / c["warm_seconds"], c["warm_seconds"],
                        c.get("warm_launch_id") or "?", stamp))
    return "cold start (the compile caches were empty or unusable): " + "; ".join(parts)


def _next_warm(before: Dict[str, Dict[str, Any]], timeline: List[Dict[str, Any]], launch_id: Optional[str],
               now: float) -> Dict[str, Dict[str, Any]]:
    """The warm map after this start: each of its compiling phases that did not run cold
    becomes the reference; a cold one keeps the last warm start's."""
    cold = {c["phase"] for c in cold_phases(timeline, before)}
    out = dict(before)
    for label, seconds in compiling_phases(timeline).items():
        if label not in cold:
            out[label] = {"seconds": seconds, "launch_id": launch_id, "recorded_at": round(now, 3)}
    return out


def remember(state_dir: str, name: str, launch_id: Optional[str], start_seconds: float,
             timeline: List[Dict[str, Any]]) -> str:
    """Store this successful start as the last one (the former last one becomes `previous`,
    unless it is this launch already), and its warm compiling phases. Returns the path."""
    path = timeline_path(state_dir, name)
    stored = read(state_dir, name)
    previous = stored
    warm_before = _warm_map((stored or {}).get("warm"))
    if stored is not None and launch_id and stored.get("launch_id") == launch_id:
        previous = _entry(stored.get("previous"))
        warm_before = _warm_map(stored.get("warm_before"))
    if previous is not None:
        previous = {k: previous.get(k) for k in ("launch_id", "start_seconds", "recorded_at")}
    now = time.time()
    data = {
        "format": FORMAT, "launch_id": launch_id, "start_seconds": round(float(start_seconds), 3),
        "recorded_at": round(now, 3),
        "phases": [{"phase": t.get("phase"), "seconds": t.get("seconds")} for t in timeline],
        "previous": previous,
        "warm": _next_warm(warm_before, timeline, launch_id, now),
        "warm_before": warm_before,
    }
    _record.ensure_dir(state_dir, label="state_dir")
    _record.write_json_atomic(path, data)
    return path
