"""The teardown of one named instance on process trees this test starts (root, cgroup v2): one
count of what it stops in its result, diff and check mode (cgroup members included); another
instance on a managed port refused before any signal unless taken over by name; a damaged
launch record kept aside while the instance is still found by its cgroup and marker."""
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
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call

MOUNT = _cgroup.v2_mount()
needs_cgroup = pytest.mark.skipif(os.geteuid() != 0 or MOUNT is None or not _cgroup.writable(MOUNT)[0],
                                  reason="needs root and a writable cgroup v2 hierarchy")

# Exits on SIGTERM; forks argv[1] children; each says "ready" in argv[2]; argv[3] is a port to
# listen on ("0": none).
TREE = r"""
import os, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda s, f: os._exit(0))
port = int(sys.argv[3])
if port:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(5)
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        break
with open(sys.argv[2], "a") as fh:
    fh.write("ready\n")
while True:
    time.sleep(1)
"""

TEARDOWN = dict(ports=[], gpus=[], patterns=[], sglang_processes=False, all_users=False, protect=[],
                foreign_gpu_processes="fail", grace_period=5.0, timeout=10.0, shm_cleanup=False,
                shm_dir="/dev/shm", purge_paths=[], takeover=[])


def _name() -> str:
    return "td-%s" % uuid.uuid4().hex[:10]


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Instances:
    """Process trees started as launched instances (marker in their environment), stopped after."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.procs: List["subprocess.Popen[bytes]"] = []
        self.cgroups: List[str] = []

    def start(self, name: str, state_dir: str, children: int = 2, port: int = 0,
              contained: bool = True, record: bool = True, marker: bool = True) -> Dict[str, Any]:
        fields: Dict[str, Any] = {"containment": "none"}
        if contained:
            fields = _containment.prepare(name, "cgroup", "test")
            self.cgroups.append(fields["cgroup"])
        ready = self.tmp / ("%s.ready" % name)
        env = dict(os.environ, **{_procs.MARKER_INSTANCE: name, _procs.MARKER_STATE_DIR: state_dir,
                                  _procs.MARKER_LAUNCH_ID: uuid.uuid4().hex})
        if not marker:  # a hand-started server: no marker, no record
            for key in (_procs.MARKER_INSTANCE, _procs.MARKER_STATE_DIR):
                env.pop(key)
        path = fields.get("cgroup")
        proc = subprocess.Popen([sys.executable, "-c", TREE, str(children), str(ready), str(port)], env=env,
                                preexec_fn=(lambda: _cgroup.join(path)) if path else None,
                                start_new_session=True, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        deadline = time.monotonic() + 10
        while not (ready.exists() and ready.read_text().count("ready") >= children + 1):
            assert time.monotonic() < deadline, "the test tree never became ready"
            time.sleep(0.02)
        rec = dict(fields, name=name, state_dir=state_dir, pid=proc.pid, launch_id=env.get(_procs.MARKER_LAUNCH_ID),
                   start_time=_procs.read_proc(proc.pid).start_time, host="127.0.0.1", port=port or None,
                   log_path=str(self.tmp / ("%s.log" % name)))
        if record:
            _record.write_record(state_dir, name, rec)
        return rec

    def close(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait(timeout=5)
        for path in self.cgroups:
            if os.path.isdir(path):
                _cgroup.kill(path)
                _cgroup.wait_empty(path, time.monotonic() + 10)
                _cgroup.remove(path)


@pytest.fixture
def instances(tmp_path) -> Iterator[Instances]:
    inst = Instances(tmp_path)
    yield inst
    inst.close()


def _run(name: str, state_dir: str, check_mode: bool, **options: Any) -> Dict[str, Any]:
    req = _teardown_call.prepare(dict(TEARDOWN, **options), name, state_dir, "none")
    return _teardown_call.run(req, check_mode, True, lambda _text: None)


def _diff_processes(result: Dict[str, Any]) -> List[str]:
    return [line for line in result["diff"]["before"].splitlines() if line.startswith("process ")]


@needs_cgroup
def test_one_count_of_what_a_contained_teardown_stops(instances, tmp_path) -> None:
    """targets, stopped, the diff and killed agree: the cgroup's members are what it stops."""
    state_dir, name = str(tmp_path / "state"), _name()
    os.makedirs(state_dir, mode=0o700)
    instances.start(name, state_dir, children=2)
    plan = _run(name, state_dir, check_mode=True)
    assert len(plan["targets"]) == 3 and plan["stopped"] == 3
    assert len(_diff_processes(plan)) == 3
    assert all(t["reasons"] == ["member of the instance's cgroup %s" % plan["containment"]["cgroup"]]
               for t in plan["targets"])
    done = _run(name, state_dir, check_mode=False)
    assert len(done["targets"]) == len(done["killed"]) == done["stopped"] == 3
    assert len(_diff_processes(done)) == 3


