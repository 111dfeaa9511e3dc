"""The restart's operation lock without tasks of its own: sglang_launch's plan takes it in the same
call (`operation_lock`), sglang_ready gives it back once the server is ready (`release_lock`); the
plan also warms the new weights (`prewarm`). Module calls get the holder the way the action plugin
gives it. That the restart runs no lock or prewarm task and leaves no lock is asserted on the
playbook runs of test_ready_progress.py."""
from __future__ import annotations

import os
from typing import Any, Dict

from helpers.fixtures import ROOT, free_port, run_module
from helpers.warnings import warnings_of
from test_ready import launch, log_file, ready  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

ME = {"host": "ctl.example.org", "user": "ops", "program": "ansible-playbook", "pid": 4242, "pid_start": 77,
      "boot_id": "b", "machine_id": "m", "pid_ns": "pid:[1]"}
OTHER = dict(ME, host="bastion.example.org", user="alice", pid=99)
MODEL = os.path.join(ROOT, "inventory", "files", "demo-model")
PORT = free_port()  # the plans of this file (check mode) name one free port, never a fixed one


def _holder(ctl: Dict[str, Any]) -> Dict[str, Any]:
    return {"controller": dict(ctl), "play": "Restart", "inventory_host": "gpu-1"}


def _plan(state_dir: str, emulator_python: str, **kw: Any) -> Dict[str, Any]:
    args: Dict[str, Any] = {"name": "srv", "state_dir": state_dir, "venv": os.path.dirname(os.path.dirname(emulator_python)),
                            "model_path": MODEL, "port": PORT, "gpu_backend": "none",
                            "operation_lock": {"holder": _holder(ME)}}
    args.update(kw)
    return run_module("sglang_launch", args, check_mode=True)


def test_the_plan_takes_the_lock_and_refuses_another_holder(state_dir, emulator_python):
    took = _plan(state_dir, emulator_python)
    assert took["_rc"] == 0 and took["changed"] and took["reason"] == "new", took
    lock = took["operation_lock"]
    assert lock["reason"] == "taken" and os.path.isfile(lock["lock_path"]), lock
    assert _lock.read_holder(lock["lock_path"])["token"] == lock["holder"]["token"]
    # check mode: nothing else written but the preflight's flag cache
    assert sorted(os.listdir(state_dir)) == ["introspect-cache", "srv.restart.lock"]

    again = _plan(state_dir, emulator_python)
    assert again["operation_lock"]["reason"] == "held", again["operation_lock"]

    other = _plan(state_dir, emulator_python, operation_lock={"holder": _holder(OTHER)})
    assert other["_rc"] != 0 and other["reason"] == "locked", other
    assert "ops@ctl.example.org" in other["holder_text"] and other["lock_path"] == lock["lock_path"], other
    assert other["preflight"]["checks"], other  # the preflight's findings come with the refusal
    assert _lock.read_holder(lock["lock_path"])["token"] == lock["holder"]["token"]  # untouched


def test_no_lock_without_the_action_plugin_a_check_only_run_or_a_failed_preflight(state_dir, emulator_python):
    bare = _plan(state_dir, emulator_python, operation_lock={"ttl": 5})
    assert bare["_rc"] != 0 and bare["reason"] == "bad_option", bare
    assert "llmops.sglang.sglang_launch" in bare["msg"], bare

    dry = _plan(state_dir, emulator_python, operation_lock={"holder": _holder(ME), "check_only": True})
    assert dry["_rc"] == 0 and dry["operation_lock"]["reason"] == "taken", dry
    assert not os.path.exists(dry["operation_lock"]["lock_path"])

    refused = _plan(state_dir, emulator_python, port="80a")
    assert refused["_rc"] != 0 and refused["reason"] == "preflight_failed", refused
    assert "operation_lock" not in refused and "srv.restart.lock" not in os.listdir(state_dir)


def test_the_plan_warms_the_weights_only_when_the_server_must_change(state_dir, emulator_python, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(os.urandom(256 * 1024))
    warmed = _plan(state_dir, emulator_python, model_path=str(model), operation_lock=None,
                   prewarm={"threads": 1, "min_available": "1%", "timeout": 60})
    assert warmed["changed"] and warmed["prewarm"]["files"] >= 1, warmed
    assert warmed["prewarm"]["resident_after_pct"] == 100.0, warmed["prewarm"]

    nothing = _plan(state_dir, emulator_python, operation_lock=None, prewarm={"threads": 1})
    assert nothing["prewarm"]["failed"] and nothing["prewarm"]["reason"] == "no_weights", nothing  # no failure of the plan
    assert nothing["_rc"] == 0


def test_ready_gives_the_lock_back_only_when_ready_and_only_its_own(spawn, emulator_python, state_dir, log_file):
    taken = _lock.take(state_dir, "ready", _holder(ME))
    token = taken["holder"]["token"]

    dead = ready(state_dir, name="nosuch", release_lock=token)  # no server: not ready
    assert dead["_rc"] != 0 and "operation_lock_released" not in dead
    assert os.path.exists(taken["lock_path"])

    launch(spawn, emulator_python, state_dir, log_file)
    wrong = ready(state_dir, release_lock="not-the-token")
    assert wrong["ready"] and not wrong["operation_lock_released"]["changed"], wrong
    assert "ops@ctl.example.org" in wrong["operation_lock_released"]["kept"]
    assert any("left in place" in w for w in warnings_of(wrong)), wrong
    assert os.path.exists(taken["lock_path"])

    dry = ready(state_dir, check_mode=True, release_lock=token)  # check mode removes nothing, says so
    assert dry["operation_lock_released"] == {"changed": False, "would_release": True,
                                              "lock_path": taken["lock_path"], "kept": None}, dry
    assert os.path.exists(taken["lock_path"])

    mine = ready(state_dir, release_lock=token)
    assert mine["ready"] and mine["operation_lock_released"]["changed"], mine
    assert mine["operation_lock_released"]["token"] == token  # what the role compares with its plan's lock
    assert not os.path.exists(taken["lock_path"])


# That a restart runs no lock or prewarm task and leaves no lock (a first launch, then a real
# restart, through restart_extraction.yml): tests/integration/test_ready_progress.py::
# test_restart_extraction_shows_progress_before_the_ready_line asserts it on its own two runs of
# the same playbook, where this file ran the playbook twice more for it.
