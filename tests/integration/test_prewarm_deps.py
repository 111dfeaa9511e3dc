"""sglang_prewarm without psutil or requests fails through _deps.require like the other modules:
reason missing_library, the libraries named, and an interpreter on the host that has them (or
null) - nothing is read."""
from __future__ import annotations

import json
import os

import pytest

from helpers.fixtures import ROOT, run_module


@pytest.mark.parametrize("hidden", ["psutil", "requests"])
def test_a_missing_library_is_named_with_an_interpreter_that_has_it(tmp_path, hidden):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / ("%s.py" % hidden)).write_text("raise ImportError('%s hidden by the test')\n" % hidden)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    result = run_module("sglang_prewarm", {"model_path": str(model)},
                        env={"PYTHONPATH": os.pathsep.join([str(shim), os.path.join(ROOT, "collections")])})
    assert result["failed"] and result["reason"] == "missing_library", result
    assert result["missing_libraries"] == [hidden]
    assert "Failed to import the required Python library (%s)" % hidden in result["msg"]
    assert "interpreter_with_libraries" in result
    assert not result.get("changed") and "bytes" not in result
