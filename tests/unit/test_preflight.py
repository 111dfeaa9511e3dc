"""Each preflight check on its own: precise messages, every failure collected."""
from __future__ import annotations

import os
import socket
import sys
from types import SimpleNamespace

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _interpreter, _preflight


def _report():
    return _preflight.Report()


@pytest.mark.parametrize("value,needle", [("80a", "not an integer"), ("0", "not in 1..65535"),
                                          (70000, "not in 1..65535"), (None, "not an integer")])
def test_port_param(value, needle):
    report = _report()
    assert _preflight.check_port_param(report, value) is None
    assert needle in report.errors[0]


def test_port_param_ok():
    report = _report()
    assert _preflight.check_port_param(report, "8000") == 8000
    assert not report.errors


@pytest.mark.parametrize("value,needle", [(0, "at least 1"), (-2, "at least 1"), ("x", "not an integer"),
                                          (1.5, "not an integer")])
def test_tp_size(value, needle):
    report = _report()
    assert _preflight.check_tp_size(report, value) is None
    assert needle in report.errors[0]


def test_env_collects_every_problem():
    report = _report()
    env = _preflight.check_env(report, {"GOOD": "1", "NUM": 3, "1BAD": "x", "BAD-NAME": "x", "FLAG": True,
                                        "NUL": "a\0b", "LLMOPS_SGLANG_INSTANCE": "other", "NONE": None})
    assert env == {"GOOD": "1", "NUM": "3"}
    assert len(report.errors) == 6
    assert any("quote it in YAML" in e for e in report.errors)
    assert any("instance marker" in e for e in report.errors)


def test_args_bad_keys_and_dedicated():
    report = _report()
    norm = _preflight.check_args(report, {"--tp-size": 2, "port": 1, "reasoning_parser": "kimi_k2"})
    assert norm == {"--port": 1, "--reasoning-parser": "kimi_k2"}
    assert len(report.errors) == 2
    assert "duplicates the 'port' parameter" in report.errors[1]


def test_log_level_refused_unless_allowed():
    report = _report()
    _preflight.check_log_level(report, {"--log-level": "warning"}, allow=False)
    assert "hides the INFO line" in report.errors[0] and "allow_log_level_warning" in report.errors[0]
    report = _report()
    _preflight.check_log_level(report, {"--log-level": "warning"}, allow=True)
    assert not report.errors and report.warnings


def test_model_path_cases(tmp_path):
    good = tmp_path / "my model's \"dir\""
    good.mkdir()
    (good / "config.json").write_text("{}")
    empty = tmp_path / "empty"
    empty.mkdir()
    report = _report()
    assert _preflight.check_model_path(report, str(good)) == str(good)
    assert _preflight.check_model_path(report, "moonshotai/Kimi-K2.5") == "moonshotai/Kimi-K2.5"
    assert not report.errors
    assert report.checks[-1]["status"] == "note"
    _preflight.check_model_path(report, str(empty))
    _preflight.check_model_path(report, str(tmp_path / "missing"))
    _preflight.check_model_path(report, "./org/name")
    assert len(report.errors) == 3
    assert "without config.json" in report.errors[0]
    assert "does not exist" in report.errors[1] and "does not exist" in report.errors[2]


