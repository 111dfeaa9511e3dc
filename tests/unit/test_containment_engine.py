"""Containment choice and teardown by cgroup (root on a host with cgroup v2, pure or hybrid):
which backend auto picks and why, a record's cgroup recognised by its id, only members ever
signalled, an empty or missing cgroup left unchanged."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, Iterator, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

MOUNT = _cgroup.v2_mount()
# Exits on SIGTERM; forks argv[1] children that do the same; each says "ready" in argv[2].
TREE = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda s, f: os._exit(0))
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        break
with open(sys.argv[2], "a") as fh:
    fh.write("ready\n")
while True:
    time.sleep(1)
"""
IGNORER = r"""
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write("ready\n")
time.sleep(60)
"""


def _name() -> str:
    return "llmops-test-%s" % uuid.uuid4().hex[:10]


@pytest.fixture
def record() -> Iterator[Dict[str, Any]]:
    """A contained launch's record fields (the cgroup made by prepare), the cgroup removed after."""
    name = _name()
    fields = _containment.prepare(name, "cgroup", "test")
    fields["name"] = name
    yield fields
    path = _cgroup.instance_path(MOUNT, name)
    if os.path.isdir(path):
        _cgroup.kill(path)
        _cgroup.wait_empty(path, time.monotonic() + 10)
        _cgroup.remove(path)


def _start_in(path: str, argv: List[str]) -> "subprocess.Popen[bytes]":
    return subprocess.Popen(argv, preexec_fn=lambda: _cgroup.join(path), start_new_session=True)


def _wait_members(path: str, count: int, timeout: float = 10) -> List[int]:
    deadline = time.monotonic() + timeout
    while len(_cgroup.members(path)) < count:
        assert time.monotonic() < deadline, "only %s in %s" % (_cgroup.members(path), path)
        time.sleep(0.02)
    return _cgroup.members(path)


def _ready(path, count: int = 1, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().count("ready") >= count):
        assert time.monotonic() < deadline, "the test processes never became ready"
        time.sleep(0.02)


def _reap(proc: "subprocess.Popen[bytes]") -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


# --- choose -----------------------------------------------------------------------------------

def _host(monkeypatch, pid1_systemd: bool, systemd_usable: bool, cgroup_ok: bool) -> None:
    """PID 1 systemd or not; systemd_usable: root, systemd-run present (when PID 1 is systemd)."""
    sd = (True, "PID 1 is systemd: a transient unit per instance") if pid1_systemd and systemd_usable else \
        (False, "PID 1 is systemd, but units of the system manager need root (uid 7)") if pid1_systemd else \
        (False, "PID 1 is not systemd (/run/systemd/system does not exist)")
    monkeypatch.setattr(_containment, "_systemd_status", lambda: sd)
    monkeypatch.setattr(_containment._systemd, "pid1_is_systemd", lambda: pid1_systemd)
    monkeypatch.setattr(_containment, "_cgroup_status",
                        lambda: (cgroup_ok, "cgroup v2 at /x is writable" if cgroup_ok else "/x is not writable by uid 7"))


def test_auto_prefers_systemd_then_cgroup_then_none(monkeypatch) -> None:
    _host(monkeypatch, pid1_systemd=True, systemd_usable=True, cgroup_ok=True)
    assert _containment.choose("auto")[0] == "systemd"
    _host(monkeypatch, pid1_systemd=True, systemd_usable=False, cgroup_ok=True)
    backend, why = _containment.choose("auto")
    assert backend == "cgroup" and "systemd not used" in why and "need root" in why and "writable" in why
    _host(monkeypatch, pid1_systemd=False, systemd_usable=True, cgroup_ok=True)
    backend, why = _containment.choose("auto")
    assert backend == "cgroup" and "PID 1 is not systemd" in why
    _host(monkeypatch, pid1_systemd=False, systemd_usable=False, cgroup_ok=False)
    backend, why = _containment.choose("auto")
    assert backend == "none" and "not writable by uid 7" in why


