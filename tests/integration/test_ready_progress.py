"""Live progress of sglang_ready against the emulator: the action plugin's sliced wait as
ansible-playbook runs it (default output and a machine-format callback), and the module's
slices resumed the way the action plugin resumes them, compared with one uninterrupted call.

The emulator prints SGLang's real startup lines (tqdm shard bar, phase lines) with times set
by SGLANG_EMULATOR_* settings, so a start takes long enough for several slices.
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import uuid
from typing import Any, Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns as lp
from ansible_collections.llmops.sglang.plugins.module_utils._core import _progress
from helpers import ready_launch
from helpers.fixtures import ROOT, free_port, run_module

SHARDS = 8
# 2.5 s per shard: a weight load of ~20 s, seen by several 1 s slices (each slice also costs a
# module start, seconds on a loaded machine).
SLOW = {"SGLANG_EMULATOR_SHARDS": str(SHARDS), "SGLANG_EMULATOR_SHARD_SECONDS": "2.5",
        "SGLANG_EMULATOR_PHASE_SECONDS": "0.3"}
# Long enough for a few slices, where the counts need not be seen rising.
MEDIUM = dict(SLOW, SGLANG_EMULATOR_SHARDS="4", SGLANG_EMULATOR_SHARD_SECONDS="1.0")
CALLBACKS = os.path.join(ROOT, "tests", "integration", "progress_callbacks")


# Ansible's default: the task banner at the task's start (the collection's ansible.cfg sets
# display_skipped_hosts = false, which makes Ansible print a banner with the task's first
# result, after the live lines; docs/limits.md)
BANNER_FIRST = {"ANSIBLE_DISPLAY_SKIPPED_HOSTS": "true"}


def _play(playbook: str, extra: Dict[str, Any], env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventory", "local.yml"),
            playbook, "-e", json.dumps(extra)]
    run_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_NOCOLOR="1", LLMOPS_SGLANG_READY_SLICE_SECONDS="1")
    run_env.pop("LLMOPS_SGLANG_PROGRESS", None)
    run_env.update(env or {})
    return subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=420,
                          stdin=subprocess.DEVNULL, check=False)


def _extra(tmp_path, name: str, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    env = SLOW if env is None else env
    return {"sglang_name": name, "sglang_port": free_port(), "sglang_state_dir": str(tmp_path / "state"),
            "sglang_log_dir": str(tmp_path / "logs"), "sglang_extraction_dump_dir": str(tmp_path / "hs"),
            "sglang_extraction_env": env, "sglang_env": env}


def _ours(out: str, name: str) -> List[str]:
    """The plugin's lines for this instance, in output order (`localhost <name>: ...`)."""
    return [m.group(1) for m in re.finditer(r"^localhost %s: (.*)$" % re.escape(name), out, re.M)]


def _stage(text: str) -> int:
    for i, stage in sorted(enumerate(_progress.STAGES), key=lambda s: -len(s[1])):
        if text.startswith(stage):
            return i
    raise AssertionError("not a progress line: %r" % text)


def _no_lock_or_prewarm_task(out: str, lock_file: str) -> None:
    """The restart's operation lock is the plan's and the ready call's: taken and given back, no
    task of its own runs and none is left; the plan warmed (the demo model has no weight files:
    said, no failure), no prewarm module task."""
    assert "lock: taken (%s); released" % lock_file in out, out[-3000:]
    assert not os.path.exists(lock_file)
    assert "TASK [llmops.sglang.sglang_restart : Take the operation lock" not in out
    assert "Release the operation lock" not in out, out[-3000:]
    assert "TASK [llmops.sglang.sglang_restart : Warm the new weights" not in out, out[-3000:]


