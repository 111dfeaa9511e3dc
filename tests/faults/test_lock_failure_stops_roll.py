"""A host whose lock cannot be taken fails like any other failed host: the roll stops.

Three localhost aliases (h1, h2, h3), each with its own instance, rolled with serial 2: h1 and
h2 in the first batch, h3 in the second. When h2's lock is held (by a run on another
controller) or cannot be written (its state directory is on a full filesystem), h1 is
restarted, h2 fails, and h3 is never touched. A failed lock attempt leaves no file behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Dict, Iterator, List

import pytest

from helpers import tmpfs
from helpers import play_runs
from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock


def _lock_file(hv: dict) -> str:
    return os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"])


def _record(hv: dict) -> str:
    return os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])


def _serving(hv: dict) -> bool:
    return _http.request("127.0.0.1", hv["sglang_port"], "/health", timeout=2).status == 200


@pytest.fixture
def fleet(tmp_path) -> Iterator[Dict[str, dict]]:
    hosts = {h: play_runs.host_vars(str(tmp_path), h) for h in ("h1", "h2", "h3")}
    yield hosts
    inv = play_runs.write_inventory(str(tmp_path / "teardown-inventory.yml"), hosts)
    down = play_runs.teardown(inv)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def _roll(tmp_path, hosts: Dict[str, dict]) -> subprocess.CompletedProcess:
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), hosts)
    return play_runs.play(inv, "restart_serving.yml", "-e", "sglang_serial=2")


def _assert_roll_stopped_at_h2(run: subprocess.CompletedProcess, hosts: Dict[str, dict]) -> str:
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    assert _serving(hosts["h1"]), out[-4000:]          # batch 1: h1 restarted
    assert not os.path.exists(_record(hosts["h2"]))     # h2: nothing launched
    # batch 2: h3 never touched - no launch record, nothing on its port
    assert not os.path.exists(_record(hosts["h3"])), out[-4000:]
    assert not _serving(hosts["h3"])
    assert "Rolling restart stopped" in out
    return out


def test_lock_held_on_h2_stops_the_roll(tmp_path, fleet):
    h2 = fleet["h2"]
    os.makedirs(h2["sglang_state_dir"], mode=0o700)
    remote = {"host": "ops-bastion.example.org", "user": "alice", "program": "ansible-playbook",
              "pid": 4242, "pid_start": 99, "boot_id": "b", "machine_id": "m", "pid_ns": "pid:[1]"}
    holder = _lock.new_holder({"controller": remote, "play": "Restart SGLang in serving mode",
                               "inventory_host": "h2"}, now=time.time() - 30)
    with open(_lock_file(h2), "w") as fh:
        json.dump(holder, fh)
    out = _assert_roll_stopped_at_h2(_roll(tmp_path, fleet), fleet)
    assert "alice@ops-bastion.example.org" in out
    # the other run's lock is left as it was (and keeps teardown.yml off h2 too: remove it)
    assert _lock.read_holder(_lock_file(h2))["token"] == holder["token"]
    os.unlink(_lock_file(h2))


@pytest.fixture
def full_fs(tmp_path) -> Iterator[str]:
    """A 256 KiB tmpfs of the test's own, filled up (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = str(tmp_path / "full")
    os.makedirs(path)
    tmpfs.mount_private(path, "size=256k")
    try:
        yield path
    finally:
        tmpfs.unmount(path)


def _entries(path: str) -> List[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_unwritable_lock_on_h2_stops_the_roll_and_leaves_nothing(tmp_path, fleet, full_fs):
    h2 = fleet["h2"]
    h2["sglang_state_dir"] = os.path.join(full_fs, "state")
    # no free-space floor: else the plan's preflight refuses the full filesystem before the
    # lock is tried (which is what an operator gets by default)
    h2["sglang_min_free_mb"] = 0
    os.makedirs(h2["sglang_state_dir"], mode=0o700)
    tmpfs.fill(full_fs)
    before = _entries(h2["sglang_state_dir"])
    out = _assert_roll_stopped_at_h2(_roll(tmp_path, fleet), fleet)
    assert "No space left on device" in out
    # (the plan's preflight keeps its flag cache there; the lock attempt left nothing, no temporary file)
    left = [e for e in _entries(h2["sglang_state_dir"]) if e != "introspect-cache"]
    assert left == before, "a failed lock attempt left files behind"
    assert wait_for(lambda: not os.path.exists(_lock_file(h2)), 1)
