"""The teardown engine on trivial process trees this test starts (scoped by a unique token)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from typing import List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _pidfd
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope

TREE = ("import subprocess, sys, time, signal\n"
        "if 'ignore' in sys.argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time, signal, sys; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN) if \"ignore\" in sys.argv else None; time.sleep(120)'] + sys.argv[1:])\n"
        "time.sleep(120)\n")


@pytest.fixture
def token() -> str:
    return "zz_td_%s" % uuid.uuid4().hex[:10]


@pytest.fixture
def started():
    procs: List[subprocess.Popen] = []
    yield procs
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait(timeout=5)


def start_tree(started, token: str, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", TREE, token, *extra], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(proc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        snap = _procs.snapshot()
        if len([p for p in snap.values() if token in " ".join(p.cmdline)]) >= 2:
            break
        time.sleep(0.05)
    return proc


def scope_for(token: str, **kw):
    args = dict(name=None, state_dir=None, ports=[], gpus=[], patterns=[token], sglang_processes=False,
                all_users=False, protect=[], foreign_gpu_processes="fail", own_cmdlines=[" ".join(sys.argv)])
    args.update(kw)
    return build_scope(**args)


def test_sigterm_ends_a_tree_and_second_run_is_idempotent(tmp_path, started, token):
    proc = start_tree(started, token)
    opts = _teardown.Options(grace_period=5, timeout=5, shm_dir=str(tmp_path), gpu_backend="none")
    plan = _teardown.make_plan(scope_for(token), opts)
    assert len(plan.targets) == 2
    assert [s.kind for s in plan.steps] == ["group"]       # own session: whole group is targets
    result = _teardown.execute(plan, opts)
    assert not result.get("failed"), result
    assert {k["signal"] for k in result["killed"]} == {"SIGTERM"}
    assert result["changed"] and not result["survivors"]
    proc.wait(timeout=5)
    again = _teardown.execute(_teardown.make_plan(scope_for(token), opts), opts)
    assert again["changed"] is False and not again["targets"]


def test_sigterm_ignored_escalates_to_sigkill(tmp_path, started, token):
    start_tree(started, token, "ignore")
    opts = _teardown.Options(grace_period=0.5, timeout=5, shm_dir=str(tmp_path), gpu_backend="none")
    result = _teardown.execute(_teardown.make_plan(scope_for(token), opts), opts)
    assert not result.get("failed"), result
    assert {k["signal"] for k in result["killed"]} == {"SIGKILL"}
    assert result["timings"]["term"] >= 0.5


def test_shm_and_purge_keep_what_a_live_process_holds(tmp_path, started, token):
    shm = tmp_path / "shm"
    shm.mkdir()
    dump = tmp_path / "dump"
    dump.mkdir()
    for name in ("sgl_shm_x_1_abc", "psm_1a2b", "nccl-xyz", "sgl_shm_held_2_def", "notes.txt"):
        (shm / name).write_bytes(b"\0" * 64)
    (dump / "a.pt").write_bytes(b"1")
    (dump / "held.pt").write_bytes(b"1")
    holder = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1]); g=open(sys.argv[2]); "
                               "print('ok', flush=True); time.sleep(60)", str(shm / "sgl_shm_held_2_def"),
                               str(dump / "held.pt")], stdout=subprocess.PIPE, start_new_session=True)
    started.append(holder)
    assert holder.stdout.readline().strip() == b"ok"
    opts = _teardown.Options(grace_period=1, timeout=2, shm_dir=str(shm), purge_paths=[str(dump)], gpu_backend="none")
    plan = _teardown.make_plan(scope_for(token), opts)
    check = _teardown.check_mode_result(plan)
    assert {os.path.basename(f["path"]) for f in check["shm_removed"]} == {"sgl_shm_x_1_abc", "psm_1a2b", "nccl-xyz", "a.pt"}
    assert os.path.exists(shm / "sgl_shm_x_1_abc")         # check mode removed nothing
    result = _teardown.execute(plan, opts)
    assert sorted(os.listdir(shm)) == ["notes.txt", "sgl_shm_held_2_def"]
    assert os.listdir(dump) == ["held.pt"] and dump.is_dir()
    kept = {os.path.basename(k["path"]): k["held_by"][0]["pid"] for k in result["shm_kept"]}
    assert kept == {"sgl_shm_held_2_def": holder.pid, "held.pt": holder.pid}
    assert result["changed"]


def test_pid_reuse_guard_never_signals_another_process(started, token):
    proc = start_tree(started, token)
    real = _procs.read_proc(proc.pid)
    # planned with another start time: no handle (pidfd path), and the fallback path sends nothing
    assert _pidfd.open_handle(proc.pid, real.start_time + 100.0) is None
    assert _pidfd.Handle(proc.pid, real.start_time + 100.0, None).send(signal.SIGTERM) == "gone"
    assert _procs.is_alive(proc.pid)
    handle = _pidfd.open_handle(proc.pid, real.start_time)
    assert handle is not None and not handle.exited()
    handle.close()


def test_d_state_is_reported_with_wchan(monkeypatch, tmp_path, started, token):
    proc = start_tree(started, token)
    opts = _teardown.Options(grace_period=0.1, timeout=0.3, shm_dir=str(tmp_path), gpu_backend="none")
    plan = _teardown.make_plan(scope_for(token), opts)
    stuck = _procs.read_proc(proc.pid)
    stuck.state = "D"
    real_read = _procs.read_proc
    monkeypatch.setattr(_pidfd.Handle, "exited", lambda self: False)
    monkeypatch.setattr(_teardown, "_deliver", lambda *a, **k: [])
    monkeypatch.setattr(_procs, "read_proc", lambda pid: stuck if pid == proc.pid else real_read(pid))
    with pytest.raises(SglangError) as err:
        _teardown.execute(plan, opts)
    result = err.value.details
    assert result["reason"] == "d_state"
    assert result["d_state"][0]["pid"] == proc.pid and "wchan" in result["d_state"][0]
    assert "wchan" in err.value.msg


@pytest.mark.parametrize("kw", [dict(grace_period=-1), dict(timeout=-0.5), dict(purge_paths=["relative/dir"]),
                                dict(purge_paths=["/dev/shm"]), dict(purge_paths=["/tmp/"]), dict(gpu_backend="cuda")])
def test_bad_options(kw):
    with pytest.raises(SglangError) as err:
        _teardown.validate_options(_teardown.Options(**kw), "/state")
    assert err.value.details["reason"] in ("bad_option", "bad_purge_path")


def test_without_pidfds_the_start_time_check_guards_each_kill(monkeypatch, tmp_path, started, token):
    """Fallback where pidfd_open is missing (old Python or kernel): same result, no pidfds."""
    monkeypatch.setattr(_pidfd, "_UNSUPPORTED", True)
    proc = start_tree(started, token)
    opts = _teardown.Options(grace_period=5, timeout=5, shm_dir=str(tmp_path), gpu_backend="none")
    plan = _teardown.make_plan(scope_for(token), opts)
    assert len(plan.handles) == 2 and all(h.fd is None for h in plan.handles.values())
    result = _teardown.execute(plan, opts)
    assert not result.get("failed"), result
    assert {k["signal"] for k in result["killed"]} == {"SIGTERM"}
    proc.wait(timeout=5)


STOPPABLE = ("import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
             "print('ready', flush=True)\n"
             "time.sleep(120)\n")


def test_a_stopped_target_is_continued_so_it_can_honour_sigterm(tmp_path, started, token):
    # A SIGTERM handler cannot run in a stopped process: without SIGCONT it sat out the whole
    # grace period and was SIGKILLed.
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE, token], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    started.append(proc)
    assert proc.stdout.readline().strip() == b"ready"
    os.kill(proc.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_procs.read_proc(proc.pid) or _procs.Proc(0, 0, 0, 0, "", "?", 0, 0.0)).state != "T":
        time.sleep(0.02)
    assert _procs.read_proc(proc.pid).state == "T"
    opts = _teardown.Options(grace_period=15, timeout=5, shm_dir=str(tmp_path), gpu_backend="none")
    result = _teardown.execute(_teardown.make_plan(scope_for(token), opts), opts)
    assert not result.get("failed"), result
    assert [(k["pid"], k["signal"]) for k in result["killed"]] == [(proc.pid, "SIGTERM")], result["killed"]
    assert proc.wait(timeout=5) == 0          # its own handler ended it
    assert [s["signal"] for s in result["signals"]] == ["SIGTERM", "SIGCONT"]