# --- a damaged launch record ------------------------------------------------------------------

@needs_cgroup
@pytest.mark.parametrize("damage", [b"", b'{"name": "x", "pid": 12'])
def test_a_damaged_record_is_kept_aside_and_the_instance_still_stopped(instances, tmp_path, damage) -> None:
    state_dir, name = str(tmp_path / "state"), _name()
    os.makedirs(state_dir, mode=0o700)
    rec = instances.start(name, state_dir, children=1)
    path = _record.record_path(state_dir, name)
    with open(path, "wb") as fh:  # a full disk or a crash cut the record short
        fh.write(damage)
    plan = _run(name, state_dir, check_mode=True)
    assert plan["record_damaged"]["path"] == path and os.path.exists(path)  # check mode renames nothing
    assert ".damaged-" in plan["record_damaged"]["would_keep_as"]
    assert plan["stopped"] == 2 and plan["containment"]["cgroup"] == rec["cgroup"]
    done = _run(name, state_dir, check_mode=False)
    kept = done["record_damaged"]["kept_as"]
    assert not os.path.exists(path) and os.path.isfile(kept)
    with open(kept, "rb") as fh:
        assert fh.read() == damage  # kept for inspection, as it was
    assert done["stopped"] == 2 and done["containment"]["removed"] is True
    assert not os.path.exists(rec["cgroup"])
    assert any("damaged" in note for note in done["record"]["notes"])
    # the next run finds nothing left, and never reads the kept file as a record
    again = _run(name, state_dir, check_mode=False)
    assert again["stopped"] == 0 and again["record_damaged"] is None and os.path.isfile(kept)


@needs_cgroup
def test_an_empty_cgroup_left_without_a_record_is_removed(instances, tmp_path) -> None:
    state_dir, name = str(tmp_path / "state"), _name()
    os.makedirs(state_dir, mode=0o700)
    fields = _containment.prepare(name, "cgroup", "test")
    instances.cgroups.append(fields["cgroup"])
    done = _run(name, state_dir, check_mode=False)
    assert done["containment"]["removed"] is True and not os.path.exists(fields["cgroup"])


@needs_cgroup
def test_a_cgroup_of_the_same_name_from_another_state_dir_is_never_taken(instances, tmp_path) -> None:
    name = _name()
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    os.makedirs(theirs, mode=0o700)
    os.makedirs(ours, mode=0o700)
    rec = instances.start(name, theirs, children=1)  # their record lives in their state dir
    done = _run(name, ours, check_mode=False)
    assert done["stopped"] == 0 and "containment" not in done
    assert os.path.isdir(rec["cgroup"]) and _procs.is_alive(rec["pid"])


# --- another instance on a managed port ---------------------------------------------------------

def test_another_instance_on_the_port_is_refused_before_anything_is_stopped(instances, tmp_path) -> None:
    state_dir = str(tmp_path / "state")
    os.makedirs(state_dir, mode=0o700)
    a, b, port = _name(), _name(), _free_port()
    rec = instances.start(a, state_dir, children=1, port=port, contained=False)
    for check_mode in (True, False):
        with pytest.raises(SglangError) as caught:
            _run(b, state_dir, check_mode=check_mode, ports=[port])
        exc = caught.value
        assert exc.details["reason"] == "other_instance", exc.msg
        assert "instance %r" % a in exc.msg and "ansible-playbook playbooks/teardown.yml -e sglang_name=%s" % a in exc.msg
        assert "takeover: [%s]" % a in exc.msg and "Nothing was stopped" in exc.msg
        assert rec["pid"] in exc.details["other_instances_on_ports"][0]["pids"]  # (its child shares the socket)
        assert _procs.is_alive(rec["pid"], rec["start_time"])
    # the operator asks for the takeover by name: then it is stopped
    done = _run(b, state_dir, check_mode=False, ports=[port], takeover=[a])
    assert done["stopped"] == 2 and not _procs.is_alive(rec["pid"], rec["start_time"])


def test_a_takeover_must_name_an_instance(tmp_path) -> None:
    with pytest.raises(SglangError) as caught:
        _teardown_call.prepare(dict(TEARDOWN, takeover=["../a"]), "b", str(tmp_path), "none")
    assert caught.value.details["reason"] == "bad_option" and "takeover" in caught.value.msg


def test_a_hand_started_server_on_the_port_is_still_stopped(instances, tmp_path) -> None:
    state_dir = str(tmp_path / "state")
    os.makedirs(state_dir, mode=0o700)
    port = _free_port()
    rec = instances.start(_name(), state_dir, children=1, port=port, contained=False, record=False, marker=False)
    done = _run(_name(), state_dir, check_mode=False, ports=[port])
    assert done["stopped"] == 2 and not _procs.is_alive(rec["pid"], rec["start_time"])