def test_a_named_backend_that_is_not_available_is_refused_with_the_reason(monkeypatch) -> None:
    _host(monkeypatch, pid1_systemd=False, systemd_usable=False, cgroup_ok=False)
    with pytest.raises(SglangError) as err:
        _containment.choose("cgroup")
    assert err.value.details["reason"] == "containment_unavailable" and "not writable by uid 7" in err.value.msg
    with pytest.raises(SglangError) as err:
        _containment.choose("systemd")
    assert err.value.details["reason"] == "containment_unavailable" and "PID 1 is not systemd" in err.value.msg
    _host(monkeypatch, pid1_systemd=True, systemd_usable=False, cgroup_ok=True)
    with pytest.raises(SglangError) as err:
        _containment.choose("systemd")
    assert "need root" in err.value.msg
    assert _containment.choose("none")[0] == "none"
    with pytest.raises(SglangError) as err:
        _containment.choose("docker")
    assert err.value.details["reason"] == "bad_option"


def test_this_host_as_root_gets_the_cgroup_backend() -> None:
    """The test hosts do not run systemd as PID 1 (the systemd backend is tested inside a
    container that does: tests/integration/test_containment_systemd.py)."""
    backend, why = _containment.choose("auto")
    assert backend == "cgroup", why
    assert MOUNT in why and "PID 1 is not systemd" in why
    with pytest.raises(SglangError) as err:
        _containment.prepare(_name(), "systemd")
    assert err.value.details["reason"] == "containment_unavailable"


# --- stop ---------------------------------------------------------------------------------------

def test_stop_terms_every_member_waits_for_empty_and_removes_the_cgroup(record, tmp_path) -> None:
    path = record["cgroup"]
    proc = _start_in(path, [sys.executable, "-c", TREE, "3", str(tmp_path / "ready")])
    try:
        _ready(tmp_path / "ready", 4)
        pids = _wait_members(path, 4)
        result = _containment.stop(record, grace_period=10, deadline=time.monotonic() + 20)
        assert result["changed"] and result["empty"] and result["removed"] and result["killed_with"] is None
        assert {m["pid"]: m["ended"] for m in result["members"]} == {pid: "SIGTERM" for pid in pids}
        assert result["cgroup"] == path and not os.path.exists(path)
        assert proc.wait(timeout=5) == 0
    finally:
        _reap(proc)


def test_stop_kills_what_ignores_sigterm_after_the_grace_period(record, tmp_path) -> None:
    path = record["cgroup"]
    proc = _start_in(path, [sys.executable, "-c", IGNORER, str(tmp_path / "ready")])
    try:
        _ready(tmp_path / "ready")
        pid = _wait_members(path, 1)[0]
        result = _containment.stop(record, grace_period=0.5, deadline=time.monotonic() + 20)
        assert result["killed_with"] == "cgroup.kill" and result["empty"] and result["removed"]
        assert [(m["pid"], m["ended"]) for m in result["members"]] == [(pid, "SIGKILL")]
        assert proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        _reap(proc)


def test_empty_or_missing_cgroup_is_nothing_to_do(record) -> None:
    result = _containment.stop(record, grace_period=5, deadline=time.monotonic() + 5)
    assert not result["changed"] and result["members"] == [] and result["empty"]
    again = _containment.stop(record, grace_period=5, deadline=time.monotonic() + 5)
    assert not again["changed"] and again["cgroup"] is None and "does not exist" in again["notes"][0]


