"""Fixtures for the emulator tests: an interpreter with the emulator, and launches that always
clean up after themselves (own session, killed by pgid, escaped children found by marker)."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

EMULATOR_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def emulator_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """SGLANG_EMULATOR_PYTHON if set (the Makefile's .venv-emulator), else a fresh venv."""
    given = os.environ.get("SGLANG_EMULATOR_PYTHON")
    if given:
        return given
    venv = tmp_path_factory.mktemp("emu") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + [str(EMULATOR_DIR)], check=True)
    return str(venv / "bin" / "python")


def free_port(family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def read_proc(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def pids_with_marker(marker: str) -> List[int]:
    needle = f"LLMOPS_SGLANG_LAUNCH_ID={marker}".encode()
    return [
        int(p) for p in os.listdir("/proc")
        if p.isdigit() and needle in read_proc(int(p), "environ").split(b"\0")
    ]


def children_of(pid: int) -> List[int]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        stat = read_proc(int(p), "stat").decode(errors="replace")
        if stat and int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(p))
    return out


def alive(pid: int) -> bool:
    """Zombies count as gone."""
    stat = read_proc(pid, "stat").decode(errors="replace")
    return bool(stat) and stat[stat.rindex(")") + 2] != "Z"


class Launch:
    """One emulator run in its own session, logs in files (an escaped child may keep pipes open)."""

    def __init__(self, python: str, workdir: Path, args: List[str], env: Dict[str, str],
                 console: bool = False) -> None:
        self.marker = uuid.uuid4().hex
        self.err_path = workdir / f"{self.marker}.err"
        self.out_path = workdir / f"{self.marker}.out"
        full_env = dict(os.environ)
        full_env.update({
            "LLMOPS_SGLANG_INSTANCE": "pytest",
            "LLMOPS_SGLANG_LAUNCH_ID": self.marker,
            "SGLANG_EMULATOR_PHASE_SECONDS": "0.1",
            "SPT_NOENV": "1",  # keep /proc/PID/environ readable after setproctitle
            "no_proxy": "*", "NO_PROXY": "*",
        })
        full_env.update(env)
        cmd = [python, "-m", "sglang.launch_server", *args]
        if console:
            cmd = [str(Path(python).parent / "sglang"), "serve", *args]
        with open(self.err_path, "wb") as err, open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=full_env,
                                         start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_log(self, pattern: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.log()):
                return self.log()
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the last lines land
                if re.search(pattern, self.log()):
                    return self.log()
                raise AssertionError(f"exited {self.proc.returncode} before {pattern!r}:\n{self.log()}")
            time.sleep(0.05)
        raise AssertionError(f"timeout waiting for {pattern!r}:\n{self.log()}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def cleanup(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        for pid in pids_with_marker(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture
def launcher(emulator_python: str, tmp_path: Path) -> Iterator:
    started: List[Launch] = []

    def start(*args: str, env: Optional[Dict[str, str]] = None, console: bool = False) -> Launch:
        launch = Launch(emulator_python, tmp_path, list(args), env or {}, console=console)
        started.append(launch)
        return launch

    yield start
    for launch in started:
        launch.cleanup()


@pytest.fixture(scope="session")
def titles(emulator_python: str) -> None:
    """Full titles in /proc/PID/cmdline need setproctitle; the fallback sets only comm."""
    if subprocess.run([emulator_python, "-c", "import setproctitle"], check=False).returncode != 0:
        pytest.skip("setproctitle missing: only /proc/PID/comm carries the (15-char) title")
