"""sglang_ready against the emulator: each proof, each failure, through the module runner.

The launch module is tested elsewhere; here each test launches the emulator itself (new
session, fresh or appended log) and writes the launch record by hand with the conventions'
fields, so these tests only depend on the record contract.
"""
from __future__ import annotations

import json
import os
import signal
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._logpatterns import PHASE_NAMES
from helpers.fixtures import free_port, run_module, wait_for

MODEL = "/models/emulated-llama"
API_KEY = "sk-llmops-test-7f3a9c"


def launch(spawn, emulator_python: str, state_dir: str, log_path: str, name: str = "ready",
           port: Optional[int] = None, tp_size: int = 2, args: Tuple[str, ...] = (),
           fault: str = "", expect: Optional[Dict[str, Any]] = None,
           env_extra: Optional[Dict[str, str]] = None) -> Tuple[Any, Dict[str, Any]]:
    """Start the emulator like sglang_launch would and write its launch record."""
    port = port or free_port()
    launch_id = uuid.uuid4().hex
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    argv = [emulator_python, "-m", "sglang.launch_server", "--model-path", MODEL,
            "--host", "127.0.0.1", "--port", str(port), "--tp-size", str(tp_size)] + list(args)
    env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "SGLANG_EMULATOR_FAULT": fault,
           "LLMOPS_SGLANG_INSTANCE": name, "LLMOPS_SGLANG_LAUNCH_ID": launch_id,
           "LLMOPS_SGLANG_STATE_DIR": state_dir, "no_proxy": "*", "NO_PROXY": "*"}
    env.update(env_extra or {})
    proc = spawn.start(argv, env=env, log_path=log_path)
    info = _procs.read_proc(proc.pid)
    assert info is not None, "the emulator died at once"
    record = {
        "name": name, "launch_id": launch_id, "state_dir": state_dir,
        "pid": proc.pid, "start_time": info.start_time, "pgid": info.pgid, "sid": info.sid,
        "interpreter": emulator_python, "entrypoint": "launch_server",
        "argv": _redact.redact_argv(argv), "log_path": log_path, "log_offset": offset,
        "host": "127.0.0.1", "port": port, "tp_size": tp_size, "nnodes": 1, "node_rank": 0,
        "expect": expect if expect is not None else {"model_path": MODEL, "tp_size": tp_size, "port": port},
        "exit_path": _record.exit_path(state_dir, name), "launched_at": time.time(),
    }
    _record.write_record(state_dir, name, record)
    return proc, record


def ready(state_dir: str, name: str = "ready", check_mode: bool = False, **args: Any) -> Dict[str, Any]:
    params = {"name": name, "state_dir": state_dir, "timeout": 30, "poll_interval": 0.1, "settle": 0.5}
    params.update(args)
    return run_module("sglang_ready", params, check_mode=check_mode)


def _phases(result: Dict[str, Any]) -> List[str]:
    return [t["phase"] for t in result["timeline"]]


def _log_in(result: Dict[str, Any]) -> str:
    return "\n".join(result["decisive_lines"] + result["log_tail"])


def _healthy(port: int) -> bool:
    return _http.request("127.0.0.1", port, "/health", timeout=1).status == 200


@pytest.fixture
def log_file(log_dir: str) -> str:
    return os.path.join(log_dir, "sglang-%s.log" % uuid.uuid4().hex[:8])


def test_normal_start_is_ready_with_an_ordered_timeline(spawn, emulator_python, state_dir, log_file):
    proc, record = launch(spawn, emulator_python, state_dir, log_file,
                          args=("--reasoning-parser", "kimi_k2"),
                          expect={"model_path": MODEL, "tp_size": 2, "port": 0, "reasoning_parser": "kimi_k2"})
    record["expect"]["port"] = record["port"]
    _record.write_record(state_dir, "ready", record)
    result = ready(state_dir)
    assert result["ready"] is True and result["reason"] == "ready", result.get("msg")
    assert result["changed"] is False and not result.get("failed")
    phases = _phases(result)
    assert phases == [p for p in PHASE_NAMES if p in phases], "timeline out of order"
    for needed in ("init distributed", "weight load begin", "weight load end", "kv cache",
                   "http up", "ready"):
        assert needed in phases
    assert phases[-1] == "ready" and result["phase"] == "ready"
    assert result["server_version"] == "0.5.23+emulator"
    assert result["matched"]["tp_size"] == 2 and result["matched"]["reasoning_parser"] == "kimi_k2"
    assert result["health"]["status"] == 200
    owners = [o for lst in result["listeners"] for o in lst["owners"]]
    assert owners and all(o["ours"] for o in owners) and proc.pid in [o["pid"] for o in owners]
    # Check mode observes the same way and changes nothing.
    again = ready(state_dir, check_mode=True)
    assert again["ready"] is True and again["changed"] is False


@pytest.mark.parametrize("fault,reasons,needle", [
    ("import_error", ("exited", "fatal_log"), "No module named 'sgl_kernel'"),
    ("oom", ("fatal_log", "exited"), "Not enough memory"),
    ("scheduler_death", ("fatal_log", "exited"), "scheduler died during initialization"),
])
def test_fault_fails_fast_with_the_decisive_lines(spawn, emulator_python, state_dir, log_file,
                                                  fault, reasons, needle):
    launch(spawn, emulator_python, state_dir, log_file, fault=fault)
    result = ready(state_dir)
    assert result["failed"] and result["ready"] is False
    assert result["reason"] in reasons, result["msg"]
    assert any(needle in line for line in result["decisive_lines"]), result["decisive_lines"]
    assert result["reason"] != "timeout"


