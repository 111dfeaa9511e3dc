"""The last proven-good launch of an instance, and the secrets each launch ran with.

The launch record `<name>.json` is replaced by every launch before its server is proven, so it
cannot be what a rollback goes back to: a run interrupted during a bad restart would lose the
only copy of the configuration that worked. Hence, in the state dir:

- `<name>.good.json` - a copy of the launch record of the last launch proven ready (and, when
  asked, proven to do its work), written by sglang_ready's `promote` only; what
  sglang_launch's `restore: last_good` starts again, in this run or in a later one.
- `<name>.secrets` - the secrets THIS launch was started with (api key, secret flags, secret
  environment values), written by the launcher before the launch record; the next launch
  replaces it.
- `<name>.good.secrets` - the last-good launch's secrets, promoted with its record.

Records never hold a secret (they travel in module results, masked); the secrets files are read
only by the module that starts or checks the server and never enter a result. All of them are
written like the launch record (a fresh O_EXCL|O_NOFOLLOW temporary file, fsync, rename, 0600,
in a state dir only its owner can write) and read without following a symlink, refused when
another user owns them or - the secrets files - when group or others can read them. The names
have a dot after the instance name, so no reader takes them for a launch record.
"""
from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record

FORMAT = 1


def good_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.good.json" % _record.validate_name(name))


def secrets_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.secrets" % _record.validate_name(name))


def good_secrets_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.good.secrets" % _record.validate_name(name))


