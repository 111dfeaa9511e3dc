"""A restart that fails after the old server was stopped brings the old configuration back
(restart_serving.yml against the emulator): the summary's first line says where the host stands,
the host still fails the play (a roll stops), and only a failed rollback leaves it DOWN."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from typing import Any, Dict

from helpers.fixtures import ROOT, free_port
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

MODEL = os.path.join(ROOT, "inventory", "files", "demo-model")


def _play(playbook: str, extra: Dict[str, Any], tmp_path) -> subprocess.CompletedProcess:
    vars_file = tmp_path / ("extra-%s.json" % uuid.uuid4().hex[:6])
    vars_file.write_text(json.dumps(extra))
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventory", "local.yml"),
            os.path.join(ROOT, "playbooks", playbook), "-e", "@%s" % vars_file]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)


def _base(tmp_path) -> Dict[str, Any]:
    return {"sglang_name": "itest-rb-%s" % uuid.uuid4().hex[:6], "sglang_port": free_port(),
            "sglang_state_dir": str(tmp_path / "state"), "sglang_log_dir": str(tmp_path / "logs"),
            "sglang_startup_timeout": 60, "sglang_grace_period": 3}


def _record(extra: Dict[str, Any]) -> Dict[str, Any]:
    with open(os.path.join(extra["sglang_state_dir"], extra["sglang_name"] + ".json")) as fh:
        return json.load(fh)


def _first_summary_line(out: str) -> str:
    """The summary's first line (the last printed: after a rollback), '<name> on localhost: <state>'."""
    marker = " on localhost: "
    lines = [line for line in out.splitlines() if marker in line and not line.startswith(("TASK", "fatal", "["))
             and "restart of" not in line]
    assert lines, out[-4000:]
    return lines[-1].split(marker, 1)[1].strip().rstrip("'\",")


def _teardown(extra: Dict[str, Any], tmp_path) -> None:
    down = _play("teardown.yml", extra, tmp_path)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
    assert _http.request("127.0.0.1", extra["sglang_port"], "/health", timeout=2).status is None


def test_crash_of_the_new_config_rolls_back_to_the_old_one(tmp_path):
    extra = _base(tmp_path)
    try:
        first = _play("restart_serving.yml", dict(extra, sglang_serving_args={"mem-fraction-static": 0.5}), tmp_path)
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        old = _record(extra)
        second = _play("restart_serving.yml", dict(extra, sglang_serving_args={"mem-fraction-static": 0.6},
                                                   sglang_serving_env={"SGLANG_EMULATOR_FAULT": "oom"}), tmp_path)
        out = second.stdout + second.stderr
        assert second.returncode != 0, out[-4000:]  # the host still fails: the roll stops
        assert _first_summary_line(out) == "serving OLD config (rolled back)", out[-4000:]
        assert "failed: serving OLD config (rolled back)" in out  # the host's failure says where it stands
        now = _record(extra)
        assert now["pid"] != old["pid"]
        assert _procs.is_alive(now["pid"], now.get("start_time"))
        assert now["fingerprint"] == old["fingerprint"]
        assert now["fingerprint_inputs"]["args"]["--mem-fraction-static"] == 0.5
        assert "SGLANG_EMULATOR_FAULT" not in now["fingerprint_inputs"]["env"]
        assert _http.request("127.0.0.1", extra["sglang_port"], "/health", timeout=5).status == 200
    finally:
        _teardown(extra, tmp_path)


def test_a_failed_rollback_leaves_the_host_down(tmp_path):
    extra = _base(tmp_path)
    model_a = tmp_path / "model-a"
    shutil.copytree(MODEL, str(model_a))
    try:
        first = _play("restart_serving.yml", dict(extra, sglang_model_path=str(model_a)), tmp_path)
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        shutil.rmtree(str(model_a))  # the old configuration can no longer start
        second = _play("restart_serving.yml", dict(extra, sglang_serving_env={"SGLANG_EMULATOR_FAULT": "oom"}),
                       tmp_path)
        out = second.stdout + second.stderr
        assert second.returncode != 0, out[-4000:]
        assert _first_summary_line(out) == "DOWN (no server: the rollback failed too)", out[-4000:]
        assert _http.request("127.0.0.1", extra["sglang_port"], "/health", timeout=2).status is None
    finally:
        _teardown(extra, tmp_path)


def test_a_failed_first_launch_has_nothing_to_roll_back_to(tmp_path):
    extra = _base(tmp_path)
    try:
        run = _play("restart_serving.yml", dict(extra, sglang_serving_env={"SGLANG_EMULATOR_FAULT": "oom"}), tmp_path)
        out = run.stdout + run.stderr
        assert run.returncode != 0, out[-4000:]
        assert _first_summary_line(out) == "DOWN (no server)", out[-4000:]
        # no rollback ran, and the summary says why
        assert "rollback: none (no launch of this instance was ever proven good: nothing to roll back to)" in out
        assert "Roll back to the last proven-good configuration" not in out or "included:" not in out
    finally:
        _teardown(extra, tmp_path)
