"""The plan's prewarm (sglang_launch `prewarm`) never fails the plan: whatever stops it is said in
its result, so an operation lock the same call took stays in the call's result and is given back."""
from __future__ import annotations

import errno

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._prewarm import _prewarm
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

SPEC = {"threads": 1, "min_available": "10%", "timeout": 60, "check_only": False}


@pytest.mark.parametrize("exc,reason", [
    (OSError(errno.EIO, "Input/output error", "/models/m/model-00001.safetensors"), "io_error"),
    (OSError(errno.EACCES, "Permission denied", "/models/m/model-00001.safetensors"), "permission_denied"),
    (SglangError("no weight files in /models/m", reason="no_weights"), "no_weights"),
])
def test_a_failed_prewarm_is_a_result_not_an_exception(monkeypatch, exc, reason):
    def fail(*_args, **_kwargs):
        raise exc
    monkeypatch.setattr(_prewarm, "run", fail)
    res = _launch_exec.prewarm("/models/m", SPEC)
    assert res["failed"] and res["reason"] == reason, res
    assert res["msg"]


def test_check_only_reads_nothing(monkeypatch, tmp_path):
    seen = {}

    def run(path, opts, *_args):
        seen["check_mode"] = opts.check_mode
        raise SglangError("stop here", reason="no_weights")
    monkeypatch.setattr(_prewarm, "run", run)
    _launch_exec.prewarm(str(tmp_path), dict(SPEC, check_only=True))
    assert seen == {"check_mode": True}


def _plan(tmp_path, monkeypatch, decision: str, **spec) -> dict:
    """A plan call (check mode) whose decision is `decision`; returns its result."""
    from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan, _preflight

    monkeypatch.setattr(_launch_exec, "preflight",
                        lambda p, dirs, check_mode: _launch_exec.Preflight(report=_preflight.Report(), port=p["port"],
                                                                           tp_size=1))
    monkeypatch.setattr(_launch_plan, "decide", lambda facts: _launch_plan.Decision(decision, "x", "x"))
    monkeypatch.setattr(_launch_exec, "prewarm", lambda path, got: {"changed": True, "read_for": path})
    p = dict(name="unit", venv=None, python=None, search_paths=None, entrypoint="auto", model_path=str(tmp_path),
             host="127.0.0.1", port=30000, tp_size=1, args={}, env={}, api_key=None, log_dir=None,
             state_dir=str(tmp_path / "state"), keep_logs=5, state="started", lock_timeout=30.0,
             introspect_timeout=180.0, gpu_backend="none", gpu_check=True, allow_log_level_warning=False,
             foreign_port_holders="fail", min_free_mb=0.0, min_free_inodes=0, probe_timeout=5.0,
             spawn_timeout=30.0, containment="none", prewarm=dict(SPEC, **spec))
    return _launch_exec.run(p, check_mode=True, diff=False)


def test_a_forced_restart_of_an_unchanged_server_is_warmed_by_the_plan(tmp_path, monkeypatch):
    """forced: the server runs unchanged (noop) but will be replaced: its weights are read by the
    plan's call, as for a changed one (no task of its own)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan

    assert "prewarm" not in _plan(tmp_path, monkeypatch, _launch_plan.NOOP)
    assert _plan(tmp_path, monkeypatch, _launch_plan.NOOP, forced=True)["prewarm"]["read_for"] == str(tmp_path)
    assert _plan(tmp_path, monkeypatch, _launch_plan.RELAUNCH)["prewarm"]["changed"]
    with pytest.raises(SglangError):  # a refused plan reads nothing, forced or not
        _plan(tmp_path, monkeypatch, _launch_plan.REFUSE, forced=True)
