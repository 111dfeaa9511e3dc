"""sglang_ready and the host's last-good record (_host/_last_good): the api key a launch was
started with, and the promotion of a launch once it is proven ready and working.

The key: a launch record says whether its server has an api key (masked), never which. When the
caller gives none (a rollback: the controller only knows the new key, the restored server runs
the old one), the wait uses the key this very launch was started with, read from the launch's
private secrets file; it is sent only after the port owner was proven to be this launch, like
any key given.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK
from ansible_collections.llmops.sglang.plugins.module_utils._host import _last_good


def wants_launch_key(given: Optional[str], record: Mapping[str, Any]) -> bool:
    """No key given, and the record says its server was started with one."""
    inputs = record.get("fingerprint_inputs")
    return not given and isinstance(inputs, Mapping) and inputs.get("api_key") == MASK


def launch_key(state_dir: Optional[str], name: Optional[str], launch_id: Optional[str]) -> Optional[str]:
    """The api key launch `launch_id` was started with; None when its secrets file is gone or
    names another launch (the wait then runs without a key and says so on a 401)."""
    if not state_dir or not name or not launch_id:
        return None
    try:
        secrets = _last_good.read_launch_secrets(state_dir, name, launch_id)
    except SglangError:
        return None
    key = (secrets or {}).get("api_key")
    return key if isinstance(key, str) and key else None


def promotion(asked: bool, state_dir: Optional[str], name: Optional[str], launch_id: Optional[str],
              check_mode: bool) -> Tuple[Dict[str, Any], Optional[str]]:
    """(the result's `promoted` and `last_good`, a warning). Called only for a ready server whose
    proof of work (if any) passed. A promotion that fails leaves the last-good record as it was
    and is a warning, not a failure: the server is ready."""
    if not asked:
        return {"promoted": False, "last_good": None}, None
    if not state_dir or not name:
        return {"promoted": False, "last_good": None}, \
            "not promoted to last good: the launch record names no instance and state dir"
    path = _last_good.good_path(state_dir, name)
    if check_mode:
        return {"promoted": False, "last_good": path}, None
    try:
        out = _last_good.promote(state_dir, name, launch_id)
    except SglangError as exc:
        return {"promoted": False, "last_good": path, "promote_error": exc.msg}, exc.msg
    return {"promoted": out["promoted"], "last_good": out["last_good"]}, None