def test_restart_extraction_shows_progress_before_the_ready_line(tmp_path):
    """A first launch with a slow start shows the wait's progress; it and a real restart after it
    (a new --mem-fraction-static, a quick start) run no lock or prewarm task and leave no lock
    (the playbook test of tests/integration/test_plan_lock.py, which ran the same playbook twice
    for it, is these two runs)."""
    name = "itest-prog-%s" % uuid.uuid4().hex[:6]
    extra = _extra(tmp_path, name)
    lock_file = os.path.join(extra["sglang_state_dir"], "%s.restart.lock" % name)
    playbook = os.path.join(ROOT, "playbooks", "restart_extraction.yml")
    try:
        run = _play(playbook, extra, BANNER_FIRST)
        out = run.stdout
        assert run.returncode == 0, (out + run.stderr)[-4000:]
        _no_lock_or_prewarm_task(out + run.stderr, lock_file)
        lines = _ours(out, name)
        ready = [i for i, text in enumerate(lines) if text.startswith("ready in ")]
        assert len(ready) == 1 and ready[0] == len(lines) - 1, lines
        progress = lines[:-1]
        assert progress, "no progress line before the ready line: %s" % out[-3000:]
        # in startup order, never backwards
        stages = [_stage(text) for text in progress]
        assert stages == sorted(stages), progress
        shards = [tuple(map(int, m.groups())) for m in
                  (re.match(r"loading weights (\d+)/(\d+) shards", t) for t in progress) if m]
        assert len(shards) >= 2, progress
        assert all(total == SHARDS for _done, total in shards)
        done = [d for d, _total in shards]
        assert done == sorted(done) and done[0] < done[-1], progress
        # every line shows the time since the launch
        assert all(re.search(r"\(\d+(?:s|m\d\ds)", text) for text in progress), progress
        # printed while the ready task ran, before its verdict line
        task = out.index("TASK [llmops.sglang.sglang_ready : Wait until the server is ready")
        verdict = out.index("ok: [localhost]", task)
        first = out.index("localhost %s: %s" % (name, progress[0]))
        last = out.index("localhost %s: ready in" % name)
        assert task < first < last < verdict
        # the start is remembered for the next one
        path = os.path.join(extra["sglang_state_dir"], "%s.timeline.json" % name)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with open(path) as fh:
            assert json.load(fh)["start_seconds"] > 0

        # a real restart of the running server: the lock again taken by the plan, given back by
        # the ready call (ansible.cfg's display: a skipped task says nothing)
        quick = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
        record = os.path.join(extra["sglang_state_dir"], "%s.json" % name)
        with open(record) as fh:
            first_launch = json.load(fh)["launch_id"]
        again = _play(playbook, dict(extra, sglang_extraction_env=quick, sglang_env=quick,
                                     sglang_extraction_mem_fraction_static=0.85))
        out = again.stdout + again.stderr
        assert again.returncode == 0, out[-4000:]
        with open(record) as fh:
            assert json.load(fh)["launch_id"] != first_launch, out[-3000:]
        _no_lock_or_prewarm_task(out, lock_file)
    finally:
        down = _play(os.path.join(ROOT, "playbooks", "teardown.yml"), extra)
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def test_a_machine_format_callback_gets_no_progress_lines(tmp_path):
    """ANSIBLE_STDOUT_CALLBACK=json: stdout is one JSON document with the ready result; the
    same run with progress forced on shows the lines would have broken it."""
    playbook = os.path.join(ROOT, "tests", "integration", "playbooks", "ready_progress.yml")
    env = {"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_CALLBACK_PLUGINS": CALLBACKS}
    name = "itest-json-%s" % uuid.uuid4().hex[:6]
    run = _play(playbook, _extra(tmp_path / "a", name, MEDIUM), env)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert not _ours(run.stdout + run.stderr, name)
    doc = json.loads(run.stdout)
    waits = [t["hosts"]["localhost"] for t in doc["tasks"] if t["task"] == "Wait until it is ready"]
    assert waits and waits[0]["ready"] is True and waits[0]["reason"] == "ready"
    assert "pending" not in waits[0] and "resume_state" not in waits[0]
    assert waits[0]["invocation"]["module_args"]["_resume"] is None  # as one call shows it
    # Forced on, the lines land in the same stream: this is what the callback check prevents.
    forced = _play(playbook, _extra(tmp_path / "b", name + "f", MEDIUM), dict(env, LLMOPS_SGLANG_PROGRESS="always"))
    assert forced.returncode == 0, (forced.stdout + forced.stderr)[-4000:]
    assert _ours(forced.stdout, name + "f")


# --- the module's slices, resumed as the action plugin resumes them -------------------------------

def _sliced(state_dir: str, name: str, seconds: float = 0.5, **args: Any):
    params = dict({"name": name, "state_dir": state_dir, "timeout": 60, "poll_interval": 0.1, "settle": 0.5,
                   "slice_seconds": seconds}, **args)
    resume: Dict[str, Any] = {}
    pendings = []
    while True:
        res = run_module("sglang_ready", dict(params, _resume=resume))
        if not res.get("pending"):
            return res, pendings
        pendings.append(res)
        resume = res["resume_state"]


