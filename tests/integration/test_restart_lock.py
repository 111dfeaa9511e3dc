"""sglang_lock on the managed host (the module alone, its holder given the way the action plugin
gives it): take, keep, refuse with the holder, compare-and-swap takeover, release, check mode."""
from __future__ import annotations

import os
import stat

from helpers.fixtures import run_module
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

ME = {"host": "ctl.example.org", "user": "ops", "program": "ansible-playbook", "pid": 4242, "pid_start": 77,
      "boot_id": "b", "machine_id": "m", "pid_ns": "pid:[1]"}
OTHER = dict(ME, host="bastion.example.org", user="alice", pid=99)


def _holder(ctl=None, host="gpu-1"):
    return {"controller": dict(ctl or ME), "play": "Restart", "inventory_host": host}


def _lock_args(state_dir, **kw):
    args = {"name": "srv", "state_dir": state_dir, "holder": _holder()}
    args.update(kw)
    return args


# Check mode writes nothing: tests/unit/modules/test_sglang_lock.yaml (in-process).


def test_take_keep_refuse(tmp_path):
    state = str(tmp_path / "state")
    first = run_module("sglang_lock", _lock_args(state))
    assert first["_rc"] == 0 and first["reason"] == "taken", first
    path = first["lock_path"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(state)) == ["srv.restart.lock"]  # no temporary file left
    again = run_module("sglang_lock", _lock_args(state))
    assert again["_rc"] == 0 and again["changed"] is False and again["reason"] == "held", again
    other = run_module("sglang_lock", _lock_args(state, holder=_holder(OTHER)))
    assert other["_rc"] != 0 and other["reason"] == "locked", other
    assert "ansible-playbook pid 4242 of ops@ctl.example.org" in other["msg"] and "?" not in other["msg"]
    assert other["holder"]["token"] == first["holder"]["token"] and other["age"] >= 0


def test_takeover_is_compare_and_swap(tmp_path):
    state = str(tmp_path / "state")
    first = run_module("sglang_lock", _lock_args(state))
    stale = run_module("sglang_lock", _lock_args(state, holder=_holder(OTHER), takeover="not-the-token"))
    assert stale["_rc"] != 0 and stale["reason"] == "locked", stale
    took = run_module("sglang_lock", _lock_args(state, holder=_holder(OTHER), takeover=first["holder"]["token"],
                                                takeover_reason="its ansible-playbook (pid 4242) is no longer running"))
    assert took["_rc"] == 0 and took["reason"] == "taken_over", took
    assert took["previous"]["token"] == first["holder"]["token"]
    assert took["taken_over"] == "its ansible-playbook (pid 4242) is no longer running"
    assert _lock.read_holder(took["lock_path"])["controller"]["user"] == "alice"


def test_release_only_our_own_or_forced(tmp_path):
    state = str(tmp_path / "state")
    first = run_module("sglang_lock", _lock_args(state))
    kept = run_module("sglang_lock", _lock_args(state, holder=_holder(OTHER), state="absent"))
    assert kept["_rc"] == 0 and kept["changed"] is False and kept["reason"] == "kept", kept
    assert "ops@ctl.example.org" in kept["kept"] and os.path.exists(first["lock_path"])
    other_host = run_module("sglang_lock", _lock_args(state, holder=_holder(host="gpu-2"), state="absent"))
    assert other_host["reason"] == "kept", other_host  # same run, another inventory host
    mine = run_module("sglang_lock", _lock_args(state, state="absent"), diff=True)
    assert mine["_rc"] == 0 and mine["changed"] is True and mine["reason"] == "released", mine
    assert os.listdir(state) == []
    run_module("sglang_lock", _lock_args(state))
    forced = run_module("sglang_lock", {"name": "srv", "state_dir": state, "state": "absent", "force": True})
    assert forced["_rc"] == 0 and forced["reason"] == "released", forced
    gone = run_module("sglang_lock", _lock_args(state, state="absent"))
    assert gone["_rc"] == 0 and gone["changed"] is False and gone["reason"] == "not_held", gone


def test_lock_directory_of_an_older_version(tmp_path):
    """An older collection's lock was a directory with an `owner` file: named, and taken over
    through its modification time (the age rule decides on the controller)."""
    state = tmp_path / "state"
    (state / "srv.restart.lock").mkdir(parents=True)
    (state / "srv.restart.lock" / "owner").write_text("root on the controller, play 'Restart', since X\n")
    refused = run_module("sglang_lock", _lock_args(str(state)))
    assert refused["_rc"] != 0 and refused["reason"] == "locked", refused
    assert "older llmops.sglang (root on the controller, play 'Restart', since X)" in refused["msg"]
    took = run_module("sglang_lock", _lock_args(str(state), takeover=_lock.lock_id(refused["holder"]),
                                                takeover_reason="older than ttl"))
    assert took["_rc"] == 0 and took["reason"] == "taken_over", took
    assert os.path.isfile(took["lock_path"])


# Without the action plugin (no holder) the module says so: tests/unit/modules/test_sglang_lock.yaml
# (in-process).
