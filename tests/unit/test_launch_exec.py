"""sglang_launch's executor in-process: a failed preflight acts on nothing (no lock, no state dir)
and fails with the whole result so far and the reason the preflight set."""
from __future__ import annotations

import os
from typing import Any, Dict

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


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


@pytest.mark.parametrize("check_mode", [True, False])
def test_failed_preflight_fails_with_the_result_and_creates_nothing(tmp_path, check_mode):
    p = params(tmp_path, venv="relative/venv", port="not-a-port", keep_logs=0)
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(p, check_mode=check_mode, diff=True)
    exc = caught.value
    assert exc.msg.startswith("preflight failed: ") and exc.details["reason"] == "preflight_failed"
    errors = exc.details["preflight"]["errors"]
    assert len(errors) == 3 and all(e in exc.msg for e in errors)
    assert exc.details["decision"] == exc.msg and exc.details["changed"] is False
    assert exc.details["port_holder"] == [] and exc.details["blockers"] == []
    assert exc.details["diff"]["before"] == exc.details["diff"]["after"] == ""
    assert exc.details["containment"]["backend"] == "none"
    assert not os.path.exists(p["state_dir"])  # no lock taken, nothing created


def test_a_bad_name_fails_before_any_check_with_its_own_reason(tmp_path):
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(params(tmp_path, name="../etc"), check_mode=True, diff=False)
    assert caught.value.details.get("reason") == "bad_name" and "preflight" not in caught.value.details


def test_param_secrets_and_operator_warnings():
    p = {"api_key": "sk-1234567890", "env": {"HF_TOKEN": "hf_abc", "PATH": "/bin"},
         "args": {"api-key": "x", "hf-token": ["pw1", "pw2"], "port": 1}, "gpu_backend": "auto",
         "tp_size": 2}
    assert sorted(_launch_exec.param_secrets(p)) == sorted(["sk-1234567890", "hf_abc", "pw1", "pw2", "x"])
    report = {"warnings": ["log level hides the ready line"],
              "checks": [{"name": "gpus", "status": "note", "msg": "GPUs not checked: no NVML"},
                         {"name": "model_path", "status": "note", "msg": "org/model is taken for a hub id"},
                         {"name": "env", "status": "note", "msg": "GPUs not checked elsewhere"}]}
    assert _launch_exec.operator_warnings(report, p) == [
        "log level hides the ready line", "GPUs not checked: no NVML: tp_size 2 was not checked against the GPUs",
        "org/model is taken for a hub id"]
    assert len(_launch_exec.operator_warnings(report, dict(p, gpu_backend="none"))) == 2


TEARDOWN = dict(ports=[], gpus=None, patterns=[], sglang_processes=False, all_users=False, protect=[],
                foreign_gpu_processes="fail", grace_period=5.0, timeout=10.0, shm_cleanup=False, shm_dir="/dev/shm",
                purge_paths=[])


