"""sglang_launch's liveness probe of a running server with the requested configuration, and
what its plan says about a server that is gone: a stall of one request is retried before the
server is called unresponsive (bounded, and the result says it retried); an unresponsive
server's replacement keeps the dumps; a server that exited on its own is named with its exit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight
from helpers.fixtures import free_port, wait_for

TEARDOWN = dict(ports=[], gpus=None, patterns=[], sglang_processes=False, all_users=False, protect=[],
                foreign_gpu_processes="fail", grace_period=5.0, timeout=10.0, shm_cleanup=False, shm_dir="/dev/shm",
                purge_paths=[])


def params(tmp_path, **kw: Any) -> Dict[str, Any]:
    """The module's parameters with its defaults (argument_spec in plugins/modules/sglang_launch.py)."""
    p: Dict[str, Any] = dict(
        name="unit", venv=None, python=None, search_paths=None, entrypoint="auto", model_path="org/model",
        host="127.0.0.1", port=30000, tp_size=1, args={}, env={}, api_key=None, log_dir=None,
        state_dir=str(tmp_path / "state"), keep_logs=5, state="started", lock_timeout=30.0,
        introspect_timeout=180.0, gpu_backend="none", gpu_check=True, allow_log_level_warning=False,
        foreign_port_holders="fail", min_free_mb=0.0, min_free_inodes=0, probe_timeout=5.0, spawn_timeout=30.0,
        containment="none")
    p.update(kw)
    return p


@pytest.fixture
def server(tmp_path):
    """An HTTP server (python -m http.server) in its own session; its record fields."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(tmp_path)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
    assert wait_for(lambda: bool(_ports.has_listener(port)), 10)
    yield {"name": "unit", "pid": proc.pid, "port": port, "start_time": _procs.read_proc(proc.pid).start_time}
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_stall_shorter_than_the_retries_is_no_unresponsive_server(server):
    """Stopped for 1.5 s: the first request (1 s) times out, the second one (at 2 s) is answered."""
    assert _launch_exec._unanswered(server, "127.0.0.1", 5.0) is None  # healthy (and the HTTP client loaded)
    os.kill(server["pid"], signal.SIGSTOP)
    threading.Timer(1.5, os.kill, (server["pid"], signal.SIGCONT)).start()
    report = _preflight.Report()
    assert _launch_exec._unanswered(server, "127.0.0.1", 1.0, report) is None
    assert len(report.warnings) == 1 and "answered on attempt 2 of 3" in report.warnings[0]
    assert "did not answer /v1/models within 1 s at first" in report.warnings[0]


def test_a_server_that_never_answers_is_unresponsive_after_every_attempt(server):
    os.kill(server["pid"], signal.SIGSTOP)
    try:
        probe = _launch_exec._unanswered(server, "127.0.0.1", 0.3, _preflight.Report())
    finally:
        os.kill(server["pid"], signal.SIGCONT)
    assert probe is not None and probe["answered"] is False and probe["state"] == "T"
    assert probe["attempts"] == 3 and probe["retried"] is True and probe["seconds"] >= 0.9
    facts = _launch_plan.Facts(name="unit", host="127.0.0.1", port=server["port"], check_mode=True, fingerprint="f",
                               record={"pid": server["pid"], "port": server["port"], "fingerprint": "f"},
                               running=True, port_state="instance", probe=probe)
    decision = _launch_plan.decide(facts)
    assert decision.reason == "unresponsive" and "in 3 attempts of 0.3 s each" in decision.message


def _passing_preflight(monkeypatch) -> None:
    monkeypatch.setattr(_launch_exec, "preflight",
                        lambda p, dirs, check_mode: _launch_exec.Preflight(report=_preflight.Report(), port=p["port"],
                                                                           tp_size=1))


def test_the_replacement_of_an_unresponsive_server_keeps_the_dumps(tmp_path, monkeypatch):
    """Same configuration, no answer: the teardown runs without purge_paths and says so."""
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    dumps = tmp_path / "dumps"
    dumps.mkdir(mode=0o700)
    hung = {"answered": False, "endpoint": "/v1/models", "timeout": 5.0, "attempts": 3, "seconds": 17.0}
    monkeypatch.setattr(_launch_exec, "gather", lambda req, check_mode: _launch_plan.Facts(
        name=req.name, host="127.0.0.1", port=30000, check_mode=check_mode, fingerprint="f",
        record={"pid": 4242, "port": 30000, "fingerprint": "f"}, running=True, port_state="instance", probe=hung))
    purged = []

    def stopped(req, check_mode, diff, warn):
        purged.append(list(req.opts.purge_paths))
        return {"changed": True, "killed": [], "signals": []}
    monkeypatch.setattr(_teardown_call, "run", stopped)
    warnings = []
    result = _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN, purge_paths=[str(dumps)])), check_mode=True,
                              diff=False, warn=warnings.append)
    assert purged == [[]]
    assert result["teardown"]["purge_skipped"]["paths"] == [str(dumps)]
    assert result["teardown"]["purge_skipped"]["reason"] == "unresponsive"
    assert result["replace_reason"] == "unresponsive" and any("purge_paths are kept" in w for w in warnings)


def test_a_plan_says_what_its_replacement_is_for(tmp_path, monkeypatch):
    _passing_preflight(monkeypatch)
    monkeypatch.setattr(_launch_exec, "gather", lambda req, check_mode: _launch_plan.Facts(
        name=req.name, host="127.0.0.1", port=30000, check_mode=check_mode, fingerprint="new",
        record={"pid": 4242, "port": 30000, "fingerprint": "old"}, running=True, port_state="instance"))
    assert _launch_exec.run(params(tmp_path), check_mode=True, diff=False)["replace_reason"] == "config_changed"


def test_a_server_that_exited_on_its_own_is_named_in_the_plan(tmp_path, monkeypatch):
    """The record's server is gone and its supervisor wrote the exit file: which pid, when, how."""
    _passing_preflight(monkeypatch)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _record.write_record(str(state), "unit", {"name": "unit", "pid": gone.pid, "start_time": 1.0, "launch_id": "L1",
                                              "port": 30000, "fingerprint": "f"})
    exited_at = time.time() - 60
    _record.write_json_atomic(_record.exit_path(str(state), "unit"), {
        "launch_id": "L1", "pid": gone.pid, "returncode": None, "signal": "SIGSEGV", "exited_at": exited_at})
    result = _launch_exec.run(params(tmp_path, port=free_port()), check_mode=True, diff=False)
    assert result["reason"] == "not_running"
    prev = result["previous_exit"]
    assert prev["pid"] == gone.pid and prev["signal"] == "SIGSEGV" and prev["exited_at"] == exited_at
    assert prev["exit_file"] is True
    assert "pid %d" % gone.pid in result["decision"] and "killed by signal SIGSEGV" in result["decision"]
    assert time.strftime("%Y-%m-%dT%H:%M", time.gmtime(exited_at)) in result["decision"]
