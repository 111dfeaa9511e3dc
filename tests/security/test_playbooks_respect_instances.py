"""Playbooks and the demo respect each other's instances.

Every playbook that stops or starts an instance holds its operation lock (teardown.yml and
restart_multinode.yml too); the demo derives its instance, port and directories from the
checkout and, when it fails, tears down only a server that it launched itself.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Dict, Iterator, Tuple

import pytest
import yaml

from helpers import play_runs
from helpers.fixtures import ROOT, free_port
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

DEMO = os.path.join(ROOT, "scripts", "demo.sh")


def _lock_file(hv: dict) -> str:
    return os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"])


def _serving(port: int) -> bool:
    return _http.request("127.0.0.1", port, "/health", timeout=2).status == 200


def _plant_live_holder(hv: dict, pid: int, host: str = "localhost") -> dict:
    """A lock held by a run that is alive on this controller (pid `pid`)."""
    os.makedirs(hv["sglang_state_dir"], mode=0o700, exist_ok=True)
    holder = _lock.new_holder({"controller": _lock.controller_identity(pid), "play": "Restart SGLang in serving mode",
                               "inventory_host": host}, now=time.time() - 3)
    with open(_lock_file(hv), "w") as fh:
        json.dump(holder, fh)
    return holder


@pytest.fixture
def running(tmp_path) -> Iterator[Tuple[str, dict]]:
    """One instance, launched by restart_serving.yml; torn down at the end."""
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    run = play_runs.play(inv, "restart_serving.yml")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    yield inv, hv
    if os.path.exists(_lock_file(hv)):
        os.unlink(_lock_file(hv))
    down = play_runs.teardown(inv)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def test_teardown_playbook_refuses_while_a_run_holds_the_lock(running, spawn):
    inv, hv = running
    other_run = spawn.start(["sleep", "300"])
    holder = _plant_live_holder(hv, other_run.pid)
    down = play_runs.teardown(inv)
    out = down.stdout + down.stderr
    assert down.returncode != 0, out[-3000:]
    assert "pid %d of" % other_run.pid in out and "still running" in out
    assert _serving(hv["sglang_port"]), "teardown.yml stopped a server while another run held its lock"
    assert _lock.read_holder(_lock_file(hv))["token"] == holder["token"]


def test_multinode_refuses_when_a_rank_is_locked(tmp_path, spawn):
    """One server over two localhost ranks; rank r1 is held by a live run: nothing starts
    anywhere, and the lock rank r0 took is given back."""
    hosts = {h: play_runs.host_vars(str(tmp_path), h) for h in ("r0", "r1")}
    for hv in hosts.values():
        hv["sglang_name"] = hosts["r0"]["sglang_name"]
    group = play_runs.demo_vars()
    group.update(sglang_multinode_dist_init_host="127.0.0.1", sglang_multinode_dist_init_port=free_port(),
                 sglang_startup_timeout=120)
    inv = str(tmp_path / "multinode.yml")
    with open(inv, "w") as fh:
        yaml.safe_dump({"all": {"children": {"sglang_multinode": {"hosts": hosts, "vars": group}}}}, fh)
    other_run = spawn.start(["sleep", "300"])
    holder = _plant_live_holder(hosts["r1"], other_run.pid, host="r1")
    try:
        run = play_runs.play(inv, "restart_multinode.yml")
        out = run.stdout + run.stderr
        assert run.returncode != 0, out[-3000:]
        assert "locked on r1" in out and "pid %d of" % other_run.pid in out
        for hv in hosts.values():
            assert not os.path.exists(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])), out[-3000:]
            assert not _serving(hv["sglang_port"])
        assert not os.path.exists(_lock_file(hosts["r0"])), "r0 kept its lock"
        assert _lock.read_holder(_lock_file(hosts["r1"]))["token"] == holder["token"]
    finally:
        if os.path.exists(_lock_file(hosts["r1"])):
            os.unlink(_lock_file(hosts["r1"]))
        down = play_runs.play(inv, "teardown.yml", "-e", "sglang_hosts=sglang_multinode")
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def _demo_env(demo_dir: str = "") -> Dict[str, str]:
    env = dict(os.environ)
    env.pop("LLMOPS_DEMO_DIR", None)
    if demo_dir:
        env["LLMOPS_DEMO_DIR"] = demo_dir
    out = subprocess.run(["bash", DEMO, "--env"], env=env, capture_output=True, text=True, timeout=30, check=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def test_demo_instance_comes_from_the_checkout(tmp_path):
    mine = _demo_env()
    assert mine["demo_dir"] == os.path.join(os.path.realpath(ROOT), ".cache", "demo")
    for key in ("state_dir", "log_dir", "dump_dir"):
        assert mine[key].startswith(mine["demo_dir"] + "/")
    other = _demo_env(str(tmp_path / "other-checkout"))
    assert other["name"] != mine["name"] and other["state_dir"] != mine["state_dir"]
    # the inventory derives the same instance name from the same directory
    res = subprocess.run([play_runs.ANSIBLE, "localhost", "-i", os.path.join(ROOT, "inventory", "local.yml"),
                          "-e", "sglang_demo_dir=%s" % other["demo_dir"], "-m", "ansible.builtin.debug",
                          "-a", "msg={{ sglang_name }}|{{ sglang_state_dir }}"],
                         cwd=ROOT, env=play_runs.env(), capture_output=True, text=True, timeout=60, check=False)
    assert "%s|%s" % (other["name"], other["state_dir"]) in res.stdout, res.stdout + res.stderr


def test_failed_demo_tears_down_nothing_it_did_not_start(tmp_path, spawn):
    """Another run of the same demo instance holds the lock and serves: this demo fails at
    the lock, and its error path stops nothing and leaves the other run's lock alone."""
    demo_dir = str(tmp_path / "demo")
    env = _demo_env(demo_dir)
    port = free_port()
    hv = play_runs.host_vars(str(tmp_path), "other", sglang_name=env["name"], sglang_port=port,
                             sglang_state_dir=env["state_dir"], sglang_log_dir=env["log_dir"])
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"localhost": hv})
    run = play_runs.play(inv, "restart_serving.yml")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    other_run = spawn.start(["sleep", "300"])
    holder = _plant_live_holder(hv, other_run.pid)
    try:
        demo = subprocess.run(["bash", DEMO], cwd=ROOT, env=dict(play_runs.env(), LLMOPS_DEMO_DIR=demo_dir,
                                                                 LLMOPS_DEMO_PORT=str(port)),
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False)
        out = demo.stdout + demo.stderr
        assert demo.returncode != 0, out[-3000:]
        assert "pid %d of" % other_run.pid in out
        assert "nothing to tear down" in out
        assert _serving(port), "the failed demo stopped a server it did not start"
        assert _lock.read_holder(_lock_file(hv))["token"] == holder["token"]
    finally:
        if os.path.exists(_lock_file(hv)):
            os.unlink(_lock_file(hv))
        down = play_runs.teardown(inv)
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def test_replace_and_teardown_entry_points_refuse_while_a_run_holds_the_lock(running, spawn, tmp_path):
    """An operator's play that runs the restart role's `replace` or `teardown` entry point without
    its `plan` (which takes the operation lock): another live run's lock refuses both before
    anything is stopped - the server that run is bringing up keeps running."""
    inv, hv = running
    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        pid = json.load(fh)["pid"]
    other_run = spawn.start(["sleep", "300"])
    holder = _plant_live_holder(hv, other_run.pid)
    for entry in ("replace", "teardown"):
        book = tmp_path / ("%s.yml" % entry)
        book.write_text(
            "- hosts: gpu_8x\n  gather_facts: false\n  tasks:\n"
            "    - ansible.builtin.import_role:\n        name: llmops.sglang.sglang_restart\n"
            "        tasks_from: %s\n" % entry)
        run = play_runs.play(inv, str(book))
        out = run.stdout + run.stderr
        assert run.returncode != 0, out[-3000:]
        assert "is locked by" in out and "pid %d of" % other_run.pid in out, out[-3000:]
        assert _serving(hv["sglang_port"]) and os.path.exists("/proc/%d" % pid), "%s stopped the server:\n%s" % (
            entry, out[-3000:])
        assert _lock.read_holder(_lock_file(hv))["token"] == holder["token"]