def _passing_preflight(monkeypatch, **kw: Any) -> None:
    """A preflight that passes without an interpreter (the launch's own checks are tested elsewhere)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight

    monkeypatch.setattr(_launch_exec, "preflight",
                        lambda p, dirs, check_mode: _launch_exec.Preflight(report=_preflight.Report(), port=p["port"],
                                                                           tp_size=1, **kw))


def _no_spawn(req):
    raise AssertionError("spawned although the teardown failed")


def test_a_failed_teardown_fails_the_launch_with_its_reason_and_starts_nothing(tmp_path, monkeypatch):
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    monkeypatch.setattr(_launch_exec, "spawn", _no_spawn)
    real_gather, reads = _launch_exec.gather, []

    def gather(req, check_mode):  # read once, before the teardown; never after a failed one
        reads.append(check_mode)
        assert len(reads) == 1, "decided after a failed teardown"
        return real_gather(req, check_mode)
    monkeypatch.setattr(_launch_exec, "gather", gather)

    def survived(req, check_mode, diff, warn):
        raise SglangError("1 process survived SIGKILL: pid 4242", reason="survivors", killed=[],
                          survivors=[{"pid": 4242}], timings={"term": 5.0})
    monkeypatch.setattr(_teardown_call, "run", survived)
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN)), check_mode=False, diff=False)
    exc = caught.value
    assert reads == [False]
    assert exc.details["reason"] == "survivors" and "nothing was started" in exc.msg
    assert exc.details["changed"] is True  # it signalled: something was done
    assert "survived SIGKILL" in exc.msg
    td = exc.details["teardown"]
    assert td["failed"] is True and td["reason"] == "survivors" and td["survivors"] == [{"pid": 4242}]
    assert exc.details["pid"] is None and "preflight" in exc.details  # the launch's result so far


def test_the_teardown_runs_only_after_a_passing_preflight(tmp_path, monkeypatch):
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    monkeypatch.setattr(_teardown_call, "run", lambda *a: pytest.fail("stopped although the preflight failed"))
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(params(tmp_path, port="not-a-port", teardown=dict(TEARDOWN)), check_mode=False, diff=False)
    assert caught.value.details["reason"] == "preflight_failed" and "teardown" not in caught.value.details


@pytest.mark.parametrize("bad, reason", [({"grace_period": -1.0}, "bad_option"), ({"patterns": [""]}, "bad_pattern"),
                                         ({"purge_paths": ["/etc"]}, "bad_purge_path")])
def test_bad_teardown_options_fail_before_anything_is_stopped_or_locked(tmp_path, monkeypatch, bad, reason):
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    monkeypatch.setattr(_teardown_call, "run", lambda *a: pytest.fail("ran a teardown with bad options"))
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN, **bad)), check_mode=False, diff=False)
    assert caught.value.details["reason"] == reason
    assert not os.path.exists(os.path.join(str(tmp_path / "state"), "unit.lock"))


def test_the_teardown_result_and_the_launch_decision_in_one_result(tmp_path, monkeypatch):
    """After a teardown that removed the record, the launch decides on what is left: nothing."""
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    calls = []

    def stopped(req, check_mode, diff, warn):
        calls.append((req.scope.name, req.opts.grace_period, check_mode))
        warn("emptied /x")
        return {"changed": True, "killed": [{"pid": 4242, "signal": "SIGTERM"}], "timings": {"term": 0.2}}
    monkeypatch.setattr(_teardown_call, "run", stopped)
    warnings = []
    result = _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN)), check_mode=True, diff=False,
                              warn=warnings.append)
    assert calls == [("unit", 5.0, True)] and warnings == ["emptied /x"]
    assert result["teardown"]["killed"] == [{"pid": 4242, "signal": "SIGTERM"}]
    assert result["changed"] and result["reason"] == "new"


def test_check_mode_is_changed_when_the_teardown_would_stop_a_server_the_launch_keeps(tmp_path, monkeypatch):
    """Check mode decides on the server as it runs now (here: the requested one, nothing to do);
    the teardown would stop it, so the call is changed."""
    from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    monkeypatch.setattr(_launch_plan, "decide", lambda facts: _launch_plan.Decision(
        _launch_plan.NOOP, "running", "instance 'unit' is running with the requested configuration"))
    monkeypatch.setattr(_teardown_call, "run", lambda *a: {"changed": True, "killed": [], "signals": [{"pids": [7]}]})
    result = _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN)), check_mode=True, diff=False)
    assert result["reason"] == "running" and result["changed"] is True
    monkeypatch.setattr(_teardown_call, "run", lambda *a: {"changed": False, "killed": [], "signals": []})
    result = _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN)), check_mode=True, diff=False)
    assert result["changed"] is False


def test_a_port_holder_the_launch_refuses_refuses_before_the_teardown(tmp_path, monkeypatch):
    """Read with the old server still running: a foreign holder fails the call, nothing stopped."""
    from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    monkeypatch.setattr(_teardown_call, "run", lambda *a: pytest.fail("stopped although the port refuses the launch"))

    def gather(req, check_mode):
        req.pf.report.fail("port_holders", "port 30000 is held by pid 99 (user nobody: nc -l 30000) [foreign]")
        return _launch_plan.Facts(name=req.name, host="127.0.0.1", port=30000, check_mode=check_mode,
                                  preflight_errors=tuple(req.pf.report.errors), preflight_reason="port_busy")
    monkeypatch.setattr(_launch_exec, "gather", gather)
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN)), check_mode=False, diff=False)
    assert caught.value.details["reason"] == "port_busy" and "teardown" not in caught.value.details
    assert "[foreign]" in caught.value.msg


def test_the_report_keeps_one_reading_of_the_port_after_a_teardown(tmp_path, monkeypatch):
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    monkeypatch.setattr(_teardown_call, "run", lambda *a: {"changed": False, "killed": []})
    monkeypatch.setattr(_launch_exec, "spawn", lambda req: {"pid": 1, "log_path": "/x", "containment": "none"})
    monkeypatch.setattr(_launch_exec._outputdirs, "create", lambda dirs: [])
    result = _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN)), check_mode=False, diff=False)
    names = [c["name"] for c in result["preflight"]["checks"]]
    assert names.count("port_free") == 1, names


def test_a_purge_path_holding_what_the_launch_needs_is_refused(tmp_path, monkeypatch):
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    _passing_preflight(monkeypatch, model_path=str(model))
    monkeypatch.setattr(_teardown_call, "run", lambda *a: pytest.fail("emptied what the launch needs"))
    for purge in (tmp_path / "models", model):
        with pytest.raises(SglangError) as caught:
            _launch_exec.run(params(tmp_path, model_path=str(model), teardown=dict(TEARDOWN, purge_paths=[str(purge)])),
                             check_mode=False, diff=False)
        assert caught.value.details["reason"] == "bad_purge_path" and str(model) in caught.value.msg


def test_the_teardowns_diff_comes_first(tmp_path, monkeypatch):
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

    _passing_preflight(monkeypatch)
    monkeypatch.setattr(_teardown_call, "run", lambda *a: {"changed": True, "killed": [],
                                                           "diff": {"before": "pid 7\n", "after": ""}})
    result = _launch_exec.run(params(tmp_path, teardown=dict(TEARDOWN)), check_mode=True, diff=True)
    assert isinstance(result["diff"], list) and result["diff"][0] == {"before": "pid 7\n", "after": ""}
    assert result["diff"][1]["after_header"] == "requested server" and "diff" not in result["teardown"]
