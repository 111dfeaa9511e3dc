"""sglang_prewarm without psutil fails through _deps.require like the other modules: reason
missing_library, the library named, and an interpreter on the host that has the collection's
libraries (or null) - nothing is read. It sends no request: requests is not needed."""
from __future__ import annotations

import json
import os

from helpers.fixtures import ROOT, run_module


def _run_hiding(tmp_path, hidden: str):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / ("%s.py" % hidden)).write_text("raise ImportError('%s hidden by the test')\n" % hidden)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    return run_module("sglang_prewarm", {"model_path": str(model)},
                      env={"PYTHONPATH": os.pathsep.join([str(shim), os.path.join(ROOT, "collections")])})


def test_without_requests_the_prewarm_runs(tmp_path):
    result = _run_hiding(tmp_path, "requests")
    assert not result.get("failed"), result
    assert result["bytes"] > 0


def test_a_missing_psutil_is_named_with_an_interpreter_that_has_it(tmp_path):
    result = _run_hiding(tmp_path, "psutil")
    assert result["failed"] and result["reason"] == "missing_library", result
    assert result["missing_libraries"] == ["psutil"]
    assert "Failed to import the required Python library (psutil)" in result["msg"]
    assert "interpreter_with_libraries" in result
    assert not result.get("changed") and "bytes" not in result
