"""Does the server report the configuration this launch asked for? /server_info compared with
the expected fields, the way operators write them."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

MISSING = "(not reported)"


def normalise(value: Any) -> Any:
    """Compare what operators write with what servers report: 8 == "8", "true" == True,
    "/m/x/" == "/m/x", None == "null"."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _normalise_text(value)
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    return value


def _normalise_text(value: str) -> Any:
    text = value.strip()
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return float(text)
    except ValueError:
        pass
    return os.path.normpath(text) if "/" in text else text


def compare_expected(expect: Dict[str, Any], info: Dict[str, Any]) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """(matched field -> actual, mismatches [{field, expected, actual}])."""
    matched: Dict[str, Any] = {}
    mismatches: List[Dict[str, Any]] = []
    for key in sorted(expect):
        want = expect[key]
        if key not in info:
            mismatches.append({"field": key, "expected": want, "actual": MISSING})
        elif normalise(want) == normalise(info[key]):
            matched[key] = info[key]
        else:
            mismatches.append({"field": key, "expected": want, "actual": info[key]})
    return matched, mismatches


def mismatch_table(mismatches: List[Dict[str, Any]]) -> str:
    return "; ".join("%s: expected %r, server reports %r" % (m["field"], m["expected"], m["actual"])
                     for m in mismatches)
