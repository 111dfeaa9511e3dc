"""Progress lines of sglang_teardown against the emulator: a tree that ignores SIGTERM, stopped
by a playbook. The default output shows, in order, the grace deadline before the module runs,
then what SIGTERM and SIGKILL ended, the verification and the files; a machine-format callback
gets none of it, and the task's result is the module's own."""
from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from typing import Any, Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers import ready_launch
from helpers.fixtures import ROOT, run_module

PLAYBOOK = os.path.join(ROOT, "tests", "integration", "playbooks", "teardown_progress.yml")
CALLBACKS = os.path.join(ROOT, "tests", "integration", "progress_callbacks")
IGNORES = {"SGLANG_EMULATOR_FAULT": "ignore_sigterm"}


# Ansible's default: the task banner at the task's start (the collection's ansible.cfg sets
# display_skipped_hosts = false, which makes Ansible print a banner with the task's first
# result, after the live lines; docs/limits.md)
BANNER_FIRST = {"ANSIBLE_DISPLAY_SKIPPED_HOSTS": "true"}


def _play(extra: Dict[str, Any], env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventory", "local.yml"),
            PLAYBOOK, "-e", json.dumps(extra)]
    run_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_NOCOLOR="1")
    run_env.pop("LLMOPS_SGLANG_PROGRESS", None)
    run_env.update(env or {})
    return subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)


def _server(spawn, emulator_python, state_dir, log_dir, name: str):
    proc, record = ready_launch.launch(spawn, emulator_python, state_dir, os.path.join(log_dir, name + ".log"),
                                       name=name, env=IGNORES)
    res = ready_launch.ready(state_dir, name=name, timeout=60)
    assert res["ready"], res.get("msg")
    return proc, record


def _ours(out: str, name: str) -> List[str]:
    return [m.group(1) for m in re.finditer(r"^localhost %s teardown: (.*)$" % re.escape(name), out, re.M)]


def test_teardown_prints_the_deadline_then_each_phase_in_order(spawn, emulator_python, state_dir, log_dir, tmp_path):
    name = "tprog-%s" % uuid.uuid4().hex[:6]
    proc, record = _server(spawn, emulator_python, state_dir, log_dir, name)
    dump = tmp_path / "hs"
    dump.mkdir(mode=0o700)
    (dump / "hs_1.pt").write_bytes(b"x")
    run = _play({"sglang_name": name, "sglang_state_dir": state_dir, "sglang_port": record["port"],
                 "sglang_purge_paths": [str(dump)]}, BANNER_FIRST)
    out = run.stdout
    assert run.returncode == 0, (out + run.stderr)[-4000:]
    assert proc.wait(timeout=10) is not None
    lines = _ours(out, name)
    assert len(lines) == 5, lines
    before, term, kill, verified, removed = lines
    assert re.match(r"SIGTERM now, SIGKILL after the 2s grace period \(about \d\d:\d\d:\d\d\) to what "
                    r"is left; done by about \d\d:\d\d:\d\d at the latest$", before), before
    total = int(re.match(r"SIGTERM ended 0 of (\d+) process(?:es)? in \d", term).group(1))   # it ignores SIGTERM
    assert total >= 2, term
    assert re.match(r"SIGKILL ended %d process(?:es)? in \d" % total, kill), kill
    assert verified.startswith("verified port(s) %s free (" % record["port"]), verified
    assert removed == "removed 1 file, the launch record", removed
    # printed while the task ran, in this order, before its verdict; the dump dir is a warning
    task = out.index("TASK [Stop the server]")
    positions = [out.index("localhost %s teardown: %s" % (name, line)) for line in lines]
    # apart from the readiness lines of the same instance (`localhost <name>: ...`)
    assert not re.search(r"^localhost %s: " % re.escape(name), out, re.M)
    assert task < positions[0] and positions == sorted(positions)
    assert positions[-1] < out.index("changed: [localhost]", task)
    assert "purge_paths: emptying %s: 1 file" % dump in run.stderr, run.stderr
    assert not _procs.is_alive(record["pid"], record["start_time"])


def test_json_callback_gets_no_lines_and_the_module_result(spawn, emulator_python, state_dir, log_dir):
    name = "tjson-%s" % uuid.uuid4().hex[:6]
    _proc, record = _server(spawn, emulator_python, state_dir, log_dir, name)
    env = {"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_CALLBACK_PLUGINS": CALLBACKS}
    run = _play({"sglang_name": name, "sglang_state_dir": state_dir, "sglang_port": record["port"]}, env)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert not _ours(run.stdout + run.stderr, name)
    doc = json.loads(run.stdout)
    played = [t["hosts"]["localhost"] for t in doc["tasks"] if t["task"] == "Stop the server"][0]
    # the same teardown of a second such server, the module called directly
    other = "tmod-%s" % uuid.uuid4().hex[:6]
    _proc2, record2 = _server(spawn, emulator_python, state_dir, log_dir, other)
    direct = run_module("sglang_teardown", {
        "name": other, "state_dir": state_dir, "ports": [record2["port"]], "gpus": [], "gpu_backend": "none",
        "sglang_processes": False, "shm_cleanup": False, "purge_paths": [], "grace_period": 2, "timeout": 20})
    assert not direct.get("failed"), direct.get("msg")
    direct_keys = {k for k in direct if not k.startswith("_")}
    assert {k for k in played if not k.startswith("_")} - {"invocation"} == direct_keys - {"invocation"}
    assert sorted(k["signal"] for k in played["killed"]) == sorted(k["signal"] for k in direct["killed"])
    assert {k["signal"] for k in played["killed"]} == {"SIGKILL"}
    assert [s["signal"] for s in played["signals"]] == [s["signal"] for s in direct["signals"]]
    assert played["changed"] is True and played["record_removed"]
