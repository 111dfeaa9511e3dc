"""The last successful start of each instance, remembered in its state dir.

`<state_dir>/<name>.timeline.json` (0600, written atomically through `_record`'s safe writer)
holds the start that last became ready: its launch_id, the seconds from the launch to the
ready line, the phases with their seconds, and the start before it. A wait compares the start
it watches with the last one: how far along it is (progress), and whether it took more than
SLOW_FACTOR times as long (`slow_start`). A re-check of the same launch compares with the start
before it, so checking a server twice never makes it its own baseline.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

SLOW_FACTOR = 1.5
FORMAT = 1


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


def remember(state_dir: str, name: str, launch_id: Optional[str], start_seconds: float,
             timeline: List[Dict[str, Any]]) -> str:
    """Store this successful start as the last one (the former last one becomes `previous`,
    unless it is this launch already). Returns the path."""
    path = timeline_path(state_dir, name)
    stored = read(state_dir, name)
    previous = stored
    if stored is not None and launch_id and stored.get("launch_id") == launch_id:
        previous = _entry(stored.get("previous"))
    if previous is not None:
        previous = {k: previous.get(k) for k in ("launch_id", "start_seconds", "recorded_at")}
    data = {
        "format": FORMAT, "launch_id": launch_id, "start_seconds": round(float(start_seconds), 3),
        "recorded_at": round(time.time(), 3),
        "phases": [{"phase": t.get("phase"), "seconds": t.get("seconds")} for t in timeline],
        "previous": previous,
    }
    _record.ensure_dir(state_dir, label="state_dir")
    _record.write_json_atomic(path, data)
    return path
