"""Every SGLANG_EMULATOR_FAULT mode, plus multi-node and GPU-mode fallback."""

import glob
import os
import signal
import socket
import time
from typing import List

import pytest

from conftest import alive, children_of, free_port, pids_with_marker, read_proc

SIGKILLED = -signal.SIGKILL  # Popen's view of "exit 137"


def wait_gone(pids: List[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_oom_sigquit_flow(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()), "--tp-size", "2",
                      env={"SGLANG_EMULATOR_FAULT": "oom"})
    assert launch.wait_exit() == SIGKILLED
    log = launch.log()
    assert "Not enough memory. Please try to increase --mem-fraction-static." in log
    assert "Scheduler hit an exception: Traceback" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert "Uvicorn running" not in log
    assert wait_gone(pids_with_marker(launch.marker))


def test_scheduler_death(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()), "--tp-size", "2",
                      env={"SGLANG_EMULATOR_FAULT": "scheduler_death"})
    assert launch.wait_exit() == 1
    assert "Rank 0 scheduler died during initialization (exit code: 1)" in launch.log()
    assert wait_gone(pids_with_marker(launch.marker))


def test_hang_honours_sigterm(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_FAULT": "hang"})
    launch.wait_log("Load weight begin")
    time.sleep(1.0)
    assert launch.proc.poll() is None and "Load weight end" not in launch.log()
    kids = children_of(launch.pid)
    os.kill(launch.pid, signal.SIGTERM)  # no handler yet during init: default action
    assert launch.wait_exit(timeout=10) == -signal.SIGTERM
    assert wait_gone(kids)  # PDEATHSIG takes the children down


def test_ignore_sigterm(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_FAULT": "ignore_sigterm"})
    launch.wait_log("fired up")
    os.killpg(launch.pid, signal.SIGTERM)
    time.sleep(1.0)
    assert launch.proc.poll() is None
    assert all(alive(p) for p in children_of(launch.pid))
    os.killpg(launch.pid, signal.SIGKILL)
    assert launch.wait_exit() == SIGKILLED


def test_escape_survives_parent_and_holds_port(launcher, titles) -> None:
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port),
                      env={"SGLANG_EMULATOR_FAULT": "escape"})
    launch.wait_log("fired up")

    def escaped_workers() -> List[int]:
        return [p for p in pids_with_marker(launch.marker)
                if read_proc(p, "cmdline").startswith(b"sglang::tokenizer_worker:")]

    # The grandchild titles itself after its second fork: on a loaded host that can come
    # after the ready line.
    deadline = time.monotonic() + 10
    escaped = escaped_workers()
    while not escaped and time.monotonic() < deadline:
        time.sleep(0.05)
        escaped = escaped_workers()
    assert len(escaped) == 1
    pid = escaped[0]
    assert os.getsid(pid) != os.getsid(launch.pid)  # double fork + setsid: its own session
    assert pid not in children_of(launch.pid)  # already reparented away from the launcher
    assert read_proc(pid, "cmdline").split(b"\0")[0] == f"sglang::tokenizer_worker:{pid}".encode()
    os.killpg(launch.pid, signal.SIGKILL)
    launch.wait_exit()
    time.sleep(0.3)
    assert alive(pid)
    with socket.socket() as sock:  # the inherited listening socket keeps the port taken
        with pytest.raises(OSError):
            sock.bind(("127.0.0.1", port))
    # cleanup() kills it via the marker


def test_leak_shm(launcher) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    launch = launcher("--model-path", "m", "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_FAULT": "leak_shm"})
    launch.wait_log("fired up")
    pids = [launch.pid] + children_of(launch.pid)
    sgl = [f for p in pids for f in glob.glob(f"/dev/shm/sgl_shm_*_{p}_*")]
    assert len(sgl) >= 3  # launcher, scheduler, detokenizer
    held = [os.readlink(f"/proc/{launch.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{launch.pid}/fd")]
    assert any(h.startswith("/dev/shm/sgl_shm_tokenizer_") for h in held)
    psm_before = set(glob.glob("/dev/shm/psm_*"))
    os.killpg(launch.pid, signal.SIGTERM)
    launch.wait_exit()
    try:
        assert all(os.path.exists(f) for f in sgl + sorted(psm_before))
    finally:
        for f in sgl + [f for f in psm_before if _created_recently(f)]:
            os.unlink(f)


def _created_recently(path: str) -> bool:
    try:
        return time.time() - os.stat(path).st_mtime < 120
    except OSError:
        return False


def test_crash_after(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_FAULT": "crash_after",
                           "SGLANG_EMULATOR_CRASH_AFTER": "0.5"})
    launch.wait_log("fired up")
    assert launch.wait_exit(timeout=15) == SIGKILLED
    log = launch.log()
    assert "Scheduler hit an exception: Traceback" in log and "CUDA error" in log
    assert "Received sigquit from a child process" in log


def test_killed_scheduler_brings_server_down(launcher, titles) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()), "--tp-size", "2")
    launch.wait_log("fired up")
    sched = [p for p in children_of(launch.pid) if read_proc(p, "cmdline").startswith(b"sglang::scheduler_TP1")]
    os.kill(sched[0], signal.SIGKILL)
    assert launch.wait_exit(timeout=10) == SIGKILLED
    assert "Rank 1 scheduler is dead" in launch.log()


def test_gpu_mib_without_cuda_warns(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_GPU_MIB": "16", "CUDA_VISIBLE_DEVICES": ""})
    log = launch.wait_log("fired up")
    assert "SGLANG_EMULATOR_GPU_MIB is set but torch with CUDA is not available" in log


def test_multi_node(launcher, titles) -> None:
    dist = f"127.0.0.1:{free_port()}"
    port0, port1 = free_port(), free_port()
    common = ["--model-path", "m", "--tp-size", "2", "--nnodes", "2", "--dist-init-addr", dist]
    node0 = launcher(*common, "--node-rank", "0", "--port", str(port0))
    node0.wait_log("Init torch distributed begin")
    time.sleep(0.5)
    assert "Load weight begin" not in node0.log()  # waits for the peer
    node1 = launcher(*common, "--node-rank", "1", "--port", str(port1))
    node0.wait_log("fired up")
    log1 = node1.wait_log("Dummy health check server started in background thread at")
    assert f"at 127.0.0.1:{port1}" in log1 and " TP1] Load weight begin" in log1
    assert "fired up" not in log1 and "Uvicorn running" not in log1
    titles = [read_proc(p, "cmdline").split(b"\0")[0] for p in children_of(node1.pid)]
    assert b"sglang::scheduler_TP1" in titles
    os.kill(node1.pid, signal.SIGTERM)
    assert node1.wait_exit(timeout=10) == 0
