"""The last proven-good record and the secrets files (_host/_last_good), the restore's
configuration (_launch/_launch_restore) and readiness' use of them (_readiness_last_good),
in-process: what is written where, with which mode, what refuses and with which reason."""
from __future__ import annotations

import json
import os
import stat
from typing import Any, Dict, Optional

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _last_good
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_restore
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness_last_good
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs

NAME = "unit"
KEY = "sk-old-key-0123456789"


def launch(state_dir: str, launch_id: str, api_key: Optional[str] = KEY, mem: float = 0.5,
           token: str = "hf_secret_value") -> Dict[str, Any]:
    """What sglang_launch leaves on the host for one launch: its secrets file, then its record."""
    args = {"--mem-fraction-static": mem, "--hf-token": token}
    env = {"SGLANG_X": "1", "HF_TOKEN": "hf_env_secret"}
    hashed, inputs = _cliargs.fingerprint_inputs("/venv/bin/python", "0.5.6", "launch_server", "/models/m",
                                                 "127.0.0.1", 30000, 1, args, env, api_key)
    _record.ensure_dir(state_dir)
    _last_good.write_launch_secrets(state_dir, NAME, launch_id, _last_good.launch_secrets(api_key, args, env, inputs))
    record = {"name": NAME, "launch_id": launch_id, "pid": 4242, "start_time": 1.0, "interpreter": "/venv/bin/python",
              "fingerprint": _cliargs.fingerprint(hashed), "fingerprint_inputs": inputs, "port": 30000}
    _record.write_record(state_dir, NAME, record)
    return record


def mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_launch_secrets_hold_exactly_what_the_record_masks():
    args = {"--mem-fraction-static": 0.5, "--hf-token": "t0k", "--off": False}
    env = {"HF_TOKEN": "e", "PLAIN": "p"}
    _hashed, inputs = _cliargs.fingerprint_inputs("/p", "v", "launch_server", "/m", "h", 1, 1, args, env, "k")
    assert _last_good.launch_secrets("k", args, env, inputs) == {
        "api_key": "k", "args": {"--hf-token": "t0k"}, "env": {"HF_TOKEN": "e"}}
    _hashed, plain = _cliargs.fingerprint_inputs("/p", "v", "launch_server", "/m", "h", 1, 1, {}, {}, None)
    assert _last_good.launch_secrets(None, {}, {}, plain) == {"api_key": None, "args": {}, "env": {}}
    assert _last_good.needs_secrets(inputs) and not _last_good.needs_secrets(plain)


def test_promote_copies_the_record_and_keeps_the_secrets_private(tmp_path):
    state = str(tmp_path / "state")
    record = launch(state, "a" * 32)
    out = _last_good.promote(state, NAME, "a" * 32)
    assert out == {"promoted": True, "last_good": os.path.join(state, "unit.good.json"), "launch_id": "a" * 32}
    good_text = open(out["last_good"]).read()
    good = json.loads(good_text)
    assert good["fingerprint"] == record["fingerprint"] and good["promoted_at_utc"]
    for secret in (KEY, "hf_secret_value", "hf_env_secret"):
        assert secret not in good_text and secret not in open(_record.record_path(state, NAME)).read()
        assert secret in open(_last_good.good_secrets_path(state, NAME)).read()
    for path in (out["last_good"], _last_good.good_secrets_path(state, NAME), _last_good.secrets_path(state, NAME)):
        assert mode(path) == 0o600
    assert _last_good.promote(state, NAME, "a" * 32)["promoted"] is False  # already the last good one
    loaded, secrets = _last_good.load(state, NAME)
    assert loaded["launch_id"] == "a" * 32 and secrets["api_key"] == KEY


def test_only_the_recorded_launch_with_its_secrets_is_promoted(tmp_path):
    state = str(tmp_path / "state")
    launch(state, "a" * 32)
    with pytest.raises(SglangError) as caught:
        _last_good.promote(state, NAME, "b" * 32)  # the record names another launch now
    assert caught.value.details["reason"] == "promote_failed"
    os.unlink(_last_good.secrets_path(state, NAME))
    with pytest.raises(SglangError) as caught:
        _last_good.promote(state, NAME, "a" * 32)  # a keyed server without its secrets: no half record
    assert caught.value.details["reason"] == "promote_failed" and "secrets" in caught.value.msg
    assert not os.path.exists(_last_good.good_path(state, NAME))


