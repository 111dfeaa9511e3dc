"""Log files, environment and the supervised spawn (with trivial stand-in servers)."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from helpers.fixtures import TEST_MARKER, TEST_RUN_ID, wait_for


def test_launch_log_is_fresh_with_suffix(tmp_path):
    now = 1_700_000_000.0
    p1, fd1 = _launcher.open_launch_log(str(tmp_path), "inst", now)
    p2, fd2 = _launcher.open_launch_log(str(tmp_path), "inst", now)
    os.close(fd1)
    os.close(fd2)
    assert os.path.basename(p1) == "inst-20231114T221320Z.log"
    assert os.path.basename(p2) == "inst-20231114T221320Z-1.log"


def test_link_points_to_newest_and_prune_keeps_n(tmp_path):
    d = str(tmp_path)
    paths = []
    for i in range(6):
        path, fd = _launcher.open_launch_log(d, "inst", 1_700_000_000.0 + i)
        os.close(fd)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
        paths.append(path)
    other, fd = _launcher.open_launch_log(d, "inst2", 1_600_000_000.0)
    os.close(fd)
    link = _launcher.update_log_link(d, "inst", paths[-1])
    assert os.path.realpath(link) == paths[-1]
    link = _launcher.update_log_link(d, "inst", paths[-2])
    assert os.path.realpath(link) == paths[-2]
    removed = _launcher.prune_logs(d, "inst", 3, paths[-1])
    assert sorted(removed) == sorted(paths[:3])
    assert os.path.exists(other)  # another instance's logs are not ours to prune
    assert os.path.exists(link)


def test_env_is_clean_and_explicit(tmp_path):
    inherited = {"HOME": "/root", "USER": "root", "PATH": "/evil", "http_proxy": "http://proxy:3128",
                 "PYTHONPATH": "/x", "VIRTUAL_ENV": "/other", "no_proxy": "corp.example"}
    markers = {"LLMOPS_SGLANG_INSTANCE": "a", "LLMOPS_SGLANG_LAUNCH_ID": "id", "LLMOPS_SGLANG_STATE_DIR": "/s"}
    env = _launcher.build_env("/v/bin/python", "/v", {"NCCL_PROTO": "Simple", "no_proxy": "corp.example",
                                                      "LLMOPS_SGLANG_INSTANCE": "hijack", "PYTHONUNBUFFERED": "0"},
                              markers, "/s/a.tmp", inherited=inherited)
    assert env["PATH"] == "/v/bin:/usr/local/bin:/usr/bin:/bin"
    assert env["VIRTUAL_ENV"] == "/v" and env["TMPDIR"] == "/s/a.tmp" and env["HOME"] == "/root"
    assert "http_proxy" not in env and "PYTHONPATH" not in env
    assert env["no_proxy"] == env["NO_PROXY"] == "corp.example,localhost,127.0.0.1,::1"
    assert env["LLMOPS_SGLANG_INSTANCE"] == "a"
    assert env["PYTHONUNBUFFERED"] == "0" and env["NCCL_PROTO"] == "Simple"
    kept = _launcher.build_env("/v/bin/python", "/v", {"https_proxy": "http://p:1"}, markers, "/t", inherited={})
    assert kept["https_proxy"] == "http://p:1" and kept["no_proxy"] == "localhost,127.0.0.1,::1"


def test_log_tail_is_redacted(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("server_args=ServerArgs(api_key='s3cr3t-value', port=1)\nBearer s3cr3t-value\nplain s3cr3t-value\n")
    tail = _launcher.log_tail(str(path), ["s3cr3t-value"])
    assert "s3cr3t-value" not in tail and "plain" in tail


def _spec(tmp_path, argv, name="unit"):
    state = tmp_path / "state"
    return _launcher.LaunchSpec(name=name, state_dir=str(state), log_dir=str(tmp_path / "logs"),
                                python=sys.executable, venv=None, argv=argv,
                                env={TEST_MARKER: TEST_RUN_ID}, keep_logs=2, secrets=["hunter22"])


def _killpg(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def test_spawn_supervised_session_and_exit_file(tmp_path):
    argv = [sys.executable, "-c", "import sys, time; print('up', sys.argv[1:], flush=True); time.sleep(60)",
            "a b", "'q\"", "$HOME;|&"]
    rec = _launcher.spawn(_spec(tmp_path, argv))
    try:
        server = _procs.read_proc(rec["pid"])
        assert server is not None and server.start_time == rec["start_time"]
        assert rec["sid"] == rec["pgid"] == rec["supervisor_pid"]
        assert server.ppid == rec["supervisor_pid"]
        assert _procs.marker_of(rec["pid"])["LLMOPS_SGLANG_LAUNCH_ID"] == rec["launch_id"]
        environ = _procs.read_environ(rec["pid"])
        assert environ["TMPDIR"] == rec["tmpdir"] and oct(os.stat(rec["tmpdir"]).st_mode & 0o777) == "0o700"
        assert wait_for(lambda: "up" in open(rec["log_path"]).read(), 10)
        assert server.cmdline[-3:] == ["a b", "'q\"", "$HOME;|&"]
        assert os.readlink(rec["log_link"]) == os.path.basename(rec["log_path"])
        # SIGTERM to the supervisor is forwarded; the exit file records the signal
        os.kill(rec["supervisor_pid"], signal.SIGTERM)
        assert wait_for(lambda: os.path.exists(rec["exit_path"]), 10)
        data = json.load(open(rec["exit_path"]))
        assert data["launch_id"] == rec["launch_id"] and data["pid"] == rec["pid"]
        assert data["returncode"] == -15 and data["signal"] == "SIGTERM"
        assert oct(os.stat(rec["exit_path"]).st_mode & 0o777) == "0o600"
    finally:
        _killpg(rec["pgid"])


def test_spawn_early_death_reports_exit_and_redacted_tail(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('api_key=hunter22 No module named sglang.launch_server'); sys.exit(1)"]
    with pytest.raises(SglangError) as info:
        _launcher.spawn(_spec(tmp_path, argv))
    exc = info.value
    assert "exited right after the launch (exit status 1)" in exc.msg
    assert exc.details["reason"] == "died"
    assert "No module named sglang.launch_server" in exc.details["log_tail"]
    assert "hunter22" not in exc.details["log_tail"]


def test_spawn_unexecutable_server(tmp_path):
    with pytest.raises(SglangError) as info:
        _launcher.spawn(_spec(tmp_path, [str(tmp_path / "no such binary")]))
    assert "cannot execute" in info.value.msg
    assert "cannot execute" in info.value.details["log_tail"]


def test_stale_exit_file_is_removed(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    stale = _record.exit_path(str(state), "unit")
    open(stale, "w").write(json.dumps({"launch_id": "old", "returncode": 1}))
    rec = _launcher.spawn(_spec(tmp_path, [sys.executable, "-c", "import time; time.sleep(30)"]))
    try:
        assert not os.path.exists(stale)
    finally:
        _killpg(rec["pgid"])


def test_long_server_argv_reaches_the_server_through_the_pipe(tmp_path):
    """The server argv goes to the supervisor through a pipe filled before the spawn: one
    larger than a default pipe (64 KiB) still arrives whole, and the spawn never blocks on it."""
    big = ["x" * 100_000, "y" * 100_000, "z" * 100_000]
    argv = [sys.executable, "-c", "import sys, time; print('sizes', [len(a) for a in sys.argv[1:]], flush=True); "
            "time.sleep(60)"] + big
    rec = _launcher.spawn(_spec(tmp_path, argv))
    try:
        assert wait_for(lambda: "sizes" in open(rec["log_path"]).read(), 10)
        assert "sizes [100000, 100000, 100000]" in open(rec["log_path"]).read()
        assert _procs.read_proc(rec["pid"]).cmdline[-3:] == big
    finally:
        _killpg(rec["pgid"])


def test_bad_spawn_timeout_is_refused_before_anything_starts(tmp_path):
    spec = _spec(tmp_path, [sys.executable, "-c", "pass"])
    spec.spawn_timeout = 0
    with pytest.raises(SglangError) as info:
        _launcher.spawn(spec)
    assert info.value.details["reason"] == "bad_spawn_timeout"
    assert not os.path.exists(str(tmp_path / "state"))


# --- cgroup containment ------------------------------------------------------------------------

# The stand-in server double-forks a worker that leaves the session and the process tree.
ESCAPING_SERVER = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(sys.argv[1], "w").write(str(os.getpid()))
        time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def _contained_spec(tmp_path, argv):
    spec = _spec(tmp_path, argv, name="unit-%s" % uuid.uuid4().hex[:8])
    spec.containment, spec.containment_why = "cgroup", "unit test"
    return spec


def _stop_all(rec):
    result = _containment.stop(rec, grace_period=0, deadline=time.monotonic() + 10)
    _killpg(rec["pgid"])
    return result


def test_contained_spawn_puts_supervisor_server_and_escaped_worker_in_one_cgroup(tmp_path):
    pidfile = tmp_path / "worker"
    rec = _launcher.spawn(_contained_spec(tmp_path, [sys.executable, "-c", ESCAPING_SERVER, str(pidfile)]))
    try:
        path = _cgroup.instance_path(_cgroup.v2_mount(), rec["name"])
        assert rec["containment"] == "cgroup" and rec["cgroup"] == path and rec["containment_why"] == "unit test"
        assert rec["cgroup_id"] == _cgroup.cgroup_id(path) and rec["boot_id"] == _containment.boot_id()
        assert rec["record_version"] == _record.RECORD_VERSION == 2
        assert _record.read_record(rec["state_dir"], rec["name"])["cgroup"] == path
        assert oct(os.stat(path).st_mode & 0o777) == "0o700"
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text(), 10)
        worker = int(pidfile.read_text())
        assert os.getsid(worker) != rec["sid"]
        assert {rec["supervisor_pid"], rec["pid"], worker} <= set(_cgroup.members(path))
        result = _stop_all(rec)
        assert result["removed"] and worker in [m["pid"] for m in result["members"]]
        assert not _procs.is_alive(worker)
    finally:
        _stop_all(rec)


def test_uncontained_spawn_records_containment_none(tmp_path):
    rec = _launcher.spawn(_spec(tmp_path, [sys.executable, "-c", "import time; time.sleep(30)"]))
    try:
        assert rec["containment"] == "none" and rec["cgroup"] is None and rec["record_version"] == 2
        assert not _containment.is_contained(rec)
    finally:
        _killpg(rec["pgid"])


def test_a_running_instance_in_the_cgroup_refuses_the_launch_before_the_spawn(tmp_path):
    first = _launcher.spawn(_contained_spec(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"]))
    try:
        spec = _contained_spec(tmp_path / "other", [sys.executable, "-c", "import time; time.sleep(60)"])
        spec.name = first["name"]  # the same instance name in another state dir
        with pytest.raises(SglangError) as info:
            _launcher.spawn(spec)
        assert info.value.details["reason"] == "cgroup_busy"
        assert first["pid"] in info.value.details["pids"]
        assert not os.path.exists(str(tmp_path / "other" / "logs"))  # nothing was started
        assert _procs.is_alive(first["pid"], first["start_time"])
    finally:
        _stop_all(first)


def test_a_supervisor_that_cannot_join_its_cgroup_never_starts_the_server(tmp_path, monkeypatch):
    marker = tmp_path / "started"
    fake = {"containment": "cgroup", "containment_why": "", "cgroup": str(tmp_path / "no-such-cgroup"),
            "cgroup_id": 1, "boot_id": None}
    monkeypatch.setattr(_containment, "prepare", lambda name, backend, why="", state_dir=None: dict(fake))
    spec = _contained_spec(tmp_path, [sys.executable, "-c", "open(%r, 'w'); import time; time.sleep(30)"
                                      % str(marker)])
    with pytest.raises(SglangError) as info:
        _launcher.spawn(spec)
    assert info.value.details["reason"] == "containment_failed"
    assert "cannot join cgroup" in info.value.msg
    assert not marker.exists()
