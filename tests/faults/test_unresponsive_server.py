"""A hung server with an unchanged configuration is found by the plan, not after a startup timeout.

The recorded server is alive with the same fingerprint, but SIGSTOPped: it holds its port and
answers nothing. The plan (check mode) probes it with a short timeout and reports it
`unresponsive` and changed, so the restart replaces it; a real run never stops it itself.
"""
from __future__ import annotations

import json
import os
import signal
from typing import Any, Dict, Iterator, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from helpers.fixtures import TEST_RUN_ID, free_port, remove_instance_cgroup, run_module, unique_name, wait_for

HUNG = unique_name("hung")  # its own instance name: cgroups and teardowns go by name

EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
API_KEY = "unresp-key-0c5e19d2"


@pytest.fixture
def launched() -> Iterator[List[Dict[str, Any]]]:
    """The server is SIGSTOPped: SIGKILL (which also ends a stopped process) at once, no grace
    period; then its instance cgroup goes too."""
    records: List[Dict[str, Any]] = []
    yield records
    for record in records:
        try:
            os.killpg(record["pgid"], signal.SIGKILL)
        except (OSError, KeyError, TypeError):
            pass
        remove_instance_cgroup(record["name"])


def test_stopped_server_is_planned_as_unresponsive(emulator_python, model_dir, tmp_path, launched):
    port = free_port()
    args = {"name": HUNG, "venv": os.path.dirname(os.path.dirname(emulator_python)),
            "model_path": model_dir, "port": port, "state_dir": str(tmp_path / "state"),
            "log_dir": str(tmp_path / "logs"), "gpu_backend": "none", "env": dict(EMU_ENV),
            "api_key": API_KEY, "probe_timeout": 1}
    started = run_module("sglang_launch", args)
    assert started["_rc"] == 0, started.get("msg")
    launched.append(started["record"])
    assert wait_for(lambda: _http.request("127.0.0.1", port, "/health", timeout=1).status == 200, 30)

    healthy = run_module("sglang_launch", args, check_mode=True)
    assert healthy["_rc"] == 0 and healthy["reason"] == "running" and not healthy["changed"], healthy

    os.kill(started["pid"], signal.SIGSTOP)
    plan = run_module("sglang_launch", args, check_mode=True, diff=True)
    assert plan["_rc"] == 0 and plan["changed"] and plan["reason"] == "unresponsive", plan
    assert "did not answer" in plan["decision"] and str(started["pid"]) in plan["decision"]
    assert plan["probe"]["answered"] is False and plan["probe"]["timeout"] == 1

    refused = run_module("sglang_launch", args)
    assert refused["_rc"] != 0 and refused["reason"] == "unresponsive", refused
    assert "sglang_teardown" in refused["msg"]
    assert os.path.exists("/proc/%d" % started["pid"])  # never stopped by the launch module
    assert API_KEY not in json.dumps([plan, refused])