def test_model_path_relative_becomes_absolute(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert _preflight.check_model_path(_report(), "./m") == str(tmp_path / "m")


def test_port_free_and_busy():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        report = _report()
        state, holders = _preflight.check_port(report, "127.0.0.1", port, None, False)
        assert state == "busy"
        assert holders[0]["pid"] == os.getpid()
        assert "pid %d" % os.getpid() in report.errors[0] and "address already in use" in report.errors[0]
        # the same process recorded as the running instance: held by the instance itself
        record = {"name": "x", "port": port, "pid": os.getpid(), "launch_id": "none"}
        state, _holders = _preflight.check_port(_report(), "127.0.0.1", port, record, True)
        assert state == "instance"
    finally:
        sock.close()
    report = _report()
    assert _preflight.check_port(report, "127.0.0.1", port, None, False) == ("free", [])


def test_dirs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    report = _report()
    _preflight.check_dirs(report, {"state_dir": str(tmp_path / "new" / "deeper"),
                                   "log_dir": str(blocker / "logs"), "x": "relative"})
    assert len(report.errors) == 2
    assert "is not a directory" in report.errors[0]
    assert "must be an absolute path" in report.errors[1]


def test_gpus_none_backend_is_a_note():
    report = _report()
    _preflight.check_gpus(report, 8, "none", {}, {})
    assert not report.errors and report.checks[0]["status"] == "note"


def test_gpus_too_few(monkeypatch):
    from ansible_collections.llmops.sglang.plugins.module_utils import _gpus
    fake = _gpus.GpuReport("nvml", [_gpus.Gpu(i, "u%d" % i, "H200", 0, 1000) for i in range(2)])
    monkeypatch.setattr(_gpus, "query_gpus", lambda backend: fake)
    report = _report()
    _preflight.check_gpus(report, 8, "auto", {}, {})
    assert "tp_size 8 needs 8 GPU(s)" in report.errors[0] and "2 are visible" in report.errors[0]
    report = _report()
    _preflight.check_gpus(report, 2, "auto", {"CUDA_VISIBLE_DEVICES": "1"}, {})
    assert report.errors
    report = _report()
    _preflight.check_gpus(report, 2, "auto", {}, {})
    assert not report.errors


def test_gpus_cuda_visible_devices_must_name_real_gpus(monkeypatch):
    """CUDA stops at the first entry naming no device: "0,1,...,7" on a 2-GPU host is 2 GPUs."""
    from ansible_collections.llmops.sglang.plugins.module_utils import _gpus
    fake = _gpus.GpuReport("nvml", [_gpus.Gpu(i, "GPU-u%d" % i, "H200", 0, 1000) for i in range(2)])
    monkeypatch.setattr(_gpus, "query_gpus", lambda backend: fake)
    report = _report()
    _preflight.check_gpus(report, 8, "auto", {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, {})
    assert any("names 2, 3, 4, 5, 6, 7, which are no GPU on this host (GPUs: 0, 1)" in e for e in report.errors)
    assert any("2 are visible" in e for e in report.errors)
    report = _report()
    _preflight.check_gpus(report, 2, "auto", {"CUDA_VISIBLE_DEVICES": "GPU-u1,0"}, {})
    assert not report.errors
    report = _report()
    _preflight.check_gpus(report, 8, "auto", {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, {}, enabled=False)
    assert not report.errors and report.checks[0]["status"] == "note"


def test_interpreter_refuses_bare_name():
    report = _report()
    assert _preflight.check_interpreter(report, None, "python3", 10) is None
    assert "must be an absolute path" in report.errors[0]


def test_interpreter_real_python_without_sglang(tmp_path):
    report = _report()
    interp = _preflight.check_interpreter(report, None, sys.executable, 30)
    assert interp is not None and not report.errors


def _interp(**kw):
    base = dict(path="/usr/bin/python3", venv=None, is_venv=False, python_version="3.11", sglang_installed=False,
                sglang_version=None, sglang_location=None, entrypoints={"launch_server": False, "serve": False},
                serve_script=None, error=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_sglang_missing_names_interpreter_and_other_venv(monkeypatch):
    monkeypatch.setattr(_interpreter, "where_is_sglang", lambda interp, search_paths=None: [
        {"python": "/root/ml-env/bin/python", "venv": "/root/ml-env", "sglang_version": "0.5.6", "location": "x"}])
    report = _report()
    assert not _preflight.check_sglang(report, _interp(), None)
    msg = report.errors[0]
    assert "interpreter /usr/bin/python3 cannot import sglang" in msg
    assert "No module named sglang.launch_server" in msg
    assert "sglang 0.5.6 in venv /root/ml-env" in msg and "set venv: /root/ml-env" in msg


def test_entrypoint_choice():
    interp = _interp(path="/v/bin/python", sglang_installed=True, sglang_version="0.5.23",
                     entrypoints={"launch_server": True, "serve": True}, serve_script="/v/bin/sglang")
    assert _preflight.choose_entrypoint(_report(), interp, "auto") == (
        "launch_server", ["/v/bin/python", "-m", "sglang.launch_server"])
    assert _preflight.choose_entrypoint(_report(), interp, "serve") == ("serve", ["/v/bin/sglang", "serve"])
    only_serve = _interp(path="/v/bin/python", sglang_installed=True, entrypoints={"launch_server": False, "serve": True},
                         serve_script="/v/bin/sglang")
    assert _preflight.choose_entrypoint(_report(), only_serve, "auto")[0] == "serve"
    report = _report()
    assert _preflight.choose_entrypoint(report, only_serve, "launch_server") == (None, [])
    assert "has no launch_server entry point" in report.errors[0]