def test_a_new_launch_does_not_touch_the_last_good_one(tmp_path):
    state = str(tmp_path / "state")
    launch(state, "a" * 32)
    _last_good.promote(state, NAME, "a" * 32)
    launch(state, "b" * 32, api_key="sk-new-key-9876543210", mem=0.6)  # the bad restart, never proven
    record, secrets = _last_good.load(state, NAME)
    assert record["launch_id"] == "a" * 32 and secrets["api_key"] == KEY
    _last_good.promote(state, NAME, "b" * 32)
    record, secrets = _last_good.load(state, NAME)
    assert record["launch_id"] == "b" * 32 and secrets["api_key"] == "sk-new-key-9876543210"
    entries = json.load(open(_last_good.good_secrets_path(state, NAME)))["entries"]
    assert list(entries) == ["b" * 32]  # the old launch's secrets are gone once the new pair is whole


def test_an_interrupted_promotion_leaves_the_old_pair_usable(tmp_path, monkeypatch):
    state = str(tmp_path / "state")
    launch(state, "a" * 32)
    _last_good.promote(state, NAME, "a" * 32)
    launch(state, "b" * 32, api_key="sk-new-key-9876543210")
    real = _record.write_json_atomic
    calls = []

    def crash_on_the_record(path, data, mode=0o600):
        calls.append(path)
        if path.endswith(".good.json"):
            raise KeyboardInterrupt  # Ctrl-C between the secrets and the record
        real(path, data, mode)
    monkeypatch.setattr(_record, "write_json_atomic", crash_on_the_record)
    with pytest.raises(KeyboardInterrupt):
        _last_good.promote(state, NAME, "b" * 32)
    monkeypatch.setattr(_record, "write_json_atomic", real)
    record, secrets = _last_good.load(state, NAME)
    assert record["launch_id"] == "a" * 32 and secrets["api_key"] == KEY


def test_load_refuses_what_is_missing_or_damaged(tmp_path):
    state = str(tmp_path / "state")
    with pytest.raises(SglangError) as caught:
        _last_good.load(state, NAME)
    assert caught.value.details["reason"] == "no_last_good"
    launch(state, "a" * 32)
    _last_good.promote(state, NAME, "a" * 32)
    secrets_file = _last_good.good_secrets_path(state, NAME)
    os.chmod(secrets_file, 0o644)  # readable by others: refused, never used
    with pytest.raises(SglangError) as caught:
        _last_good.load(state, NAME)
    assert caught.value.details["reason"] == "last_good_unreadable" and "readable by group or others" in caught.value.msg
    os.chmod(secrets_file, 0o600)
    good = _last_good.good_path(state, NAME)
    os.rename(good, good + ".real")
    os.symlink(good + ".real", good)
    with pytest.raises(SglangError) as caught:
        _last_good.load(state, NAME)
    assert caught.value.details["reason"] == "last_good_unreadable" and "symlink" in caught.value.msg
    os.unlink(good)
    with open(good, "w") as fh:
        fh.write("{not json")
    os.chmod(good, 0o600)
    with pytest.raises(SglangError) as caught:
        _last_good.load(state, NAME)
    assert caught.value.details["reason"] == "last_good_unreadable"
    assert _last_good.summary(state, NAME)["error"]


def test_the_restore_configuration_is_proven_by_the_fingerprint(tmp_path):
    state = str(tmp_path / "state")
    launch(state, "a" * 32)
    _last_good.promote(state, NAME, "a" * 32)
    params, info = _launch_restore.apply({"model_path": "/new/model", "api_key": "sk-new", "venv": "/v",
                                          "name": NAME, "containment": "none"}, state, NAME)
    assert params["model_path"] == "/models/m" and params["api_key"] == KEY and params["venv"] is None
    assert params["python"] == "/venv/bin/python" and params["entrypoint"] == "launch_server"
    assert params["args"] == {"mem-fraction-static": 0.5, "hf-token": "hf_secret_value"}
    assert params["env"] == {"SGLANG_X": "1", "HF_TOKEN": "hf_env_secret"} and params["containment"] == "none"
    assert info["launch_id"] == "a" * 32 and KEY not in json.dumps(info)
    # a secrets file that does not give back the record's fingerprint (another key) is refused
    path = _last_good.good_secrets_path(state, NAME)
    data = json.load(open(path))
    data["entries"]["a" * 32]["api_key"] = "sk-tampered"
    _record.write_json_atomic(path, data)
    with pytest.raises(SglangError) as caught:
        _launch_restore.apply({}, state, NAME)
    assert caught.value.details["reason"] == "last_good_unreadable" and "fingerprint" in caught.value.msg
    assert "sk-tampered" not in caught.value.msg


