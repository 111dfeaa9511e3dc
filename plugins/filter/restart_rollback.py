# -*- coding: utf-8 -*-
"""The launch options that bring back the configuration of a previous launch record (the
rollback of a failed restart). Controller side only.

    {{ __sglang_restart_plan.record | llmops.sglang.rollback_launch_options(sglang_restart_args,
                                                                          sglang_restart_env, sglang_restart_api_key) }}
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK


def _flag(key: str) -> str:
    return "--" + str(key).strip().lstrip("-").replace("_", "-")


def _unmask(old: Mapping[str, Any], current: Mapping[str, Any], to_key: Any, label: str,
            missing: List[str]) -> Dict[str, Any]:
    """The old mapping with each masked value taken from the current configuration's same key
    (the record never stores a secret in clear); a masked key the current config lacks is missing."""
    current_by_key = {to_key(k): v for k, v in (current or {}).items()}
    out: Dict[str, Any] = {}
    for key, value in (old or {}).items():
        if value == MASK:
            if to_key(key) not in current_by_key:
                missing.append("%s.%s" % (label, key))
                continue
            value = current_by_key[to_key(key)]
        out[key] = value
    return out


def rollback_launch_options(record: Optional[Mapping[str, Any]], current_args: Optional[Mapping[str, Any]] = None,
                            current_env: Optional[Mapping[str, Any]] = None,
                            current_api_key: Optional[str] = None) -> Dict[str, Any]:
    """ok + the sglang_launch options of the record's configuration, or ok false + reason."""
    inputs = (record or {}).get("fingerprint_inputs") if isinstance(record, Mapping) else None
    if not isinstance(inputs, Mapping) or not inputs.get("interpreter") or not inputs.get("model_path"):
        return {"ok": False, "reason": "no previous launch record with its configuration (fingerprint_inputs)"}
    missing: List[str] = []
    args = _unmask(inputs.get("args") or {}, current_args or {}, _flag, "args", missing)
    env = _unmask(inputs.get("env") or {}, current_env or {}, str, "env", missing)
    api_key = inputs.get("api_key")
    if api_key == MASK:
        if not current_api_key:
            missing.append("api_key")
        api_key = current_api_key
    if missing:
        return {"ok": False, "reason": "the previous launch record masks %s and the current configuration "
                                       "has no value for it" % ", ".join(missing)}
    return {"ok": True, "reason": "", "python": inputs["interpreter"], "entrypoint": inputs.get("entrypoint") or "auto",
            "model_path": inputs["model_path"], "host": inputs.get("host"), "port": inputs.get("port"),
            "tp_size": inputs.get("tp_size"), "args": {k.lstrip("-"): v for k, v in args.items()},
            "env": env, "api_key": api_key or None, "pid": record.get("pid")}


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"rollback_launch_options": rollback_launch_options}
