"""Live progress of sglang_drain against the emulator: requests that run for seconds (the
emulator's SGLANG_EMULATOR_TOKEN_DELAY), drained by a playbook through the action plugin in
1 s slices. The default output shows the in-flight count going down, then the verdict line;
a machine-format callback gets none of it; the result is that of one uninterrupted call."""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import uuid
from typing import Any, Dict, List, Optional

import requests

from helpers import ready_launch
from helpers.fixtures import ROOT, wait_for

PLAYBOOK = os.path.join(ROOT, "tests", "integration", "playbooks", "drain_progress.yml")
CALLBACKS = os.path.join(ROOT, "tests", "integration", "progress_callbacks")
TOKEN_DELAY = 0.1
# three generations of 24, 30 and 36 s: ansible-playbook takes seconds to reach the drain task, more
# than 12 s under load average 20 (the first generation, 12 s before, had ended: peak 2, not 3)
TOKENS = (240, 300, 360)


# Ansible's default: the task banner at the task's start (the collection's ansible.cfg sets
# display_skipped_hosts = false, which makes Ansible print a banner with the task's first
# result, after the live lines; docs/limits.md)
BANNER_FIRST = {"ANSIBLE_DISPLAY_SKIPPED_HOSTS": "true"}


def _play(extra: Dict[str, Any], env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventory", "local.yml"),
            PLAYBOOK, "-e", json.dumps(extra)]
    run_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_NOCOLOR="1", LLMOPS_SGLANG_DRAIN_SLICE_SECONDS="1", no_proxy="*", NO_PROXY="*")
    run_env.pop("LLMOPS_SGLANG_PROGRESS", None)
    run_env.update(env or {})
    return subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)


def _server(spawn, emulator_python, state_dir, log_dir, name: str) -> int:
    _proc, record = ready_launch.launch(spawn, emulator_python, state_dir, os.path.join(log_dir, name + ".log"),
                                        name=name, env={"SGLANG_EMULATOR_TOKEN_DELAY": str(TOKEN_DELAY)})
    res = ready_launch.ready(state_dir, name=name, timeout=60)
    assert res["ready"], res.get("msg")
    return int(record["port"])


def _running(port: int) -> int:
    body = requests.get("http://127.0.0.1:%d/get_load" % port, timeout=5).json()
    return sum(int(rank["num_reqs"]) for rank in body)


def _busy(port: int) -> List[threading.Thread]:
    """Start the generations and return once the server counts them all as running."""
    def one(tokens: int) -> None:
        requests.post("http://127.0.0.1:%d/generate" % port, timeout=60,
                      json={"text": "hello", "sampling_params": {"max_new_tokens": tokens}})
    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in TOKENS]
    for thread in threads:
        thread.start()
    assert wait_for(lambda: _running(port) == len(TOKENS), timeout=20)
    return threads


def _ours(out: str, name: str) -> List[str]:
    return [m.group(1) for m in re.finditer(r"^localhost %s: (.*)$" % re.escape(name), out, re.M)]


def _join(threads: List[threading.Thread]) -> None:
    for thread in threads:
        thread.join(timeout=30)


def test_drain_shows_the_in_flight_count_going_down_then_the_verdict(spawn, emulator_python, state_dir, log_dir):
    name = "dprog-%s" % uuid.uuid4().hex[:6]
    port = _server(spawn, emulator_python, state_dir, log_dir, name)
    threads = _busy(port)
    run = _play({"sglang_name": name, "sglang_port": port}, BANNER_FIRST)
    _join(threads)
    out = run.stdout
    assert run.returncode == 0, (out + run.stderr)[-4000:]
    lines = _ours(out, name)
    assert lines and lines[-1].startswith("drained in ") and "at most 3 requests in flight" in lines[-1], lines
    progress = lines[:-1]
    busy = [int(m.group(1)) for m in (re.match(r"draining, (\d+) requests? in flight \(", t) for t in progress) if m]
    # in order: the count only goes down, from the requests started, through at least two values
    assert busy and busy == sorted(busy, reverse=True) and busy[0] <= len(TOKENS), progress
    assert len(set(busy)) >= 2, progress
    assert all(re.search(r"\((\d+(?:\.\d)?s|\dm\d\ds) of 2m00s\)$", t) for t in progress), progress
    idle = [i for i, t in enumerate(progress) if t.startswith("draining, idle for")]
    assert all(i > len(busy) - 1 for i in idle), progress     # idle lines come after the busy ones
    # printed while the drain task ran, before its verdict
    task = out.index("TASK [Drain the requests still running on the server]")
    first = out.index("localhost %s: %s" % (name, progress[0]))
    verdict = out.index("ok: [localhost]", task)
    assert task < first < out.index("localhost %s: drained in" % name) < verdict


def _drain_result(doc: Dict[str, Any]) -> Dict[str, Any]:
    hits = [t["hosts"]["localhost"] for t in doc["tasks"] if t["task"] == "Drain the requests still running on the server"]
    assert len(hits) == 1, doc
    return hits[0]


def test_json_callback_gets_no_progress_and_the_result_of_one_call(spawn, emulator_python, state_dir, log_dir):
    name = "djson-%s" % uuid.uuid4().hex[:6]
    port = _server(spawn, emulator_python, state_dir, log_dir, name)
    env = {"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_CALLBACK_PLUGINS": CALLBACKS}
    results = {}
    for mode, extra in (("sliced", {}), ("one call", {"sglang_slice_seconds": 0})):
        threads = _busy(port)
        run = _play(dict({"sglang_name": name, "sglang_port": port}, **extra), env)
        _join(threads)
        assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
        assert not _ours(run.stdout + run.stderr, name), mode
        results[mode] = _drain_result(json.loads(run.stdout))
    sliced, whole = results["sliced"], results["one call"]
    assert "pending" not in sliced and "resume_state" not in sliced and "progress" not in sliced
    assert sliced["invocation"]["module_args"]["_resume"] is None         # as one call shows it
    assert set(sliced) == set(whole)
    assert {k: v for k, v in sliced["invocation"]["module_args"].items() if k != "slice_seconds"} == \
        {k: v for k, v in whole["invocation"]["module_args"].items() if k != "slice_seconds"}
    for key in ("drained", "reason", "peak", "source", "load", "changed", "_status"):
        assert sliced[key] == whole[key], key
    assert sliced["reason"] == "drained" and sliced["peak"] == len(TOKENS)
    assert [s["running"] for s in sliced["samples"]] == [s["running"] for s in whole["samples"]] == [3, 2, 1, 0]
