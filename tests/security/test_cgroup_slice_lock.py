"""Another user held the cgroup slice's claim lock, and every launch failed after the teardown.

The slice (`<cgroup2>/llmops-sglang.slice`) was made 0755, and its directory was what a launcher
flocks while it claims an instance cgroup. flock needs no write access, so any user could open
the slice and hold the lock for ever: the launch plan saw nothing (it looked at the instance
cgroup only), the teardown stopped the server, and the claim waited 10 s and failed with
cgroup_busy ("another launcher"). The rollback claims the same way: the host stayed down.

Now the slice is 0711, set on its descriptor whenever a launch opens it (an older 0755 slice is
closed to others by the next launch), and a lock another user still holds from before is
refused by the launch plan (`_containment.launch_problem`), naming the holder, before anything
is stopped.

The tests use a private cgroup as the "mount" (a fresh cgroup of their own under the real
hierarchy), so the host's real slice, shared with other runs, is never touched.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Iterator, Tuple

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment

# The attacker: open the slice, flock it, say so, and keep it.
HOLD = r"""
import fcntl, os, sys, time
try:
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError as exc:
    print("refused %s" % exc.errno, flush=True)
    sys.exit(0)
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def mount(monkeypatch) -> Iterator[str]:
    """A private cgroup standing in for the cgroup2 mount (0755: any user can walk into it)."""
    real = _cgroup.v2_mount()
    ok, why = _cgroup.writable(real)
    assert ok and real, "cgroup v2 must be writable for this test: %s" % why
    path = os.path.join(real, "llmops-sec-slice-%s" % uuid.uuid4().hex[:8])
    os.mkdir(path, 0o755)
    monkeypatch.setattr(_cgroup, "v2_mount", lambda *_a, **_k: path)
    try:
        yield path
    finally:
        for sub in sorted((d for d, _dirs, _files in os.walk(path)), key=len, reverse=True):
            try:
                os.rmdir(sub)
            except OSError:
                pass


def _old_slice(mount: str) -> str:
    """The slice as an earlier version left it: 0755."""
    path = _cgroup.slice_path(mount)
    os.mkdir(path, 0o755)
    os.chmod(path, 0o755)
    return path


def _attack(user, slice_dir: str) -> Tuple[subprocess.Popen, str]:
    proc = user.start([sys.executable, "-c", HOLD, slice_dir], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def _claim(mount: str, name: str) -> str:
    fields = _containment.prepare(name, "cgroup", "test", "/nonexistent-state")
    _containment.release(fields)
    assert fields["cgroup"] == _cgroup.instance_path(mount, name)
    return fields["cgroup"]


def test_another_user_cannot_take_the_slice_lock(mount, throwaway_user):
    slice_dir = _old_slice(mount)
    _claim(mount, "first")  # a launch opens the older 0755 slice and closes it to others
    proc, said = _attack(throwaway_user, slice_dir)
    assert said.startswith("refused"), "another user holds the slice lock: %s" % said
    assert os.stat(slice_dir).st_mode & 0o777 == _cgroup.SLICE_MODE == 0o711
    assert _containment.launch_problem("second", "cgroup") is None
    started = time.monotonic()
    assert _claim(mount, "second")
    assert time.monotonic() - started < _cgroup.CLAIM_WAIT_S  # never waited out the lock
    proc.kill()


def test_a_lock_held_from_before_is_refused_by_the_plan_naming_its_holder(mount, throwaway_user, monkeypatch):
    slice_dir = _old_slice(mount)
    proc, said = _attack(throwaway_user, slice_dir)  # opened while the slice was still 0755
    assert said == "locked"
    problem = _containment.launch_problem("inst", "cgroup")
    assert problem is not None, "the launch plan passes: the teardown would stop the server"
    assert str(proc.pid) in problem or any(str(p) in problem for p in throwaway_user.pids())
    assert "uid %d" % throwaway_user.uid in problem
    monkeypatch.setattr(_cgroup, "CLAIM_WAIT_S", 0.2)
    with pytest.raises(SglangError) as err:
        _claim(mount, "inst")
    assert err.value.details.get("reason") == "cgroup_busy"
    assert "uid %d" % throwaway_user.uid in err.value.msg
    proc.kill()
