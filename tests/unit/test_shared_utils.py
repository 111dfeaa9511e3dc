"""Unit tests for the shared library: _procs, _ports, _gpus, _shm, _redact, _record, _lock."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time

import psutil
import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._host import _shm
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host._lock import instance_lock
from ansible_collections.llmops.sglang.plugins.module_utils._host._procs import Proc
from helpers.fixtures import wait_for


# --- _procs -----------------------------------------------------------------------------------

def _proc(argv, comm="python"):
    return Proc(pid=1, ppid=0, pgid=1, sid=1, comm=comm, state="S", uid=0, start_time=0.0, cmdline=argv)


def test_read_proc_self_and_identity():
    me = _procs.read_proc(os.getpid())
    assert me is not None and me.pid == os.getpid() and me.ppid == os.getppid()
    assert me.cmdline and me.user and me.start_time > _procs.boot_time()
    assert _procs.is_alive(me.pid, me.start_time)
    assert not _procs.is_alive(me.pid, me.start_time + 10)  # another process with this pid
    assert _procs.read_proc(4_000_000) is None
    assert os.getpid() in _procs.ancestors(os.getpid()) and 1 in _procs.ancestors(os.getpid())


def test_comm_with_spaces_and_parens(tmp_path):
    # `comm` may contain ") (": psutil splits /proc/PID/stat on the LAST ')'.
    odd = tmp_path / "a) (b c"
    shutil.copy(shutil.which("sleep"), str(odd))
    child = subprocess.Popen([str(odd), "30"], start_new_session=True)
    try:
        # exec sets the new comm before the new command line exists (a read between them sees an
        # empty one): wait for both
        assert _wait(lambda: ((_procs.read_proc(child.pid) or _proc([])).comm == "a) (b c"
                              and bool((_procs.read_proc(child.pid) or _proc([])).cmdline)))
        proc = _procs.read_proc(child.pid)
        assert proc.ppid == os.getpid() and proc.pgid == child.pid == proc.sid and proc.state in ("S", "R")
        assert proc.cmdline == [str(odd), "30"] and proc.uid == os.geteuid() and not proc.kthread
    finally:
        child.kill()
        child.wait()


def test_setproctitle_title_without_padding(emulator_python):
    # setproctitle leaves the rest of the old argv area blank: no empty trailing arguments.
    child = subprocess.Popen([emulator_python, "-c", "import setproctitle, time; "
                              "setproctitle.setproctitle('sglang::scheduler_TP0'); print('ok', flush=True); "
                              "time.sleep(30)", "x" * 200], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == b"ok"
        proc = _procs.read_proc(child.pid)
        assert proc.cmdline == ["sglang::scheduler_TP0"] and "sglang process title" in _procs.sglang_reason(proc)
        assert proc.title == "sglang::scheduler_TP0"
    finally:
        child.kill()
        child.wait()


def test_argv_drops_only_trailing_blanks():
    assert _procs._argv(["t", "", ""]) == ["t"] and _procs._argv(["a", "", "b"]) == ["a", "", "b"]
    assert _procs._argv(None) == [] and _procs._argv([]) == []


def test_row_identity_is_fixed_at_first_use():
    # The identity (creation time) is taken when a field is first read, and kept: read after
    # the process exited, start_time is still that process's; its uid can no longer be read:
    # -1 and state X (gone).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        row = _procs.snapshot()[child.pid]
        expected = _procs.start_time_of(child.pid)
        assert expected is not None and row.start_time == expected
    finally:
        child.kill()
        child.wait()
    assert row.start_time == expected
    assert row.uid == -1 and row.state == "X" and row.is_zombie and row.user == "?"
    assert _procs.start_time_of(child.pid) is None and not _procs.is_alive(child.pid)


def test_a_row_gone_before_first_use_matches_no_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        row = _procs.snapshot()[child.pid]
    finally:
        child.kill()
        child.wait()
    assert row.start_time == 0.0 and row.state == "X" and row.ppid == 0 and row.uid == -1
    assert _procs.environ_of(row) is None


def test_a_process_that_execs_after_the_listing_is_still_the_listed_one():
    # exec (or setproctitle: every sglang child retitles itself) keeps the pid and the start
    # time: a row first used after it is the listed process, not a gone one
    child = subprocess.Popen(["sh", "-c", "sleep 0.3; exec sleep 30"])
    try:
        time.sleep(0.05)  # listed a few clock ticks after it started (within one tick, the
        row = _procs.snapshot()[child.pid]  # command line is what says it is the same process)
        assert row.cmdline == ["sh", "-c", "sleep 0.3; exec sleep 30"]
        assert wait_for(lambda: psutil.Process(child.pid).cmdline() == ["sleep", "30"], 10)
        assert row.state != "X" and row.uid == os.geteuid() and row.ppid == os.getpid()
        assert row.start_time == _procs.start_time_of(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_pid_running_another_command_line_is_not_the_listed_process():
    # what a reused pid looks like when the row is first used: the pid runs something else
    row = _procs._Row(None, ["/usr/bin/not-what-runs-there"], pid=os.getpid())
    assert row.state == "X" and row.start_time == 0.0 and row.uid == -1
    assert _procs.environ_of(row) is None
    with pytest.raises(psutil.NoSuchProcess):
        _procs.handle_of(row).children()
    same = _procs._Row(None, _procs._argv(psutil.Process().cmdline()), pid=os.getpid())
    assert same.state != "X" and same.start_time == round(psutil.Process().create_time(), 2)
    # listed without a command line (read in the middle of its exec): nothing contradicts it
    blank = _procs._Row(None, [], pid=os.getpid())
    assert blank.state != "X" and blank.start_time == same.start_time


def test_kernel_threads_carry_the_flag():
    kthreadd = _procs.read_proc(2)
    if kthreadd is None or kthreadd.cmdline or kthreadd.comm != "kthreadd":
        pytest.skip("no kernel threads visible (private PID namespace)")
    assert kthreadd.kthread and not _procs.read_proc(os.getpid()).kthread


def test_snapshot_matches_single_reads():
    me = _procs.snapshot()[os.getpid()]
    one = _procs.read_proc(os.getpid())
    assert (me.pid, me.ppid, me.pgid, me.sid, me.comm, me.uid, me.start_time, me.cmdline) == \
        (one.pid, one.ppid, one.pgid, one.sid, one.comm, one.uid, one.start_time, one.cmdline)
    assert me.pgid == os.getpgrp() and me.sid == os.getsid(0)
    assert _procs.links()[os.getpid()] == (os.getppid(), os.getpgrp())


def test_children_of():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        kids = _procs.children_of(os.getpid())
        assert child.pid in [k.pid for k in kids] and all(k.ppid == os.getpid() for k in kids)
        assert next(k for k in kids if k.pid == child.pid).start_time == _procs.start_time_of(child.pid)
    finally:
        child.kill()
        child.wait()
    assert child.pid not in [k.pid for k in _procs.children_of(os.getpid())]
    assert _procs.children_of(4_000_000) == []


def test_to_dict_masks_secrets():
    shown = _proc(["srv --api-key zzSECRETzz"]).to_dict()
    assert "zzSECRETzz" not in repr(shown) and shown["cmdline"] == ["srv --api-key " + _redact.MASK]


def test_library_guard_without_psutil(monkeypatch):
    monkeypatch.setattr(_procs, "psutil", None)
    with pytest.raises(SglangError) as err:
        _procs.snapshot()
    assert err.value.details["reason"] == "missing_library" and "psutil" in err.value.msg


def test_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert _wait(lambda: (_procs.read_proc(child.pid) or _proc([])).state == "Z")
    assert not _procs.is_alive(child.pid)
    child.wait()


def test_read_environ_and_marker():
    env = dict(os.environ, LLMOPS_SGLANG_INSTANCE="x", LLMOPS_SGLANG_LAUNCH_ID="L", OTHER="y=z")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        # Right after fork/exec the new image's environ can read empty for a moment.
        assert _wait(lambda: "OTHER" in (_procs.read_environ(child.pid) or {}))
        assert _procs.read_environ(child.pid)["OTHER"] == "y=z"
        assert _procs.marker_of(child.pid) == {"LLMOPS_SGLANG_INSTANCE": "x", "LLMOPS_SGLANG_LAUNCH_ID": "L"}
        assert _procs.marker_of(os.getpid()) is None or "LLMOPS_SGLANG_INSTANCE" in os.environ
    finally:
        child.kill()
        child.wait()
    assert _procs.read_environ(4_000_000) is None


def test_descendants_and_children_map():
    procs = {p.pid: p for p in (
        Proc(10, 1, 10, 10, "a", "S", 0, 0.0), Proc(11, 10, 10, 10, "b", "S", 0, 0.0),
        Proc(12, 11, 10, 10, "c", "S", 0, 0.0), Proc(13, 1, 13, 13, "d", "S", 0, 0.0))}
    assert _procs.descendants(10, procs) == {11, 12}
    assert _procs.children_map(procs)[1] == [10, 13]
    assert _procs.ancestors(12, procs) == {12, 11, 10, 1}


@pytest.mark.parametrize("argv,comm,expected", [
    (["sglang::scheduler_TP0"], "sglang::schedul", "sglang process title"),
    ([], "sglang::detoken", "sglang process name"),
    (["/v/bin/python3", "-m", "sglang.launch_server", "--port", "1"], "python3", "python -m sglang.launch_server"),
    (["python", "-u", "-m", "sglang.launch_server"], "python", "python -m sglang.launch_server"),
    (["/v/bin/sglang", "serve", "--model-path", "m"], "sglang", "sglang serve"),
    (["/v/bin/python3.11", "/v/bin/sglang", "serve"], "python3.11", "sglang serve"),
    (["tail", "-f", "sglang.log"], "tail", None),
    (["vim", "sglang_notes.txt"], "vim", None),
    (["bash", "-c", "python -m sglang.launch_server"], "bash", None),
    (["python", "script.py", "-m", "sglang.launch_server"], "python", None),
    (["/v/bin/sglang", "generate"], "sglang", None),
])
def test_sglang_reason(argv, comm, expected):
    reason = _procs.sglang_reason(_proc(argv, comm))
    assert (reason is None) if expected is None else (expected in reason)


def test_resource_tracker_and_patterns():
    import re
    tracker = _proc(["/v/bin/python", "-B", "-c", "from multiprocessing.resource_tracker import main;main(5)"])
    assert _procs.is_resource_tracker(tracker)
    assert _procs.matches_any(_proc(["python", "train.py", "--x"]), [re.compile(r"train\.py")])
    assert _procs.matches_any(_proc(["python"]), [re.compile("nope")]) is None


# --- _ports -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value,ok", [(1, True), ("8000", True), (65535, True), (0, False), (65536, False),
                                      ("80a", False), ("08", False), (None, False)])
def test_validate_port(value, ok):
    if ok:
        assert _ports.validate_port(value) == int(value)
    else:
        with pytest.raises(ValueError):
            _ports.validate_port(value)


@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_listeners_ipv4_ipv6(family, host):
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind((host, 0))
    except OSError:
        pytest.skip("no %s loopback" % host)
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        found = _ports.listeners([port])
        assert len(found) == 1 and found[0].address == host and found[0].pids == [os.getpid()]
        assert found[0].family == ("ipv4" if family == socket.AF_INET else "ipv6")
        by_pid = _ports.listeners_by_pid([os.getpid()])
        assert any(l.port == port for l in by_pid)
        assert _ports.can_bind(host, port) == "address already in use"
    finally:
        sock.close()
    assert _ports.listeners([port]) == []
    assert _ports.can_bind(host, port) is None


def test_listening_socket_shared_across_fork_lists_every_holder():
    # psutil's connection table names one pid per socket; a forked child holding the listening
    # socket must be found too (a teardown that missed it would leave the port held).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], pass_fds=[sock.fileno()])
    try:
        assert _wait(lambda: any(child.pid in l.pids for l in _ports.listeners([port])))
        found = _ports.listeners([port])
        assert len(found) == 1 and found[0].pids == sorted([os.getpid(), child.pid]) and found[0].inode > 0
        assert _ports.has_listener(port)
        assert [l.pids for l in _ports.listeners_by_pid([child.pid]) if l.port == port] == [[child.pid]]
    finally:
        child.kill()
        child.wait()
        sock.close()
    assert not _ports.has_listener(port)


# --- _gpus ------------------------------------------------------------------------------------

def test_query_gpus_never_raises(monkeypatch):
    monkeypatch.delenv(_gpus.ENV_BACKEND, raising=False)
    report = _gpus.query_gpus("none")
    assert report.backend == "none" and report.gpus == [] and "disabled" in report.note
    assert _gpus.query_gpus("auto").to_dict()["backend"] in ("nvml", "nvidia-smi", "none")


def test_nvidia_smi_parsing(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncase \"$1\" in\n"
                    "--query-gpu*) echo '0, GPU-a, NVIDIA H200, 1000, 143771'; echo '1, GPU-b, NVIDIA H200, 0, 143771';;\n"
                    "--query-compute-apps*) echo '4242, 900, GPU-a'; echo '[N/A], [N/A], GPU-b';;\nesac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    report = _gpus.query_gpus("nvidia-smi")
    assert report.backend == "nvidia-smi" and [g.index for g in report.gpus] == [0, 1]
    assert report.gpus[0].memory_used_mib == 1000 and report.gpus[0].processes[0].pid == 4242
    assert report.pids_on() == {4242: {0: 900}} and report.pids_on([1]) == {}


def test_gpu_env_backend_override(monkeypatch):
    monkeypatch.setenv(_gpus.ENV_BACKEND, "none")
    assert _gpus.query_gpus("auto").backend == "none"


# --- _shm -------------------------------------------------------------------------------------

def test_shm_scan_holders(tmp_path):
    held = tmp_path / "sgl_shm_tok_1_ab"
    held.write_bytes(b"\0" * 100)
    (tmp_path / "psm_dead").write_bytes(b"\0" * 10)
    (tmp_path / "mine.txt").write_text("not a pattern")
    (tmp_path / "nccl-dir").mkdir()
    (tmp_path / "nccl-dir" / "x").write_bytes(b"12345")
    with open(held, "rb"):
        entries = {os.path.basename(e.path): e for e in _shm.scan(str(tmp_path))}
    assert set(entries) == {"sgl_shm_tok_1_ab", "psm_dead", "nccl-dir"}
    assert entries["sgl_shm_tok_1_ab"].holders == [os.getpid()] and entries["sgl_shm_tok_1_ab"].size == 100
    assert entries["psm_dead"].to_dict()["held"] is False
    assert entries["nccl-dir"].is_dir and entries["nccl-dir"].size == 5
    assert _shm.remove(entries["psm_dead"]) is None and not (tmp_path / "psm_dead").exists()
    assert _shm.remove(entries["psm_dead"]) is None  # already gone is fine
    assert "held by pid" in _shm.remove(entries["sgl_shm_tok_1_ab"])
    assert _shm.scan(str(tmp_path / "missing")) == []


def test_shm_scan_walks_the_processes_only_when_something_matches(tmp_path, monkeypatch):
    # the holder pass reads every process's fds and maps: a clean shm dir needs none of it
    calls = []
    real = _shm.open_or_mapped
    monkeypatch.setattr(_shm, "open_or_mapped", lambda *a, **k: calls.append(a) or real(*a, **k))
    (tmp_path / "notes.txt").write_text("not a pattern")
    assert _shm.scan(str(tmp_path)) == [] and calls == []
    (tmp_path / "psm_1").write_bytes(b"x")
    assert [os.path.basename(e.path) for e in _shm.scan(str(tmp_path))] == ["psm_1"] and len(calls) == 1


def test_shm_mapped_file_counts_as_held(tmp_path):
    import mmap
    path = tmp_path / "sglang_host_pool_1.mmap"
    path.write_bytes(b"\0" * 4096)
    with open(path, "r+b") as fh:
        mapped = mmap.mmap(fh.fileno(), 4096)
    try:
        held = _shm.open_or_mapped([str(tmp_path)])
        assert os.getpid() in held[str(path)]
    finally:
        mapped.close()


def test_purge_entries(tmp_path):
    (tmp_path / "a").write_text("x")
    assert [os.path.basename(e.path) for e in _shm.purge_entries(str(tmp_path), {})] == ["a"]
    assert _shm.purge_entries(str(tmp_path / "none"), {}) == []


# --- _redact ----------------------------------------------------------------------------------

def test_redact_argv_forms():
    argv = ["python", "--api-key", "k1", "--admin-api-key=k2", "--port", "1", "--api-key"]
    assert _redact.redact_argv(argv) == ["python", "--api-key", _redact.MASK, "--admin-api-key=" + _redact.MASK,
                                         "--port", "1", "--api-key"]


def test_redact_env_text_mapping_tree():
    env = _redact.redact_env({"HF_TOKEN": "t", "NCCL_PROTO": "Simple", "MY_API_KEY": "k", "EMPTY_TOKEN": ""})
    assert env == {"HF_TOKEN": _redact.MASK, "NCCL_PROTO": "Simple", "MY_API_KEY": _redact.MASK, "EMPTY_TOKEN": ""}
    text = "server_args=ServerArgs(api_key='abc', admin_api_key=None, port=1) Bearer xyz --api-key=q HF_TOKEN=hf_1"
    out = _redact.redact_text(text, ["port=1"])
    assert "abc" not in out and "xyz" not in out and "=q" not in out and "hf_1" not in out and "port=1" not in out
    assert _redact.redact_deep({"api_key": "a", "admin_api_key": None, "x": 1}) == \
        {"api_key": _redact.MASK, "admin_api_key": None, "x": 1}
    tree = _redact.redact_deep({"a": [{"api_key": "s"}], "b": "say secretvalue", "c": None}, ["secretvalue"])
    assert tree == {"a": [{"api_key": _redact.MASK}], "b": "say " + _redact.MASK, "c": None}


# --- _record and _lock ------------------------------------------------------------------------

def test_record_roundtrip_atomic_and_mode(tmp_path):
    state = str(tmp_path / "state")
    path = _record.write_record(state, "srv-1", {"pid": 1, "name": "srv-1"})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert _record.read_record(state, "srv-1")["record_version"] == _record.RECORD_VERSION
    assert not [n for n in os.listdir(state) if n.startswith(".")]  # no temp file left behind
    os.unlink(path)
    assert _record.read_record(state, "srv-1") is None
    with open(os.path.join(state, "bad.json"), "w") as fh:
        fh.write("[1]")
    with pytest.raises(SglangError, match="JSON object"):
        _record.read_record(state, "bad")
    with open(os.path.join(state, "bad.json"), "w") as fh:
        fh.write("{")
    with pytest.raises(SglangError, match="cannot read"):
        _record.read_record(state, "bad")


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x" * 65, "sp ace", None])
def test_invalid_names(name):
    with pytest.raises(SglangError, match="invalid"):
        _record.validate_name(name)


def test_paths_and_default_state_dir(tmp_path):
    assert _record.exit_path("/s", "a") == "/s/a.exit.json" and _record.tmpdir_path("/s", "a") == "/s/a.tmp"
    assert _record.default_state_dir().endswith("llmops-sglang")


def test_write_json_atomic_keeps_old_file_on_failure(tmp_path):
    path = str(tmp_path / "r.json")
    _record.write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        _record.write_json_atomic(path, {"a": object()})
    assert json.load(open(path)) == {"a": 1}
    assert os.listdir(str(tmp_path)) == ["r.json"]


def test_ensure_dir_errors(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SglangError, match="cannot create directory"):
        _record.ensure_dir(str(blocker / "sub"))


def test_instance_lock_excludes_and_names_holder(tmp_path):
    state = str(tmp_path)
    entered = threading.Event()
    release = threading.Event()

    def hold():
        with instance_lock(state, "srv", timeout=5):
            entered.set()
            release.wait(5)

    # flock is per open file description: a second open in another thread conflicts too.
    thread = threading.Thread(target=hold)
    thread.start()
    assert entered.wait(5)
    try:
        start = time.monotonic()
        with pytest.raises(SglangError, match="holds .*srv.lock") as err:
            with instance_lock(state, "srv", timeout=0.3):
                pass
        assert time.monotonic() - start >= 0.3
        assert str(os.getpid()) in err.value.msg
    finally:
        release.set()
        thread.join()
    with instance_lock(state, "srv", timeout=1) as path:
        assert path.endswith("srv.lock")


def _wait(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False
