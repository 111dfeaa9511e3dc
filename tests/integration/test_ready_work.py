"""sglang_ready's proof of work (option `work`) against the emulator: one generation that must
write a new dump, or a chat answer that must carry reasoning_content, run inside the settle
window of the same module call."""
from __future__ import annotations

import os
from typing import Any, Dict, List

from helpers.fixtures import run_module, wait_for
from test_ready import MODEL, launch, log_file, ready as _ready  # noqa: F401  # pylint: disable=unused-import


def _dumps(path: str) -> List[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_generate_must_write_a_new_dump(spawn, emulator_python, state_dir, log_file, tmp_path):
    dump = str(tmp_path / "hs")
    launch(spawn, emulator_python, state_dir, log_file, env_extra={"SGLANG_HS_DUMP_DIR": dump})
    result = _ready(state_dir, work={"kind": "generate", "dump_dir": dump, "dump_wait": 10})
    assert result["ready"] is True, result["msg"]
    work = result["work"]
    assert work["ok"] is True and work["status"] == 200 and work["kind"] == "generate"
    # the warm-up's dump was there before the request; the proof names the request's own and,
    # checked, removes it again: the dump directory is the training data, not the proof's
    assert os.path.dirname(work["evidence"]) == dump and "new dump %s" % work["evidence"] in result["msg"]
    assert work["removed"] is True and work["kept_why"] is None and not os.path.exists(work["evidence"])
    assert len(_dumps(dump)) == 1 and "removed again" in result["msg"]


def test_a_server_that_writes_no_dump_fails_the_work_proof(spawn, emulator_python, state_dir, log_file, tmp_path):
    """The incident: healthy, answers /generate, but extraction never writes (the dump env did
    not reach the server). Ready alone would have said ready."""
    dump = str(tmp_path / "hs")
    os.makedirs(dump)
    launch(spawn, emulator_python, state_dir, log_file)
    result = _ready(state_dir, work={"kind": "generate", "dump_dir": dump, "dump_wait": 1})
    assert result["failed"] is True and result["reason"] == "work_failed"
    assert "no new file appeared in %s within 1 s" % dump in result["msg"]
    assert result["work"]["ok"] is False and result["work"]["status"] == 200
    assert _ready(state_dir)["ready"] is True  # without the proof the same server is "ready"


def test_chat_reasoning_needs_the_reasoning_parser(spawn, emulator_python, state_dir, log_file, log_dir):
    launch(spawn, emulator_python, state_dir, log_file, args=("--reasoning-parser", "kimi_k2"),
           expect={"model_path": MODEL})
    good = _ready(state_dir, work={"kind": "chat_reasoning"})
    assert good["ready"] is True and good["work"]["ok"] is True, good["msg"]
    assert "reasoning_content" in good["work"]["msg"] and int(good["work"]["evidence"]) > 0

    other = os.path.join(log_dir, "sglang-other.log")
    launch(spawn, emulator_python, state_dir, other, name="plain")
    bad = _ready(state_dir, name="plain", work={"kind": "chat_reasoning"})
    assert bad["reason"] == "work_failed" and "--reasoning-parser" in bad["msg"]


def test_check_mode_sends_no_request(spawn, emulator_python, state_dir, log_file, tmp_path):
    dump = str(tmp_path / "hs")
    launch(spawn, emulator_python, state_dir, log_file, env_extra={"SGLANG_HS_DUMP_DIR": dump})
    assert wait_for(lambda: len(_dumps(dump)) == 1, timeout=30)  # the warm-up's
    result = _ready(state_dir, check_mode=True, work={"kind": "generate", "dump_dir": dump})
    assert result["ready"] is True and result["work"] is None
    assert len(_dumps(dump)) == 1


def test_a_sliced_wait_proves_work_once(spawn, emulator_python, state_dir, log_file, tmp_path):
    """Slices carry the proof's result: the request is sent once, the verdict names it."""
    dump = str(tmp_path / "hs")
    launch(spawn, emulator_python, state_dir, log_file, env_extra={"SGLANG_HS_DUMP_DIR": dump,
                                                                   "SGLANG_EMULATOR_PHASE_SECONDS": "0.4"})
    params = {"name": "ready", "state_dir": state_dir, "timeout": 60, "poll_interval": 0.1, "settle": 1.5,
              "slice_seconds": 0.3, "work": {"kind": "generate", "dump_dir": dump, "dump_wait": 10}}
    resume: Dict[str, Any] = {}
    slices = 0
    while True:
        res = run_module("sglang_ready", dict(params, _resume=resume))
        slices += 1
        if not res.get("pending"):
            break
        resume = res["resume_state"]
    assert slices > 1 and res["ready"] is True, res.get("msg")
    assert res["work"]["ok"] is True and res["work"]["removed"] is True
    with open(log_file) as fh:  # the warm-up's and one proof's request, however many slices
        assert sum('"POST /generate HTTP/1.1" 200' in line for line in fh) == 2
    assert len(_dumps(dump)) == 1  # the warm-up's: the proof's own was removed again


# The work options checked before any wait: tests/unit/modules/test_sglang_ready.yaml (in-process).