def _bare(lines: List[str]) -> List[str]:
    """Lines without their timestamps and run-specific paths and ports."""
    return [re.sub(r"/\S+/(?=site-packages|lib/python)", "/", lp.TIMESTAMP_PREFIX.sub("", line)) for line in lines]


def test_slices_give_the_verdict_and_decisive_lines_of_one_call(spawn, emulator_python, state_dir, log_dir):
    """The same crash (out of memory while building the pool) judged by one module call, then
    by slices: same reason, same decisive lines, every log byte read exactly once."""
    env = dict(SLOW, SGLANG_EMULATOR_FAULT="oom", SGLANG_EMULATOR_SHARDS="3")
    log1 = os.path.join(log_dir, "one.log")
    ready_launch.launch(spawn, emulator_python, state_dir, log1, name="one", env=env)
    whole = ready_launch.ready(state_dir, name="one", timeout=60)
    log2 = os.path.join(log_dir, "two.log")
    ready_launch.launch(spawn, emulator_python, state_dir, log2, name="two", env=env)
    sliced, pendings = _sliced(state_dir, "two")
    assert len(pendings) >= 2
    assert whole["failed"] and sliced["failed"]
    assert whole["reason"] == sliced["reason"] == "fatal_log"
    assert any("Not enough memory" in line for line in sliced["decisive_lines"])
    assert _bare(whole["decisive_lines"]) == _bare(sliced["decisive_lines"])
    assert sliced["log_bytes_read"] == os.path.getsize(log2)
    assert whole["log_bytes_read"] == os.path.getsize(log1)
    read = [p["log_bytes_read"] for p in pendings] + [sliced["log_bytes_read"]]
    assert read == sorted(read)


def test_pending_slices_report_rising_shard_counts(spawn, emulator_python, state_dir, log_dir):
    log = os.path.join(log_dir, "p.log")
    ready_launch.launch(spawn, emulator_python, state_dir, log, name="p", env=SLOW)
    final, pendings = _sliced(state_dir, "p")
    assert final["ready"] is True, final.get("msg")
    shards = [p["progress"]["shards"] for p in pendings if p["progress"]["shards"]]
    assert len(shards) >= 2 and all(total == SHARDS for _d, total in shards)
    assert [d for d, _t in shards] == sorted(d for d, _t in shards) and shards[0][0] < shards[-1][0]
    assert "resume_state" not in final and "pending" not in final


def test_the_last_start_is_remembered_and_a_slow_start_flagged(spawn, emulator_python, state_dir, log_dir):
    log = os.path.join(log_dir, "t.log")
    proc, _rec = ready_launch.launch(spawn, emulator_python, state_dir, log, name="t",
                                     env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "SGLANG_EMULATOR_SHARDS": "2"})
    first = ready_launch.ready(state_dir, name="t")
    assert first["ready"] and first["last_start_seconds"] is None and first["slow_start"] is False
    assert first["start_seconds"] > 0
    path = os.path.join(state_dir, "t.timeline.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # a re-check of the same launch compares with the start before it (none), writes nothing new
    again = ready_launch.ready(state_dir, name="t")
    assert again["already_running"] and again["last_start_seconds"] is None and not again["slow_start"]
    proc.kill()
    proc.wait()
    # a slower start of the same instance: compared with the first, flagged
    ready_launch.launch(spawn, emulator_python, state_dir, log, name="t", env=MEDIUM)
    second, _pendings = _sliced(state_dir, "t")
    assert second["ready"], second.get("msg")
    assert second["last_start_seconds"] == first["start_seconds"]
    assert second["start_seconds"] > 1.5 * first["start_seconds"] and second["slow_start"] is True
    with open(path) as fh:
        stored = json.load(fh)
    assert stored["start_seconds"] == second["start_seconds"] and stored["previous"]["launch_id"] == first["launch_id"]


def test_check_mode_remembers_nothing(spawn, emulator_python, state_dir, log_dir):
    log = os.path.join(log_dir, "c.log")
    ready_launch.launch(spawn, emulator_python, state_dir, log, name="c", env={"SGLANG_EMULATOR_SHARDS": "2"})
    res = run_module("sglang_ready", {"name": "c", "state_dir": state_dir, "timeout": 30, "poll_interval": 0.1,
                                      "settle": 0.5}, check_mode=True)
    assert res["ready"] is True, res.get("msg")
    assert not os.path.exists(os.path.join(state_dir, "c.timeline.json"))
