"""Shared fixtures for the shared-host security tests: a throwaway unprivileged user, a directory
that user can reach, and a runner for code inside a private PID namespace.

These tests run as root (that is the threat model: the modules run as root on a host shared with
other users and containers). Everything they start is theirs: processes of the throwaway user
(a uid created for this test alone) and processes inside PID namespaces the test creates, which
die with the namespace's init.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

import pytest

from helpers import fdhog
from helpers.fixtures import COLLECTIONS, ROOT, kill_group

TESTS = os.path.join(ROOT, "tests")


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("security tests run as root (they create users and PID namespaces)")


@dataclass
class ThrowawayUser:
    """An unprivileged local user that exists for one test (no home, no login shell)."""
    name: str
    uid: int
    gid: int
    started: List[subprocess.Popen] = field(default_factory=list)

    def argv(self, argv: List[str]) -> List[str]:
        """`argv` run as this user (no supplementary groups)."""
        return ["setpriv", "--reuid=%d" % self.uid, "--regid=%d" % self.gid, "--clear-groups", "--"] + list(argv)

    def run(self, argv: List[str], timeout: float = 30, **kw: Any) -> subprocess.CompletedProcess:
        """Run to completion as this user; raises on a non-zero exit."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(self.argv(argv), timeout=timeout, check=True, stdin=subprocess.DEVNULL, **kw)

    def start(self, argv: List[str], **kw: Any) -> subprocess.Popen:
        """Start in its own session as this user; killed by the fixture at the end."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        proc = subprocess.Popen(self.argv(argv), start_new_session=True, **kw)
        self.started.append(proc)
        return proc

    def pids(self) -> List[int]:
        """Live processes of this uid (all of them were started by the test: the uid is new)."""
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat("/proc/" + entry).st_uid == self.uid:
                        out.append(int(entry))
                except OSError:
                    continue
        return out


@pytest.fixture
def throwaway_user() -> Iterator[ThrowawayUser]:
    """`useradd` a user llmops-sec-<random>, yield it, then kill its processes and `userdel` it."""
    _need_root()
    name = "llmops-sec-%s" % uuid.uuid4().hex[:8]
    subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name], check=True,
                   capture_output=True, text=True)
    pw = pwd.getpwnam(name)
    user = ThrowawayUser(name, pw.pw_uid, pw.pw_gid)
    try:
        yield user
    finally:
        try:
            for proc in user.started:
                kill_group(proc)
            for _attempt in range(50):
                left = user.pids()
                if not left:
                    break
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.05)
        finally:
            subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def shared_tmp() -> Iterator[str]:
    """A root-owned 0755 directory under /tmp: any user can reach what the test puts in it
    (pytest's tmp_path lives below a 0700 directory a throwaway user cannot enter)."""
    _need_root()
    path = tempfile.mkdtemp(prefix="llmops-sec-")
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sticky_shm(shared_tmp: str) -> str:
    """A world-writable sticky directory like /dev/shm or /tmp (inside shared_tmp)."""
    path = os.path.join(shared_tmp, "shm")
    os.mkdir(path)
    os.chmod(path, 0o1777)
    return path


@dataclass
class NsResult:
    rc: int
    stdout: str
    stderr: str
    data: Optional[Dict[str, Any]]


def run_in_pidns(code: str, *args: str, timeout: float = 120, env: Optional[Dict[str, str]] = None) -> NsResult:
    """Run python `code` as PID 1 of a private PID namespace with its own /proc
    (`unshare --pid --fork --mount-proc --kill-child`): a title sweep there sees only what the
    code started, and every process in it dies with it. The library and tests/ are importable.
    `data` is the JSON object on the last stdout line, if any."""
    _need_root()
    run_env = dict(os.environ)
    run_env["PYTHONPATH"] = os.pathsep.join([COLLECTIONS, TESTS])
    run_env.update(env or {})
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c", code] + list(args)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=run_env,
                          stdin=subprocess.DEVNULL, check=False)
    data = None
    lines = proc.stdout.strip().splitlines()
    if lines:
        try:
            data = json.loads(lines[-1])
        except ValueError:
            data = None
    return NsResult(proc.returncode, proc.stdout, proc.stderr, data)


@pytest.fixture
def pidns():
    """The private-PID-namespace runner (see run_in_pidns)."""
    _need_root()
    return run_in_pidns


@pytest.fixture
def fd_hog(throwaway_user) -> Iterator[List[int]]:
    """helpers.fdhog.HOGS processes of the throwaway user holding FDS_EACH duplicated fds each."""
    throwaway_user.start(fdhog.argv(sys.executable))
    yield fdhog.wait_full(throwaway_user.pids)
