"""sglang_probe reports containment: which backend a launch would get here and why, and per
launched server its containment, cgroup and the processes the probe attributes to it that sit
outside its cgroup (moved out here by the test, as a root process inside could do).

Each instance started here has a unique name and is stopped by its cgroup and process group.
"""
from __future__ import annotations

import json
import os
import uuid
from typing import Any, Dict, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, wait_for

EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
READY = "The server is fired up and ready to roll!"

pytestmark = pytest.mark.skipif(not _containment.choose("auto")[0] == "cgroup",
                                reason="needs cgroup v2 writable by this user and PID 1 not systemd")


def _launch(emulator_python: str, tmp_path, launched: List[Dict[str, Any]], containment: str) -> Dict[str, Any]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    args = {"name": "pc-%s" % uuid.uuid4().hex[:10], "venv": os.path.dirname(os.path.dirname(emulator_python)),
            "model_path": str(model), "port": free_port(), "tp_size": 2, "state_dir": str(tmp_path / "state"),
            "log_dir": str(tmp_path / "logs"), "gpu_backend": "none", "gpu_check": False, "env": dict(EMU_ENV),
            "containment": containment}
    result = run_module("sglang_launch", args)
    assert result["_rc"] == 0, result.get("msg")
    launched.append(result["record"])
    assert wait_for(lambda: READY in open(result["log_path"]).read(), 30), open(result["log_path"]).read()[-2000:]
    return result["record"]


def _probe(tmp_path, detail: bool = False) -> Dict[str, Any]:
    res = run_module("sglang_probe", {"state_dir": str(tmp_path / "state"), "gpu_backend": "none",
                                      "shm_dir": str(tmp_path / "shm"), "search_paths": [], "detail": detail})
    assert res["_rc"] == 0, res
    return res


def _server(res: Dict[str, Any], pid: int) -> Dict[str, Any]:
    found = [s for s in res["servers"] if s["pid"] == pid]
    assert len(found) == 1, res["servers"]
    return found[0]


def test_probe_reports_the_cgroup_and_flags_members_outside_it(emulator_python, tmp_path, launched):
    record = _launch(emulator_python, tmp_path, launched, "cgroup")
    res = _probe(tmp_path)
    assert res["containment"]["backend"] == "cgroup" and "writable" in res["containment"]["why"]
    server = _server(res, record["pid"])
    assert (server["containment"], server["cgroup"], server["unit"]) == ("cgroup", record["cgroup"], None)
    assert "outside_cgroup" not in server  # nothing to flag
    assert [r["containment"] for r in res["records"] if r["name"] == record["name"]] == ["cgroup"]

    # a member the heuristics attribute to the server leaves its cgroup (root inside can do that)
    moved = next(m["pid"] for m in server["members"] if m["role"] == "scheduler")
    _cgroup.join(_cgroup.v2_mount(), moved)
    res = _probe(tmp_path)
    server = _server(res, record["pid"])
    assert server["outside_cgroup"] == [moved]
    assert any("outside its cgroup" in d and str(moved) in d and record["cgroup"] in d for d in res["diagnosis"]), \
        res["diagnosis"]

    detail = _server(_probe(tmp_path, detail=True), record["pid"])
    assert detail["outside_cgroup"] == [moved] and moved not in detail["cgroup_members"]
    assert record["pid"] in detail["cgroup_members"] and record["supervisor_pid"] in detail["cgroup_members"]
    assert detail["containment_why"] == record["containment_why"]
    assert _procs.is_alive(moved)


def test_an_uncontained_launch_is_reported_as_none(emulator_python, tmp_path, launched):
    record = _launch(emulator_python, tmp_path, launched, "none")
    res = _probe(tmp_path)
    server = _server(res, record["pid"])
    assert (server["containment"], server["cgroup"]) == ("none", None) and "outside_cgroup" not in server
    assert not any("outside its cgroup" in d for d in res["diagnosis"])
