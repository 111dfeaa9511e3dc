"""Each preflight check on its own: precise messages, every failure collected."""
from __future__ import annotations

import os
import socket
import sys
from types import SimpleNamespace

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _interpreter
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight


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


@pytest.mark.parametrize("port,reserved,expected", [
    (54101, "", (32768, 60999)), (30000, "", None), (61000, "", None),
    (54101, "8000,54100-54102", None), (54101, "54101", None), (54101, "x,9-,54000-54050", (32768, 60999))])
def test_ephemeral_range(tmp_path, port, reserved, expected):
    """A port the kernel may hand to an outgoing connection, unless reserved."""
    rng, res = tmp_path / "range", tmp_path / "reserved"
    rng.write_text("32768\t60999\n")
    res.write_text(reserved + "\n")
    assert _ports.ephemeral_range(port, str(rng), str(res)) == expected


def test_ephemeral_range_unreadable(tmp_path):
    assert _ports.ephemeral_range(54101, str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_port_in_ephemeral_range_is_a_warning(monkeypatch):
    monkeypatch.setattr(_ports, "ephemeral_range", lambda port: (32768, 60999))
    report = _report()
    assert _preflight.check_port_param(report, 54101) == 54101
    assert not report.errors
    assert "ephemeral range 32768-60999" in report.warnings[0]
    assert "ip_local_reserved_ports" in report.warnings[0]


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


@pytest.mark.parametrize("args", [{"--log-level": "warn"}, {"--log-level-http": "FATAL"}, {"--log-level": " Error "}])
def test_log_level_too_quiet_by_the_one_rule_readiness_uses(args):
    # "warn" is Python logging's alias of warning: the ready line is hidden, and sglang_ready
    # says so (_logpatterns.quiet_log_levels); the preflight must refuse it too
    report = _report()
    _preflight.check_log_level(report, args, allow=False)
    assert report.errors and "hides the INFO line" in report.errors[0]
    argv = [part for flag, value in args.items() for part in (flag, value)]
    assert any(_logpatterns.quiet_log_levels(argv))


def test_log_level_info_is_not_quiet():
    report = _report()
    _preflight.check_log_level(report, {"--log-level": "info", "--log-level-http": "debug"}, allow=False)
    assert not report.errors and not report.warnings


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
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
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
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
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


# --- port holders: labelled, masked, foreign ones refused -------------------------------------

def _fake_holder(monkeypatch, argv, uid=None, pid=4_000_123):
    """One listener on port 8000 held by a synthetic process (no real process needed)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
    proc = _procs.Proc(pid=pid, ppid=1, pgid=pid, sid=pid, comm="python3", state="S",
                       uid=os.geteuid() if uid is None else uid, start_time=1.0, cmdline=argv)
    monkeypatch.setattr(_ports, "listeners", lambda ports=None: [
        _ports.Listener(8000, "0.0.0.0", "ipv4", 1, [pid])])
    monkeypatch.setattr(_procs, "read_proc", lambda p: proc if p == pid else None)
    monkeypatch.setattr(_procs, "marker_of", lambda p: None)
    return pid


def test_plain_listener_is_foreign_and_refused_by_default(monkeypatch):
    pid = _fake_holder(monkeypatch, ["python3", "-m", "http.server", "8000"])
    holders = _preflight.port_holders(8000)
    assert holders[0]["pid"] == pid and holders[0]["foreign"] is True and holders[0]["sglang"] is None
    report = _report()
    assert _preflight.check_foreign_holders(report, 8000, holders, "fail") is True
    assert "pid %d" % pid in report.errors[0] and "http.server" in report.errors[0]
    assert "[foreign]" in report.errors[0] and "foreign_port_holders: kill" in report.errors[0]
    assert report.reason() == "port_busy"
    opted = _report()
    assert _preflight.check_foreign_holders(opted, 8000, holders, "kill") is False
    assert not opted.errors and "will stop it" in opted.warnings[0]


def test_sglang_server_of_this_user_is_not_foreign(monkeypatch):
    _fake_holder(monkeypatch, ["/venv/bin/python", "-m", "sglang.launch_server", "--port", "8000"])
    holders = _preflight.port_holders(8000)
    assert holders[0]["foreign"] is False and "sglang.launch_server" in holders[0]["sglang"]
    report = _report()
    assert _preflight.check_foreign_holders(report, 8000, holders, "fail") is False and not report.errors


def test_another_users_sglang_server_is_foreign(monkeypatch):
    _fake_holder(monkeypatch, ["/venv/bin/python", "-m", "sglang.launch_server"], uid=os.geteuid() + 4242)
    assert _preflight.port_holders(8000)[0]["foreign"] is True


@pytest.mark.parametrize("argv", [
    ["python3", "srv.py", "--api-key", "OLDSECRET1"],
    ["python3", "srv.py", "--api-key=OLDSECRET1"],
    ["srv --api-key OLDSECRET1 --port 8000"],  # a process title: one string
    ["python3", "srv.py", "--hf-token", "OLDSECRET1"],
])
def test_port_holder_command_line_is_masked(monkeypatch, argv):
    _fake_holder(monkeypatch, argv)
    holders = _preflight.port_holders(8000)
    report = _report()
    _preflight.check_foreign_holders(report, 8000, holders, "fail")
    for text in (repr(holders), _preflight.describe_holders(holders), report.errors[0]):
        assert "OLDSECRET1" not in text and "********" in text


# --- free space and inodes --------------------------------------------------------------------

def test_space_names_path_measured_ancestor_and_what_is_free(tmp_path, monkeypatch):
    monkeypatch.setattr(_preflight, "_free", lambda path: (12.5, 40))
    report = _report()
    short = _preflight.check_space(report, {"log_dir": str(tmp_path), "tmpdir": str(tmp_path / "x.tmp")},
                                   100, 1000)
    assert short == ["log_dir", "tmpdir"]
    assert report.errors[0] == ("log_dir %s: 12.5 MiB free, below min_free_mb 100, 40 inodes free, "
                                "below min_free_inodes 1000" % tmp_path)
    assert report.errors[1].startswith("tmpdir %s/x.tmp (measured at %s): " % (tmp_path, tmp_path))
    assert report.reason() == "no_space"


def test_space_ok_and_filesystems_without_inode_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(_preflight, "_free", lambda path: (500.0, None))
    report = _report()
    assert _preflight.check_space(report, {"state_dir": str(tmp_path)}, 100, 1000) == []
    assert not report.errors and "unlimited inodes free" in report.checks[0]["msg"]


def test_space_real_filesystem(tmp_path):
    report = _report()
    assert _preflight.check_space(report, {"state_dir": str(tmp_path)}, 0, 0) == []
    assert report.checks[0]["status"] == "ok"


def test_reason_is_specific_only_when_all_failures_share_it():
    report = _report()
    report.fail("space", "full")
    assert report.reason() == "no_space"
    report.fail("port_holders", "foreign")
    assert report.reason() == "preflight_failed"
    other = _report()
    other.fail("port_free", "busy")
    other.fail("port_holders", "foreign")
    assert other.reason() == "port_busy"
    assert _report().reason() == "preflight_failed"
