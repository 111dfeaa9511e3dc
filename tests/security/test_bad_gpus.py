"""`gpus: ["²"]` is refused with reason `bad_gpus`, and nothing is stopped.

`str.isdigit` accepts superscripts and other scripts' digits: "²" passed the check and then
`int()` raised inside the module (`internal_error`), and "٣" would have been read as GPU 3. GPU
indexes (and nvidia-smi's pids and indexes) are now ASCII digits matched whole.
"""
from __future__ import annotations

import shutil
import uuid

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import validate_gpus
from helpers.fixtures import run_module


@pytest.mark.parametrize("bad", ["\u00b2", "\u0663", "1\u00b2", "\uff11"])
def test_non_ascii_digits_are_not_gpu_indexes(bad):
    with pytest.raises(SglangError) as info:
        validate_gpus([0, bad])
    assert info.value.details.get("reason") == "bad_gpus"


def test_module_refuses_and_stops_nothing(spawn, tmp_path):
    token = "zz%s" % uuid.uuid4().hex[:8]
    decoy = str(tmp_path / token)
    shutil.copy(shutil.which("sleep"), decoy)
    proc = spawn.start([decoy, "120"])
    res = run_module("sglang_teardown", {"patterns": [token + " 120"], "gpus": ["\u00b2"], "gpu_backend": "none",
                                         "sglang_processes": False, "shm_cleanup": False,
                                         "state_dir": str(tmp_path / "s")})
    assert res["_rc"] != 0 and res.get("failed") and res["reason"] == "bad_gpus", res
    assert "Traceback" not in res["_stderr"] and not res.get("killed")
    assert proc.poll() is None and _procs.is_alive(proc.pid)


def test_nvidia_smi_rows_need_ascii_digits(tmp_path, monkeypatch):
    import os
    import stat
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncase \"$1\" in\n"
                    "--query-gpu*) printf '%s\\n' '0, GPU-a, NVIDIA H200, 10, 143771';;\n"
                    "--query-compute-apps*) printf '%s\\n' '4242, 900, GPU-a' '\u00b2, 5, GPU-a' '\u0663, 5, GPU-a';;\n"
                    "esac\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    assert _gpus.query_gpus("nvidia-smi").pids_on() == {4242: {0: 900}}
