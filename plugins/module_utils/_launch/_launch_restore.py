"""PRIVATE to llmops.sglang. sglang_launch's `restore: last_good`: the launch options of the
instance's last proven-good launch (_host/_last_good), secrets included.

The server configuration (interpreter, entry point, model, host, port, tp size, args, env, api
key) comes from the last-good record and its secrets file; the module's own server options are
ignored (their defaults cannot be told from values given). The operational options (state and
log dirs, locks, containment, the preflight's policies, `teardown`) stay the caller's. Before
anything else is read the configuration is proven whole: the record's fingerprint is computed
again from it with the secrets filled in, so a damaged or mismatched secrets file refuses the
restore (last_good_unreadable) instead of starting a server with the wrong key.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK
from ansible_collections.llmops.sglang.plugins.module_utils._host import _last_good
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs

RESTORE_CHOICES = ("none", "last_good")
# The options that say which server runs: taken from the last-good record, never from the call.
SERVER_OPTIONS = ("venv", "python", "entrypoint", "model_path", "host", "port", "tp_size", "args", "env", "api_key")


def _unreadable(path: str, why: str) -> SglangError:
    return SglangError("the last-good record %s cannot be restored: %s" % (path, why), reason="last_good_unreadable",
                       path=path)


def _filled(part: str, masked: Mapping[str, Any], secrets: Mapping[str, Any], path: str) -> Dict[str, Any]:
    """`masked` (the record's args or env) with every MASK replaced by the secrets file's value."""
    known = secrets.get(part) or {}
    out: Dict[str, Any] = {}
    for key, value in masked.items():
        if value == MASK:
            if key not in known:
                raise _unreadable(path, "its secrets file has no value for %s.%s" % (part, key))
            value = known[key]
        out[key] = value
    return out


def configuration(record: Mapping[str, Any], secrets: Mapping[str, Any], path: str) -> Dict[str, Any]:
    """The server options of the record, proven by its fingerprint."""
    inputs = record["fingerprint_inputs"]
    try:
        args = _filled("args", dict(inputs.get("args") or {}), secrets, path)
        env = {str(k): str(v) for k, v in _filled("env", dict(inputs.get("env") or {}), secrets, path).items()}
        api_key: Optional[str] = None
        if inputs.get("api_key") == MASK:
            api_key = secrets.get("api_key")
            if not api_key:
                raise _unreadable(path, "its secrets file has no api key, and the server ran with one")
        hashed, _redacted = _cliargs.fingerprint_inputs(
            inputs["interpreter"], inputs.get("sglang_version") or "", inputs["entrypoint"], inputs["model_path"],
            inputs["host"], inputs["port"], inputs["tp_size"], args, env, api_key)
    except (KeyError, TypeError, AttributeError) as exc:
        raise _unreadable(path, "its configuration (fingerprint_inputs) is incomplete: %s" % exc) from None
    if _cliargs.fingerprint(hashed) != record.get("fingerprint"):
        raise _unreadable(path, "its configuration and secrets do not give its fingerprint (a damaged or "
                                "replaced file)")
    return {"venv": None, "python": record.get("interpreter") or inputs["interpreter"],
            "entrypoint": inputs["entrypoint"], "model_path": inputs["model_path"], "host": inputs["host"],
            "port": inputs["port"], "tp_size": inputs["tp_size"], "env": env, "api_key": api_key,
            # the module's spelling (no dashes); the record keeps the normalised --flag
            "args": {k[2:] if k.startswith("--") else k: v for k, v in args.items()}}


def apply(p: Mapping[str, Any], state_dir: str, name: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the module's parameters with the last-good server options, what was restored - no
    secrets). Raises SglangError no_last_good / last_good_unreadable before anything is read."""
    record, secrets = _last_good.load(state_dir, name)
    path = _last_good.good_path(state_dir, name)
    params = dict(p)
    params.update(configuration(record, secrets, path))
    info = {"from": path, "launch_id": record.get("launch_id"), "fingerprint": record.get("fingerprint"),
            "promoted_at_utc": record.get("promoted_at_utc"), "pid": record.get("pid"),
            "start_time": _procs.record_start(record)}
    return params, info


def still_running(restored: Mapping[str, Any], record: Optional[Mapping[str, Any]]) -> bool:
    """The last-good launch itself is the recorded one and still alive: a restore stops nothing."""
    if not record or record.get("launch_id") != restored.get("launch_id") or not isinstance(record.get("pid"), int):
        return False
    return _procs.is_alive(record["pid"], _procs.record_start(record))