def test_a_restore_stops_nothing_while_the_last_good_launch_itself_runs():
    own = {"launch_id": "a", "pid": os.getpid(), "start_time": None}
    assert _launch_restore.still_running({"launch_id": "a"}, own)
    assert not _launch_restore.still_running({"launch_id": "b"}, own)
    assert not _launch_restore.still_running({"launch_id": "a"}, None)


def test_readiness_uses_the_launch_key_and_promotes_only_when_asked(tmp_path):
    state = str(tmp_path / "state")
    record = launch(state, "a" * 32)
    assert _readiness_last_good.wants_launch_key(None, record)
    assert not _readiness_last_good.wants_launch_key("given", record)
    assert _readiness_last_good.launch_key(state, NAME, "a" * 32) == KEY
    assert _readiness_last_good.launch_key(state, NAME, "b" * 32) is None  # another launch's secrets: none
    assert _readiness_last_good.promotion(False, state, NAME, "a" * 32, False) == (
        {"promoted": False, "last_good": None}, None)
    out, warning = _readiness_last_good.promotion(True, state, NAME, "a" * 32, True)  # check mode
    assert out["promoted"] is False and warning is None and not os.path.exists(out["last_good"])
    out, warning = _readiness_last_good.promotion(True, state, NAME, "b" * 32, False)
    assert out["promoted"] is False and "not promoted" in warning and out["promote_error"] == warning
    out, warning = _readiness_last_good.promotion(True, state, NAME, "a" * 32, False)
    assert out == {"promoted": True, "last_good": _last_good.good_path(state, NAME)} and warning is None


@pytest.mark.parametrize("entry,is_record", [
    ("unit.json", True), ("unit-2_b.json", True), ("unit.exit.json", False), ("unit.timeline.json", False),
    ("unit.good.json", False), (".unit.json.abc.tmp", False), ("unit.secrets", False), (".json", False)])
def test_only_name_dot_json_is_a_launch_record(entry, is_record):
    assert _record.is_record_file(entry) is is_record


def test_restore_without_a_last_good_refuses_before_anything_is_created(tmp_path):
    from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec

    state = str(tmp_path / "state")
    p = dict(name=NAME, venv=None, python=None, search_paths=None, entrypoint="auto", model_path=None,
             host="127.0.0.1", port=30000, tp_size=1, args={}, env={}, api_key=None, log_dir=None,
             state_dir=state, keep_logs=5, state="started", lock_timeout=30.0, introspect_timeout=180.0,
             gpu_backend="none", gpu_check=True, allow_log_level_warning=False, foreign_port_holders="fail",
             min_free_mb=0.0, min_free_inodes=0, probe_timeout=5.0, spawn_timeout=30.0, containment="none",
             restore="last_good", teardown={"ports": [30000]})
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(p, check_mode=False, diff=False)
    assert caught.value.details["reason"] == "no_last_good" and "nothing to restore" in caught.value.msg
    assert not os.path.exists(state)  # no lock, no state dir: nothing was read or stopped


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_secrets_file_another_user_owns_is_never_used(tmp_path):
    state = str(tmp_path / "state")
    launch(state, "a" * 32)
    _last_good.promote(state, NAME, "a" * 32)
    os.chown(_last_good.good_secrets_path(state, NAME), 65534, 65534)  # swapped in by another user
    with pytest.raises(SglangError) as caught:
        _launch_restore.apply({}, state, NAME)
    assert caught.value.details["reason"] == "last_good_unreadable" and "owned by another user" in caught.value.msg
    os.chown(_last_good.secrets_path(state, NAME), 65534, 65534)
    assert _readiness_last_good.launch_key(state, NAME, "a" * 32) is None  # its key is not sent anywhere
