"""The launch record: what one launch started, written atomically (0600) for the next steps.

teardown and ready work from this record, never from a guess made with a fresh `ps`.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any, Dict, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError

RECORD_VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise SglangError("instance name %r is invalid: use 1-64 letters, digits, '.', '_' or '-', "
                          "starting with a letter or digit" % (name,))
    return name


def default_state_dir() -> str:
    if os.geteuid() == 0:
        return "/var/lib/llmops-sglang"
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "llmops-sglang")


def record_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.json" % validate_name(name))


def exit_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.exit.json" % validate_name(name))


def tmpdir_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.tmp" % validate_name(name))


def ensure_dir(path: str, mode: int = 0o700) -> None:
    try:
        os.makedirs(path, mode=mode, exist_ok=True)
    except OSError as exc:
        raise SglangError("cannot create directory %s: %s" % (path, exc.strerror or exc))
    if not os.access(path, os.W_OK | os.X_OK):
        raise SglangError("directory %s is not writable by uid %d" % (path, os.geteuid()))


def write_json_atomic(path: str, data: Dict[str, Any], mode: int = 0o600) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_record(state_dir: str, name: str, record: Dict[str, Any]) -> str:
    ensure_dir(state_dir)
    path = record_path(state_dir, name)
    data = dict(record)
    data.setdefault("record_version", RECORD_VERSION)
    write_json_atomic(path, data)
    return path


def read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SglangError("cannot read %s: %s" % (path, exc))
    if not isinstance(data, dict):
        raise SglangError("%s does not hold a JSON object" % path)
    return data


def read_record(state_dir: str, name: str) -> Optional[Dict[str, Any]]:
    return read_json(record_path(state_dir, name))


def read_launch_exit(path: str, launch_id: Optional[str]) -> Optional[Dict[str, Any]]:
    """The exit file at `path` when it belongs to `launch_id` (any launch when None); a missing,
    unreadable or half-written file is None: the supervisor may be writing it right now."""
    try:
        data = read_json(path)
    except SglangError:
        return None
    if data and (not launch_id or data.get("launch_id") == launch_id):
        return data
    return None


def read_exit(state_dir: str, name: str) -> Optional[Dict[str, Any]]:
    return read_json(exit_path(state_dir, name))


def remove_record(state_dir: str, name: str) -> bool:
    try:
        os.unlink(record_path(state_dir, name))
        return True
    except FileNotFoundError:
        return False
