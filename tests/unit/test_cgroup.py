"""cgroup v2 containment on this host (root; pure or hybrid v2 mount): every member found and
stopped whatever it does to escape, strangers never signalled, the cgroup removed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

MOUNT = _cgroup.v2_mount()


def test_this_host_has_a_writable_cgroup_v2() -> None:
    """The suite runs as root on hosts with cgroup v2 (pure or hybrid): say so loudly if not."""
    assert MOUNT, "no cgroup2 mount in /proc/self/mountinfo"
    assert _cgroup.writable(MOUNT)[0], _cgroup.writable(MOUNT)[1]


# A worker that does everything an escaping process can without privileges: double fork,
# setsid, reparent to init, new title, empty environment, ignore SIGTERM.
ESCAPER = r"""
import os, signal, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.environ.clear()
        with open(sys.argv[1], "w") as fh:
            fh.write(str(os.getpid()))
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()
time.sleep(600)
"""


def test_v2_mount_parses_both_layouts(tmp_path) -> None:
    hybrid = tmp_path / "hybrid"
    hybrid.write_text("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    pure = tmp_path / "pure"
    pure.write_text("30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    v1 = tmp_path / "v1"
    v1.write_text("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")
    assert _cgroup.v2_mount(str(hybrid)) == "/sys/fs/cgroup/unified"
    assert _cgroup.v2_mount(str(pure)) == "/sys/fs/cgroup"
    assert _cgroup.v2_mount(str(v1)) is None


def test_populated_treats_a_missing_cgroup_as_empty(tmp_path) -> None:
    assert _cgroup.populated(str(tmp_path / "gone")) is False
    assert _cgroup.members(str(tmp_path / "gone")) == []


@pytest.fixture
def cgroup_path():
    name = "llmops-test-%s" % uuid.uuid4().hex[:10]
    path = _cgroup.create(MOUNT, name)
    yield path
    if _cgroup.populated(path):
        _cgroup.kill(path)
        _cgroup.wait_empty(path, time.monotonic() + 5)
    _cgroup.remove(path)


def test_escaped_worker_is_a_member_and_cgroup_kill_stops_it(cgroup_path, tmp_path) -> None:
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, "-c", ESCAPER, str(pidfile)],
                            preexec_fn=lambda: _cgroup.join(cgroup_path), start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline, "worker never started"
            time.sleep(0.02)
        escaped = int(pidfile.read_text())
        members = _cgroup.members(cgroup_path)
        assert proc.pid in members and escaped in members
        assert os.getsid(escaped) != os.getsid(proc.pid)  # it left the session...
        assert escaped in _cgroup.signal_members(cgroup_path, signal.SIGTERM)
        proc.wait(timeout=10)
        assert _cgroup.populated(cgroup_path)  # ...and ignored SIGTERM, but not its cgroup
        assert _cgroup.kill(cgroup_path) in ("cgroup.kill", "SIGKILL to each member")
        assert _cgroup.wait_empty(cgroup_path, time.monotonic() + 10)
        assert _cgroup.remove(cgroup_path)
        assert not os.path.exists(cgroup_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_stranger_with_a_listed_pid_is_never_signalled(cgroup_path, monkeypatch) -> None:
    """cgroup.procs was read while the pid was a member's; by the time of the signal the number
    belongs to a stranger outside the cgroup: the membership is read again after the pidfd is
    opened, and the stranger gets nothing."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    real = _cgroup.members
    reads = []

    def stale_then_real(path):
        reads.append(path)
        return [stranger.pid] if len(reads) == 1 else real(path)

    monkeypatch.setattr(_cgroup, "members", stale_then_real)
    try:
        assert _cgroup.signal_members(cgroup_path, signal.SIGKILL) == []
        assert len(reads) == 2
        assert stranger.poll() is None
        assert _cgroup.kill_each(cgroup_path) == "SIGKILL to each member"
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_member_loop_without_cgroup_kill_stops_an_escaped_tree(cgroup_path, tmp_path) -> None:
    """Kernels before 5.14 have no cgroup.kill: freeze + SIGKILL per member reaches everything."""
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, "-c", ESCAPER, str(pidfile)],
                            preexec_fn=lambda: _cgroup.join(cgroup_path), start_new_session=True)
    try:
        assert _wait_file(pidfile)
        assert _cgroup.kill_each(cgroup_path) == "SIGKILL to each member"
        assert _cgroup.wait_empty(cgroup_path, time.monotonic() + 10)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_file(path, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_create_refuses_a_populated_cgroup_and_renews_an_empty_one(cgroup_path) -> None:
    """A populated instance cgroup is a running launch: never mixed with. An empty one is made
    again, so a new launch never shares a cgroup id with an older record."""
    name = os.path.basename(cgroup_path)
    old_id = _cgroup.cgroup_id(cgroup_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            preexec_fn=lambda: _cgroup.join(cgroup_path))
    try:
        with pytest.raises(SglangError) as err:
            _cgroup.create(MOUNT, name)
        assert err.value.details["reason"] == "cgroup_busy" and proc.pid in err.value.details["pids"]
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert _cgroup.wait_empty(cgroup_path, time.monotonic() + 10)
    assert _cgroup.create(MOUNT, name) == cgroup_path
    assert _cgroup.cgroup_id(cgroup_path) != old_id
    assert oct(os.stat(cgroup_path).st_mode & 0o777) == "0o700"


def test_wait_empty_returns_once_the_last_member_exits(cgroup_path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"],
                            preexec_fn=lambda: _cgroup.join(cgroup_path))
    try:
        assert _cgroup.populated(cgroup_path)
        assert _cgroup.wait_empty(cgroup_path, time.monotonic() + 30)
        assert not _cgroup.populated(cgroup_path)
    finally:
        proc.kill()
        proc.wait()


def test_a_cgroup_owned_by_another_user_is_refused(tmp_path) -> None:
    name = "llmops-test-%s" % uuid.uuid4().hex[:10]
    path = _cgroup.instance_path(MOUNT, name)
    os.makedirs(path)
    try:
        os.chown(path, 65534, 65534)
        with pytest.raises(SglangError) as err:
            _cgroup.create(MOUNT, name)
        assert err.value.details["reason"] == "unsafe_cgroup"
    finally:
        os.rmdir(path)


NS_HELPER = r"""
import json, signal, sys
from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
print(open("/proc/self/cgroup").read().strip().splitlines()[-1])
print(json.dumps(_cgroup.signal_members(sys.argv[1], signal.SIGTERM)))
"""


def test_members_are_signalled_from_inside_a_cgroup_namespace(cgroup_path) -> None:
    """A module in a container with its own cgroup namespace sees /proc/PID/cgroup relative to
    that namespace, not to the mount: membership must come from cgroup.procs, or SIGTERM reaches
    nobody and every teardown ends in SIGKILL."""
    runner_cg = _cgroup.create(MOUNT, "llmops-test-ns-%s" % uuid.uuid4().hex[:8])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               preexec_fn=lambda: _cgroup.join(cgroup_path))
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        out = subprocess.run(["unshare", "--cgroup", sys.executable, "-c", NS_HELPER, cgroup_path],
                             preexec_fn=lambda: _cgroup.join(runner_cg), env=env, capture_output=True,
                             text=True, timeout=30, check=True).stdout.splitlines()
        assert out[0] == "0::/"  # the helper's own cgroup is the root of its namespace
        assert json.loads(out[1]) == [sleeper.pid]
        assert sleeper.wait(timeout=10) == -signal.SIGTERM
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        _cgroup.wait_empty(runner_cg, time.monotonic() + 10)
        _cgroup.remove(runner_cg)
