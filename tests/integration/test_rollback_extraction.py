"""restart_extraction.yml rolls back to the old configuration when the new one fails after the
old server was stopped, for the two failures a crash test does not cover:

- the new configuration never becomes ready (the emulator's `hang` fault: every rank stops
  after `Load weight begin`, no fatal line, as a real server stuck in a weight load or NCCL init)
  and the startup timeout ends the wait;
- the new configuration is ready but fails the extraction proof: /generate answers and no new
  dump appears in the dump directory (its SGLANG_HS_DUMP_DIR points elsewhere, as when an
  override sends the dumps to another place).

Either way the old pid is replaced by a new pid running the OLD arguments and environment, the
summary's first line says so, and the host still fails the play (a roll stops there).
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import uuid
from typing import Any, Dict

import psutil

from helpers.fixtures import ROOT, free_port, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

OLD_MEM = 0.88  # the playbook's default --mem-fraction-static (the old configuration)
NEW_MEM = 0.8


def _play(playbook: str, extra: Dict[str, Any], tmp_path) -> subprocess.CompletedProcess:
    vars_file = tmp_path / ("extra-%s.json" % uuid.uuid4().hex[:6])
    vars_file.write_text(json.dumps(extra))
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventory", "local.yml"),
            os.path.join(ROOT, "playbooks", playbook), "-e", "@%s" % vars_file]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, check=False)


def _base(tmp_path) -> Dict[str, Any]:
    """A private instance (name, state, logs, dumps derived from its own demo dir), tp 2: two
    scheduler processes are enough here and spare a loaded machine."""
    return {"sglang_demo_dir": str(tmp_path / "inst"), "sglang_port": free_port(), "sglang_tp_size": 2,
            "sglang_startup_timeout": 120, "sglang_grace_period": 3}


def _names(extra: Dict[str, Any]) -> Dict[str, str]:
    demo = extra["sglang_demo_dir"]
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo.sh"), "--env"], cwd=ROOT, check=True,
                         env=dict(os.environ, LLMOPS_DEMO_DIR=demo), capture_output=True, text=True, timeout=60)
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def _record(names: Dict[str, str]) -> Dict[str, Any]:
    with open(os.path.join(names["state_dir"], names["name"] + ".json")) as fh:
        return json.load(fh)


def _summary(out: str, name: str) -> str:
    """The summary block of the failed restart (the last one printed: after the rollback), one
    plain line each, joined."""
    lines = out.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("%s on localhost: " % name))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(("ok: [", "changed: [", "fatal: [")))
    return " ".join(line.strip() for line in lines[start:end])


def _first_summary_line(out: str, name: str) -> str:
    head = [line for line in out.splitlines() if line.startswith("%s on localhost: " % name)]
    assert head, out[-4000:]
    return head[-1].split(" on localhost: ", 1)[1].strip()


def _assert_old_config_back(old: Dict[str, Any], names: Dict[str, str], port: int) -> Dict[str, Any]:
    now = _record(names)
    assert now["pid"] != old["pid"]
    assert not _procs.is_alive(old["pid"], old.get("start_time"))
    assert _procs.is_alive(now["pid"], now.get("start_time"))
    assert now["fingerprint"] == old["fingerprint"]
    assert now["fingerprint_inputs"]["args"]["--mem-fraction-static"] == OLD_MEM
    assert now["fingerprint_inputs"]["env"] == old["fingerprint_inputs"]["env"]
    # the process itself runs the OLD arguments
    argv = psutil.Process(now["pid"]).cmdline()
    assert argv[argv.index("--mem-fraction-static") + 1] == str(OLD_MEM), argv
    assert _http.request("127.0.0.1", port, "/health", timeout=5).status == 200
    return now


def _teardown(extra: Dict[str, Any], tmp_path) -> None:
    down = _play("teardown.yml", extra, tmp_path)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
    assert _http.request("127.0.0.1", extra["sglang_port"], "/health", timeout=2).status is None


def _first_launch(extra: Dict[str, Any], names: Dict[str, str], tmp_path) -> Dict[str, Any]:
    first = _play("restart_extraction.yml", extra, tmp_path)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    return _record(names)


def test_new_config_never_ready_rolls_back_to_the_old_one(tmp_path):
    extra = _base(tmp_path)
    names = _names(extra)
    try:
        old = _first_launch(extra, names, tmp_path)
        # the new configuration hangs in its weight load; a short startup timeout ends the wait
        # (the rollback's own wait has the same timeout: the old configuration starts in seconds)
        second = _play("restart_extraction.yml", dict(
            extra, sglang_startup_timeout=45, sglang_extraction_mem_fraction_static=NEW_MEM,
            sglang_extraction_env={"SGLANG_EMULATOR_FAULT": "hang"}), tmp_path)
        out = second.stdout + second.stderr
        assert second.returncode != 0, out[-4000:]  # the host still fails: the roll stops
        assert _first_summary_line(out, names["name"]) == "serving OLD config (rolled back)", out[-4000:]
        summary = _summary(out, names["name"])
        assert "failed at: Wait until the server is ready" in summary, summary
        assert "ready: NO (" in summary, summary  # the new configuration's verdict, kept
        assert "rollback: last proven-good config relaunched, pid %d" % _record(names)["pid"] in summary, summary
        assert "failed: serving OLD config (rolled back)" in out  # the host's failure says where it stands
        now = _assert_old_config_back(old, names, extra["sglang_port"])
        assert "SGLANG_EMULATOR_FAULT" not in now["fingerprint_inputs"]["env"]
        assert "SGLANG_EMULATOR_FAULT" not in psutil.Process(now["pid"]).environ()
    finally:
        _teardown(extra, tmp_path)


def test_new_config_failing_the_dump_proof_rolls_back_to_the_old_one(tmp_path):
    extra = _base(tmp_path)
    names = _names(extra)
    elsewhere = tmp_path / "elsewhere"
    try:
        old = _first_launch(extra, names, tmp_path)
        # ready and answering, but its dumps go to another directory: the proof finds no new dump
        second = _play("restart_extraction.yml", dict(
            extra, sglang_extraction_mem_fraction_static=NEW_MEM, sglang_restart_dump_wait=10,
            sglang_extraction_env={"SGLANG_HS_DUMP_DIR": str(elsewhere)}), tmp_path)
        out = second.stdout + second.stderr
        assert second.returncode != 0, out[-4000:]
        assert glob.glob(str(elsewhere / "*")), "the new configuration never wrote a dump: %s" % out[-4000:]
        assert _first_summary_line(out, names["name"]) == "serving OLD config (rolled back)", out[-4000:]
        summary = _summary(out, names["name"])
        assert "failed at: Wait until the server is ready" in summary, summary
        # the new server was ready: its proof of work failed it (the summary names the new launch's, not the rollback's)
        assert "ready: yes (its log, port owner, configuration and health), but the proof of work failed" in summary, summary
        assert "verify: FAILED: the server is ready and answered POST /generate, but no new file appeared" in summary, summary
        assert "rollback: last proven-good config relaunched, pid %d" % _record(names)["pid"] in summary, summary
        now = _assert_old_config_back(old, names, extra["sglang_port"])
        assert now["fingerprint_inputs"]["env"]["SGLANG_HS_DUMP_DIR"] == names["dump_dir"]
        # the old configuration extracts again: one generation, one new dump where it belongs
        before = set(glob.glob(os.path.join(names["dump_dir"], "*")))
        gen = _http.request("127.0.0.1", extra["sglang_port"], "/generate", method="POST", timeout=30,
                            payload={"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}})
        assert gen.status == 200
        assert wait_for(lambda: set(glob.glob(os.path.join(names["dump_dir"], "*"))) - before, timeout=30)
    finally:
        _teardown(extra, tmp_path)