def test_a_later_cgroup_of_the_same_name_is_never_touched_through_an_older_record(record) -> None:
    """Another launch (this state dir's next one, or another state dir's instance of the same
    name) made the cgroup again: it has a new id, and the old record leads to nothing."""
    path = record["cgroup"]
    newer = _containment.prepare(record["name"], "cgroup", "test")
    assert newer["cgroup"] == path and newer["cgroup_id"] != record["cgroup_id"]
    proc = _start_in(path, [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_members(path, 1)
        assert _containment.members_of(record) == []
        result = _containment.stop(record, grace_period=1, deadline=time.monotonic() + 5)
        assert not result["changed"] and result["cgroup"] is None and "later launch" in result["notes"][-1]
        assert proc.poll() is None
        assert [m["pid"] for m in _containment.members_of(dict(record, **newer))] == [proc.pid]
    finally:
        _reap(proc)


def test_the_cgroup_path_written_in_a_record_is_never_acted_on(record) -> None:
    """The path acted on is derived from the instance name: a record edited to name the
    hierarchy's root (or any other cgroup) cannot make teardown signal its members."""
    tampered = dict(record, cgroup=MOUNT, cgroup_id=_cgroup.cgroup_id(MOUNT))
    result = _containment.stop(tampered, grace_period=1, deadline=time.monotonic() + 5)
    assert not result["changed"] and result["cgroup"] is None
    assert any("this host keeps the instance's at %s" % record["cgroup"] in n for n in result["notes"])


def test_a_cgroup_of_another_owner_is_refused_before_any_signal(record) -> None:
    path = record["cgroup"]
    proc = _start_in(path, [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_members(path, 1)
        os.chown(path, 65534, 65534)
        with pytest.raises(SglangError) as err:
            _containment.stop(record, grace_period=1, deadline=time.monotonic() + 5)
        assert err.value.details["reason"] == "unsafe_cgroup"
        assert proc.poll() is None
    finally:
        os.chown(path, 0, 0)
        _reap(proc)


def test_a_record_from_before_containment_is_not_contained(record) -> None:
    old = {"name": record["name"], "pid": 1, "start_time": 0.0, "pgid": 1, "sid": 1, "record_version": 1}
    assert not _containment.is_contained(old) and not _containment.is_contained(None)
    proc = _start_in(record["cgroup"], [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_members(record["cgroup"], 1)
        result = _containment.stop(old, grace_period=1, deadline=time.monotonic() + 5)
        assert not result["changed"] and result["containment"] == "none" and proc.poll() is None
        assert _containment.members_of(old) == [] and _containment.outside_members(old, [proc.pid]) == []
    finally:
        _reap(proc)


def test_outside_members_flags_processes_of_the_instance_outside_its_cgroup(record) -> None:
    inside = _start_in(record["cgroup"], [sys.executable, "-c", "import time; time.sleep(60)"])
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_members(record["cgroup"], 1)
        assert _containment.outside_members(record, [inside.pid, outside.pid]) == [outside.pid]
        assert [m["pid"] for m in _containment.members_of(record)] == [inside.pid]
    finally:
        _reap(inside)
        _reap(outside)


def test_a_member_forked_during_the_grace_period_gets_sigterm_too(record, tmp_path) -> None:
    """The server forks while shutting down: the child is a member, and is asked to stop too."""
    marker = tmp_path / "late"
    code = r"""
import os, signal, sys, time
def on_term(s, f):
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, lambda s, f: os._exit(0))
        open(sys.argv[1], "w").write(str(os.getpid()))
        while True:
            time.sleep(1)
    time.sleep(0.5)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
open(sys.argv[2], "w").write("ready")
while True:
    time.sleep(1)
"""
    proc = _start_in(record["cgroup"], [sys.executable, "-c", code, str(marker), str(tmp_path / "ready")])
    try:
        _ready(tmp_path / "ready")
        result = _containment.stop(record, grace_period=10, deadline=time.monotonic() + 20)
        late = int(marker.read_text())
        ended = {m["pid"]: (m["ended"], m.get("appeared")) for m in result["members"]}
        assert ended[late] == ("SIGTERM", "after SIGTERM") and result["killed_with"] is None
        assert result["removed"]
    finally:
        _reap(proc)


def test_launch_problem_and_prepare_refuse_a_running_instance(record) -> None:
    assert _containment.launch_problem(record["name"], "cgroup") is None
    assert _containment.launch_problem(record["name"], "none") is None
    proc = _start_in(record["cgroup"], [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_members(record["cgroup"], 1)
        assert "still running" in _containment.launch_problem(record["name"], "cgroup")
        with pytest.raises(SglangError) as err:
            _containment.prepare(record["name"], "cgroup")
        assert err.value.details["reason"] == "cgroup_busy" and proc.poll() is None
    finally:
        _reap(proc)
    assert _containment.prepare(record["name"], "none", "why") == {"containment": "none", "containment_why": "why",
                                                                   "cgroup": None}


def test_probe_view_lists_members_and_flags_outsiders_without_raising(record) -> None:
    inside = _start_in(record["cgroup"], [sys.executable, "-c", "import time; time.sleep(60)"])
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_members(record["cgroup"], 1)
        view = _containment.probe_view(record, [inside.pid, outside.pid])
        assert view["containment"] == "cgroup" and view["cgroup"] == record["cgroup"]
        assert view["members"] == [inside.pid] and view["outside_members"] == [outside.pid]
        os.chown(record["cgroup"], 65534, 65534)
        foreign = _containment.probe_view(record, [inside.pid])
        assert foreign["members"] == [] and "owned by uid 65534" in foreign["notes"][0]
        old = _containment.probe_view({"name": record["name"], "pid": inside.pid}, [inside.pid])
        assert old["containment"] == "none" and old["outside_members"] == []
    finally:
        os.chown(record["cgroup"], 0, 0)
        _reap(inside)
        _reap(outside)
