"""PRIVATE to llmops.sglang. "Does THAT sglang accept this flag (with this value)?" as a yes/no.

Works on the flag table `_introspect.introspect` reads from sglang's own argument parser. Each
question gets `accepted`, the flag's valid choices, and a did-you-mean (difflib) for an unknown
flag name or an unknown value, with one sentence that says it all.
"""
from __future__ import annotations

import difflib
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._introspect import flag_lookup, normalize_flag

# Spellings of a switch's value (`{enable-metrics: true}`); anything else is not a switch value.
_TRUE = ("true", "yes", "on", "1", "")
_FALSE = ("false", "no", "off", "0")
_SWITCH_ACTIONS = ("store_true", "store_false", "store_const", "append_const", "count",
                   "BooleanOptionalAction")


def questions(spec: Any) -> List[Tuple[str, Any, bool]]:
    """The `flags` option in any of its forms -> [(name, value, value_asked)]:
    a list of names (does it exist?), a dict name -> value (is this value accepted? a null
    value asks only for the name), or a string `a,b=v` (the ad-hoc `-a flags=...` form)."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        return [(str(k), v, v is not None) for k, v in spec.items()]
    if isinstance(spec, str):
        spec = [s for s in (x.strip() for x in spec.split(",")) if s]
    if isinstance(spec, (list, tuple)):
        out: List[Tuple[str, Any, bool]] = []
        for item in spec:
            if isinstance(item, dict):
                out.extend(questions(item))
            elif isinstance(item, str) and "=" in item:
                name, value = item.split("=", 1)
                out.append((name.strip(), value.strip(), True))
            else:
                out.append((str(item), None, False))
        return out
    raise SglangError("flags must be a list of flag names or a mapping of flag name to value, got %s"
                      % type(spec).__name__, reason="bad_input")


def long_name(entry: Dict[str, Any]) -> str:
    opts = entry.get("option_strings") or []
    return next((o for o in opts if o.startswith("--")), opts[0] if opts else "?")


def _similar(word: str, options: List[str], n: int = 3) -> List[str]:
    return difflib.get_close_matches(word, options, n=n, cutoff=0.6)


def _is_switch(entry: Dict[str, Any]) -> bool:
    return entry.get("nargs") == 0 or entry.get("action") in _SWITCH_ACTIONS


def _items(entry: Dict[str, Any], value: Any) -> Tuple[Optional[List[Any]], Optional[str]]:
    """The value(s) argparse would see, or why the shape is wrong."""
    nargs = entry.get("nargs")
    many = nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1) or entry.get("action") in ("append", "extend")
    if isinstance(value, (list, tuple)):
        if not many:
            return None, "takes one value, not a list"
        items = list(value)
    elif many and isinstance(value, str):
        items = value.split()
    else:
        items = [value]
    if isinstance(nargs, int) and nargs > 1 and len(items) != nargs:
        return None, "takes exactly %d values, got %d" % (nargs, len(items))
    if nargs == "+" and not items:
        return None, "takes at least one value"
    return items, None


def _typed(kind: Optional[str], item: Any) -> Optional[str]:
    """None when `item` converts like argparse's type would, else why not."""
    text = str(item).lower() if isinstance(item, bool) else str(item)
    try:
        if kind == "int":
            int(text)
        elif kind == "float":
            float(text)
    except ValueError:
        return "%r is not %s" % (item, "an int" if kind == "int" else "a float")
    return None


def check_value(entry: Dict[str, Any], value: Any) -> Tuple[bool, Optional[str], List[str]]:
    """(accepted, why not, did-you-mean) for a value given to a flag."""
    if _is_switch(entry):
        text = str(value).lower()
        if isinstance(value, bool) or text in _TRUE + _FALSE or \
                (entry.get("action") == "count" and text.isdigit()):
            return True, None, []
        return False, "is a switch and takes no value (true to pass it, false to leave it out)", []
    items, why = _items(entry, value)
    if items is None:
        return False, why, []
    choices = entry.get("choices")
    names = [str(c) for c in choices] if isinstance(choices, list) else None
    for item in items:
        bad = _typed(entry.get("type"), item)
        if bad:
            return False, bad, []
        if names is not None and str(item) not in names:
            return False, "does not accept %r" % (item,), _similar(str(item), names)
    return True, None, []


def answer(flags: Dict[str, Dict[str, Any]], name: str, value: Any, value_asked: bool,
           version: Optional[str]) -> Dict[str, Any]:
    """One question's answer: {asked, flag, exists, value, accepted, choices, type, default,
    did_you_mean, answer}."""
    where = "sglang %s" % (version or "?")
    entry = flag_lookup(flags, name)
    out: Dict[str, Any] = {"asked": name, "flag": None, "exists": entry is not None, "value": value,
                           "accepted": False, "choices": None, "type": None, "default": None,
                           "did_you_mean": []}
    if entry is None:
        wanted = normalize_flag(name)
        known = sorted({o for e in flags.values() for o in e.get("option_strings", []) if o.startswith("--")})
        out["did_you_mean"] = _similar(wanted, known)
        hint = "; did you mean %s?" % " or ".join(out["did_you_mean"]) if out["did_you_mean"] else ""
        out["answer"] = "no: %s has no flag %s%s" % (where, wanted, hint)
        return out
    flag = long_name(entry)
    out.update(flag=flag, choices=entry.get("choices"), type=entry.get("type"), default=entry.get("default"))
    if not value_asked:
        out["accepted"] = True
        out["answer"] = "yes: %s has %s" % (where, flag)
        return out
    ok, why, similar = check_value(entry, value)
    out.update(accepted=ok, did_you_mean=similar)
    if ok:
        out["answer"] = "yes: %s %s accepts %s" % (where, flag, _show(value))
        return out
    text = "no: %s %s %s" % (where, flag, why)
    if similar:
        text += "; did you mean %s?" % " or ".join(similar)
    if out["choices"] is not None:
        text += " (valid choices: %s)" % ", ".join(str(c) for c in out["choices"])
    out["answer"] = text
    return out


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def answers(flags: Dict[str, Dict[str, Any]], spec: Any, version: Optional[str]) -> Dict[str, Dict[str, Any]]:
    """Every question of the `flags` option, keyed by the name as asked."""
    return {name: answer(flags, name, value, asked, version) for name, value, asked in questions(spec)}