def launch_secrets(api_key: Optional[str], args: Mapping[str, Any], env: Mapping[str, Any],
                   inputs: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The values the launch record's fingerprint_inputs mask (MASK), by the same keys: what a
    relaunch of that record needs besides the record."""
    inputs = inputs or {}
    masked_args = [k for k, v in (inputs.get("args") or {}).items() if v == MASK]
    masked_env = [k for k, v in (inputs.get("env") or {}).items() if v == MASK]
    return {"api_key": api_key if inputs.get("api_key") == MASK else None,
            "args": {k: args[k] for k in masked_args if k in args},
            "env": {k: env[k] for k in masked_env if k in env}}


def write_launch_secrets(state_dir: str, name: str, launch_id: str, secrets: Mapping[str, Any]) -> str:
    """This launch's secrets, before its record names it (so a record never lacks them)."""
    path = secrets_path(state_dir, name)
    _record.write_json_atomic(path, {"format": FORMAT, "launch_id": launch_id, "secrets": dict(secrets)})
    return path


def _read_private(path: str, label: str) -> Optional[Dict[str, Any]]:
    try:
        return _record.read_json(path, private=True)
    except SglangError as exc:
        raise SglangError("the %s %s cannot be used: %s" % (label, path, exc.msg), reason="last_good_unreadable",
                          path=path) from None


def read_launch_secrets(state_dir: str, name: str, launch_id: Optional[str]) -> Optional[Dict[str, Any]]:
    """The secrets launch `launch_id` was started with; None when the file is missing or names
    another launch. Raises SglangError last_good_unreadable for an unsafe or broken file."""
    data = _read_private(secrets_path(state_dir, name), "launch secrets file")
    if not data or not launch_id or data.get("launch_id") != launch_id or not isinstance(data.get("secrets"), dict):
        return None
    return data["secrets"]


def needs_secrets(inputs: Optional[Mapping[str, Any]]) -> bool:
    """Whether the record's configuration masks a value (a relaunch then needs its secrets)."""
    inputs = inputs or {}
    return inputs.get("api_key") == MASK or any(
        v == MASK for part in ("args", "env") for v in (inputs.get(part) or {}).values())


def _good_secrets(state_dir: str, name: str) -> Dict[str, Any]:
    data = _read_private(good_secrets_path(state_dir, name), "last-good secrets file") or {}
    entries = data.get("entries")
    return dict(entries) if isinstance(entries, dict) else {}


def promote(state_dir: str, name: str, launch_id: Optional[str]) -> Dict[str, Any]:
    """Make launch `launch_id` - the one in `<name>.json` now - the last good one, with its
    secrets. {promoted, last_good, launch_id}: promoted false when it already is. Raises
    SglangError (reason promote_failed) when the record names another launch or its secrets
    are missing; nothing is changed then.

    Three atomic writes, each leaving a usable pair behind: the good secrets with the new entry
    beside the old one, the good record, then the good secrets with the new entry only."""
    path = good_path(state_dir, name)
    record = _record.read_record(state_dir, name)
    if not record or not launch_id or record.get("launch_id") != launch_id:
        raise SglangError("launch %s was not promoted to last good: the launch record %s now names launch %s"
                          % (launch_id, _record.record_path(state_dir, name), (record or {}).get("launch_id")),
                          reason="promote_failed", path=path)
    try:
        current = _record.read_json(path)
    except SglangError:
        current = None  # a damaged last-good record is replaced by a proven one
    if current and current.get("launch_id") == launch_id and launch_id in _good_secrets(state_dir, name):
        return {"promoted": False, "last_good": path, "launch_id": launch_id}
    try:
        secrets = read_launch_secrets(state_dir, name, launch_id)
    except SglangError as exc:
        raise SglangError(exc.msg, reason="promote_failed", path=path) from None
    if secrets is None:
        if needs_secrets(record.get("fingerprint_inputs")):
            raise SglangError("launch %s was not promoted to last good: the secrets it was started with are not in %s"
                              % (launch_id, secrets_path(state_dir, name)), reason="promote_failed", path=path)
        secrets = {"api_key": None, "args": {}, "env": {}}
    try:
        old = _good_secrets(state_dir, name)
    except SglangError:
        old = {}
    keep = {k: v for k, v in old.items() if current and k == current.get("launch_id")}
    now = time.time()
    good = dict(record, promoted_at=now,
                promoted_at_utc=datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    secrets_file = good_secrets_path(state_dir, name)
    _record.write_json_atomic(secrets_file, {"format": FORMAT, "entries": dict(keep, **{launch_id: secrets})})
    _record.write_json_atomic(path, good)
    _record.write_json_atomic(secrets_file, {"format": FORMAT, "entries": {launch_id: secrets}})
    return {"promoted": True, "last_good": path, "launch_id": launch_id}


def summary(state_dir: str, name: str) -> Optional[Dict[str, Any]]:
    """What a result may say of the last-good record (no secrets): path, launch_id, fingerprint,
    promoted_at_utc; `error` when it cannot be read; None when there is none."""
    path = good_path(state_dir, name)
    try:
        data = _record.read_json(path)
    except SglangError as exc:
        return {"path": path, "launch_id": None, "fingerprint": None, "promoted_at_utc": None, "error": exc.msg}
    if data is None:
        return None
    return {"path": path, "launch_id": data.get("launch_id"), "fingerprint": data.get("fingerprint"),
            "promoted_at_utc": data.get("promoted_at_utc"), "error": None}


def load(state_dir: str, name: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(last-good record, its secrets). Raises SglangError no_last_good when there is none, and
    last_good_unreadable when it is unsafe, broken, incomplete or without its secrets."""
    path = good_path(state_dir, name)
    record = _read_private(path, "last-good record")
    if record is None:
        raise SglangError("instance %r has no last-good record (%s): no launch of it was proven ready with "
                          "promote (sglang_ready), so there is nothing to restore" % (name, path),
                          reason="no_last_good", path=path)
    inputs = record.get("fingerprint_inputs")
    launch_id = record.get("launch_id")
    if not isinstance(inputs, dict) or not inputs.get("model_path") or not record.get("fingerprint") or not launch_id:
        raise SglangError("the last-good record %s is incomplete (no fingerprint_inputs, fingerprint or launch_id)"
                          % path, reason="last_good_unreadable", path=path)
    secrets = _good_secrets(state_dir, name).get(launch_id)
    if not isinstance(secrets, dict):
        if needs_secrets(inputs):
            raise SglangError("the secrets of the last-good launch %s are missing from %s"
                              % (launch_id, good_secrets_path(state_dir, name)), reason="last_good_unreadable",
                              path=path)
        secrets = {}
    return record, secrets
