"""An interrupted restart (Ctrl-C, SIGKILL of ansible-playbook) must not lock the instance out.

The operation lock records its holder (controller, ansible-playbook pid and start time, play,
since when). The next run on the same controller takes over a lock whose holder is provably
gone; a live holder and a holder on another controller are refused with who and how long.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid

import pytest

from helpers import play_runs
from helpers.fixtures import ROOT, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

# the demo inventory's server environment, with slow startup phases (time to interrupt)
SLOW_ENV = dict(play_runs.demo_vars()["sglang_env"], SGLANG_EMULATOR_PHASE_SECONDS="1.5")


def _lock_file(hv: dict) -> str:
    return os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"])


def _record(hv: dict) -> str:
    return os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])


def _interrupt_during_ready(inv: str, hv: dict, log: str, how: str) -> None:
    """Start restart_serving.yml with a slow server; once it has launched (lock taken, launch
    record written) interrupt it like an operator (SIGINT to the group) or the OOM killer."""
    proc = play_runs.start(inv, "restart_serving.yml", log, "-e", json.dumps({"sglang_env": SLOW_ENV}))
    try:
        launched = wait_for(lambda: proc.poll() is not None or (
            os.path.exists(_record(hv)) and os.path.exists(_lock_file(hv))), 180, 0.1)
        assert launched and proc.poll() is None, open(log).read()[-3000:]
        if how == "sigint":
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        else:
            play_runs.kill_tree(proc.pid)
            proc.wait(timeout=30)
    finally:
        play_runs.kill_tree(proc.pid)
    assert os.path.exists(_lock_file(hv)), "the interrupted run released its lock: nothing to test"


@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_next_run_takes_over_the_lock_of_an_interrupted_run(one_host, tmp_path, how):
    inv, hv = one_host
    _interrupt_during_ready(inv, hv, str(tmp_path / "interrupted.log"), how)

    again = play_runs.play(inv, "restart_serving.yml")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    assert "held by: ?" not in out and "held by ?" not in out
    assert "is no longer running" in out  # the takeover says why
    assert not os.path.exists(_lock_file(hv)), "the second run left its lock"
    assert _http.request("127.0.0.1", hv["sglang_port"], "/health", timeout=5).status == 200


def _adhoc_lock(inv: str, hv: dict, *args: str) -> subprocess.CompletedProcess:
    """sglang_lock through its action plugin, the way a play calls it."""
    argv = [play_runs.ANSIBLE, "h1", "-i", inv, "-m", "llmops.sglang.sglang_lock",
            "-a", " ".join(("name=%s" % hv["sglang_name"], "state_dir=%s" % hv["sglang_state_dir"]) + args)]
    return subprocess.run(argv, cwd=ROOT, env=play_runs.env(), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)


def _plant(hv: dict, controller: dict, age: float = 5.0, play: str = "Restart SGLang in serving mode") -> dict:
    os.makedirs(hv["sglang_state_dir"], mode=0o700, exist_ok=True)
    holder = _lock.new_holder({"controller": controller, "play": play, "inventory_host": "h1"},
                              now=time.time() - age)
    with open(_lock_file(hv), "w") as fh:
        json.dump(holder, fh)
    return holder


def _here(pid: int) -> dict:
    return _lock.controller_identity(pid)


def test_live_holder_on_this_controller_is_refused_with_its_name(tmp_path, spawn):
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    sleeper = spawn.start(["sleep", "300"])
    holder = _plant(hv, _here(sleeper.pid), age=42)
    res = _adhoc_lock(inv, hv)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "locked" in out and "pid %d of" % sleeper.pid in out and "still running" in out
    assert re.search(r"\((4\d|5\d) s ago\)", out), out
    assert _lock.read_holder(_lock_file(hv))["token"] == holder["token"]  # untouched


def test_reused_pid_is_taken_over(tmp_path, spawn):
    """The recorded pid runs again, but it is another process (another start time)."""
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    other = spawn.start(["sleep", "300"])
    ctl = dict(_here(other.pid), pid_start=_lock.process_start(other.pid) - 1000)
    _plant(hv, ctl)
    res = _adhoc_lock(inv, hv)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "is now another process" in out
    now = _lock.read_holder(_lock_file(hv))
    assert now["controller"]["pid"] != other.pid and now["controller"]["host"] == ctl["host"]


def test_lock_from_another_controller_is_reported_then_stale_by_age(tmp_path):
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    remote = {"host": "ctl-%s.example.org" % uuid.uuid4().hex[:6], "user": "alice", "program": "ansible-playbook",
              "pid": 4242, "pid_start": 99, "boot_id": "b", "machine_id": "m", "pid_ns": "pid:[1]"}
    _plant(hv, remote, age=120)
    res = _adhoc_lock(inv, hv, "ttl=600")
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "alice@%s" % remote["host"] in out and "pid 4242" in out
    assert re.search(r"\(1[2-9]\d s ago\)", out), out
    assert "reason: locked" in out and "cannot check whether that run is alive" in out, out
    assert "?" not in out.split("is locked by", 1)[1].split("\n", 1)[0]
    res = _adhoc_lock(inv, hv, "ttl=60")  # older than ttl: the last resort
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "older than ttl" in out
    assert _lock.read_holder(_lock_file(hv))["controller"]["host"] != remote["host"]


def test_judge_holder_rules():
    me = {"host": "c", "machine_id": "m", "boot_id": "b", "pid_ns": "ns", "pid": 10, "pid_start": 5}
    starts = {20: 7, 30: 8}

    def start_of(pid):
        return starts.get(pid)

    def verdict(**ctl):
        return _lock.judge_holder({"controller": dict(me, **ctl)}, me, start_of)[0]

    assert verdict(pid=20, pid_start=7) == "alive"
    assert verdict(pid=21, pid_start=7) == "gone"          # not running
    assert verdict(pid=30, pid_start=1) == "gone"          # pid reused
    assert verdict(pid=20, pid_start=7, boot_id="x") == "gone"   # controller rebooted
    assert verdict(pid=20, pid_start=7, host="other") == "foreign"
    assert verdict(pid=20, pid_start=7, machine_id="other") == "foreign"
    assert verdict(pid=20, pid_start=7, pid_ns="other") == "foreign"
    assert _lock.judge_holder({}, me, start_of)[0] == "foreign"
    # a controller without /proc (no start times): existence alone, a live pid is never taken over
    blind = dict(me, pid_start=None)
    assert _lock.judge_holder({"controller": dict(blind, pid=20)}, blind, start_of, lambda pid: True)[0] == "alive"
    assert _lock.judge_holder({"controller": dict(blind, pid=21)}, blind, start_of, lambda pid: False)[0] == "gone"
    assert _lock.takeover_reason("foreign", "w", 10, 0) is None
    assert _lock.takeover_reason("foreign", "w", 10, 5) is not None
    assert _lock.takeover_reason("alive", "w", 1e9, 5) is None
    assert "?" not in _lock.describe_holder({}) and "?" not in _lock.describe_holder({"legacy": True})


def test_controller_pid_is_the_playbook(tmp_path):
    """The holder's pid is the ansible-playbook process itself, not its short-lived worker."""
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    playbook = tmp_path / "take.yml"
    playbook.write_text("- name: Take the lock\n  hosts: h1\n  gather_facts: false\n  tasks:\n"
                        "    - llmops.sglang.sglang_lock: {name: '%s', state_dir: '%s'}\n"
                        % (hv["sglang_name"], hv["sglang_state_dir"]))
    proc = subprocess.Popen([play_runs.PLAYBOOK, "-i", inv, str(playbook)], cwd=ROOT, env=play_runs.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, out[-3000:]
    holder = _lock.read_holder(_lock_file(hv))
    assert holder["controller"]["pid"] == proc.pid
    assert holder["controller"]["program"] == "ansible-playbook"
    assert holder["play"] == "Take the lock" and holder["inventory_host"] == "h1"
