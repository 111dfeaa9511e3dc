"""Warnings of a module result, as texts."""
from __future__ import annotations

from typing import Any, Dict, List


def warnings_of(res: Dict[str, Any]) -> List[str]:
    """The warning texts of a module result (ansible-core 2.19 returns structured summaries
    {__ansible_type: WarningSummary, event: {msg}}; older cores return strings)."""
    out = []
    for item in res.get("warnings") or []:
        out.append(item if isinstance(item, str) else (item.get("event") or {}).get("msg", ""))
    return out
