"""tp 8 on a host where no GPU backend can answer (no NVML, no nvidia-smi, no /dev/nvidia*): with
the GPU check on, the restart is refused in its plan and the old server keeps serving (it was a
warning, after which the old server was stopped)."""
from __future__ import annotations

import json
import os

from helpers import play_runs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs


def _record(hv: dict) -> dict:
    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        return json.load(fh)


def test_an_unreadable_gpu_check_refuses_the_restart_before_anything_is_stopped(one_host):
    if _gpus.query_gpus("auto").backend != "none":
        import pytest
        pytest.skip("this host has a GPU backend that answers")
    inv, hv = one_host
    first = play_runs.play(inv, "restart_extraction.yml")  # the local inventory turns the GPU reading off
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    old = _record(hv)

    again = play_runs.play(inv, "restart_extraction.yml", "-e", "sglang_gpu_backend=auto",
                           "-e", '{"sglang_args": {"mem-fraction-static": 0.7}}')
    out = again.stdout + again.stderr
    assert again.returncode != 0, out[-4000:]
    assert "GPUs cannot be checked" in out and "tp_size 8 needs GPUs that nothing on this host can count" in out, \
        out[-4000:]
    assert _procs.is_alive(old["pid"], old["start_time"]) and _record(hv)["launch_id"] == old["launch_id"]