def test_import_error_shows_the_traceback_to_the_exception(spawn, emulator_python, state_dir, log_file):
    launch(spawn, emulator_python, state_dir, log_file, fault="import_error")
    result = ready(state_dir)
    lines = result["decisive_lines"]
    assert lines[0].startswith("Traceback") and "ModuleNotFoundError" in lines[-1]
    assert result["exit_status"] != "unknown" or result["reason"] in ("exited", "fatal_log")


def test_hang_times_out_naming_the_phase(spawn, emulator_python, state_dir, log_file):
    launch(spawn, emulator_python, state_dir, log_file, fault="hang")
    result = ready(state_dir, timeout=3)
    assert result["reason"] == "timeout" and result["ready"] is False
    assert "weight load" in result["msg"] and result["phase"] == "weight load begin"
    assert result["log_tail"]


def test_stale_healthy_server_on_the_port_is_never_ready(spawn, emulator_python, state_dir, log_file, log_dir):
    port = free_port()
    stale = launch(spawn, emulator_python, state_dir, os.path.join(log_dir, "stale.log"),
                   name="old", port=port)[0]
    assert wait_for(lambda: _healthy(port), 30), "the stale server never became healthy"
    launch(spawn, emulator_python, state_dir, log_file, port=port)
    result = ready(state_dir)
    assert result["ready"] is False and result["reason"] in ("stale_server", "fatal_log"), result["msg"]
    assert "pid %d" % stale.pid in result["msg"] or stale.pid in [o["pid"] for o in result.get("stale_owners", [])]
    if result["reason"] == "stale_server":
        owner = result["stale_owners"][0]
        assert owner["pid"] == stale.pid and owner["user"] and owner["cmdline"] and owner["started"]


def test_old_ready_line_before_the_offset_does_not_count(spawn, emulator_python, state_dir, log_file):
    port = free_port()
    first = launch(spawn, emulator_python, state_dir, log_file, port=port)[0]
    assert wait_for(lambda: "ready to roll" in open(log_file).read(), 30)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert wait_for(lambda: not _healthy(port), 10)
    # The new launch appends to the same file (offset = size before it) and hangs.
    record = launch(spawn, emulator_python, state_dir, log_file, port=port, fault="hang")[1]
    assert record["log_offset"] > 0
    result = ready(state_dir, timeout=3)
    assert result["ready"] is False and result["reason"] == "timeout", result["msg"]
    assert "ready" not in _phases(result)


def test_config_mismatch_lists_expected_and_actual(spawn, emulator_python, state_dir, log_file):
    launch(spawn, emulator_python, state_dir, log_file, tp_size=2)
    result = ready(state_dir, expect={"tp_size": 8, "model_path": MODEL})
    assert result["reason"] == "config_mismatch", result["msg"]
    assert result["mismatches"] == [{"field": "tp_size", "expected": 8, "actual": 2}]
    assert "tp_size: expected 8, server reports 2" in result["msg"]


def test_quiet_log_level_fails_clearly_or_relies_on_identity(spawn, emulator_python, state_dir, log_file):
    launch(spawn, emulator_python, state_dir, log_file, args=("--log-level", "warning"))
    result = ready(state_dir)
    assert result["reason"] == "ready_line_hidden" and "--log-level warning" in result["msg"]
    relaxed = ready(state_dir, require_ready_line=False)
    assert relaxed["ready"] is True, relaxed["msg"]
    assert relaxed["server_version"] == "0.5.23+emulator"


def test_api_key_server_works_and_the_key_never_appears(spawn, emulator_python, state_dir, log_file):
    # A short startup (one rank, one shard, no CUDA graphs): the server_args line that carries
    # the key stays within the 40 lines of log_tail.
    launch(spawn, emulator_python, state_dir, log_file, tp_size=1, args=("--api-key", API_KEY, "--disable-cuda-graph"),
           env_extra={"SGLANG_EMULATOR_SHARDS": "1"})
    result = ready(state_dir, api_key=API_KEY)
    assert result["ready"] is True, result["msg"]
    without = ready(state_dir)
    assert without["reason"] == "unauthorized" and without["ready"] is False
    for res in (result, without):
        text = json.dumps({k: v for k, v in res.items() if k != "_stderr"})
        assert API_KEY not in text
    assert any("api_key" in line for line in without["log_tail"])  # server_args line, masked


def test_node_rank_one_is_ready_on_the_dummy_health_line(spawn, emulator_python, state_dir, log_dir):
    dist = free_port()
    multi = ("--nnodes", "2", "--dist-init-addr", "127.0.0.1:%d" % dist)
    launch(spawn, emulator_python, state_dir, os.path.join(log_dir, "n0.log"), name="node0",
           args=multi + ("--node-rank", "0"))
    record = launch(spawn, emulator_python, state_dir, os.path.join(log_dir, "n1.log"),
                    name="node1", args=multi + ("--node-rank", "1"))[1]
    record["node_rank"] = 1
    _record.write_record(state_dir, "node1", record)
    result = ready(state_dir, name="node1")
    assert result["ready"] is True and result["node_rank"] == 1, result["msg"]
    assert result["phase"] == "dummy health server" and "ready" not in _phases(result)


def test_a_record_that_is_not_a_json_object_is_record_damaged(state_dir):
    with open(os.path.join(state_dir, "broken.json"), "w") as fh:
        fh.write("[1, 2]")
    result = ready(state_dir, name="broken")
    assert result["failed"] and result["reason"] == "record_damaged", result
    assert "broken.json" in result["msg"]
