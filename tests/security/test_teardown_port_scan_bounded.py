"""Another user's millions of open fds stretched a teardown with managed ports.

To name the holders of the managed ports' listening sockets, the teardown asked psutil for the
host's connection table, which reads the fd links of every process on the host, and then read
every fd table again for the sockets' other holders - outside the teardown's timeout. With
500,000 fds held by another user, that plan took 59 s. Now the kernel's TCP tables name the
listening sockets and their owners (no fd read), and only the processes of the socket's own user
(the module's user unless all_users) are read, never past the timeout; the result says how much
was read (port_holders_scan).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from typing import Iterator, List

import pytest

from helpers.fdhog import HOGS, argv, wait_full
from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A socket of ours listening on a managed port (the holder the teardown must name)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _count_links(monkeypatch, pids: List[int]) -> List[int]:
    """os.readlink counting the fd links of `pids` read (in [0]); psutil reads them the same way."""
    dirs = tuple("/proc/%d/fd/" % p for p in pids)
    read = [0]
    real = os.readlink

    def counting(path, *args, **kwargs):
        if isinstance(path, str) and path.startswith(dirs):
            read[0] += 1
        return real(path, *args, **kwargs)
    monkeypatch.setattr(os, "readlink", counting)
    return read


def _plan(tmp_path, port: int, all_users: bool, timeout: float, monkeypatch, hogs: List[int]):
    """Plan a teardown managing `port` (GPUs not managed); return (summary, fd links of the
    hog's processes read, the plan's listeners)."""
    read = _count_links(monkeypatch, hogs)
    scope = build_scope("sec-%s" % uuid.uuid4().hex[:6], str(tmp_path / "state"), [port], None, [], False,
                        all_users, [], "ignore", [])
    scope.gpus = []
    opts = _teardown.Options(grace_period=0, timeout=timeout, shm_cleanup=False, gpu_backend="none")
    _teardown.validate_options(opts, str(tmp_path / "state"))
    plan = _teardown.make_plan(scope, opts)
    try:
        return _teardown.summary(plan), read[0], plan.world.listeners
    finally:
        plan.close()
        monkeypatch.undo()


def test_another_users_fds_are_not_read_for_our_port(fd_hog, listening_port, tmp_path, monkeypatch):
    summary, hog_links, listeners = _plan(tmp_path, listening_port, False, 60, monkeypatch, fd_hog)
    assert hog_links == 0, "the port scan read %d fd links of another user's processes" % hog_links
    assert listeners and os.getpid() in listeners[0].pids, listeners  # our holder is still named
    scan = summary["port_holders_scan"]
    assert scan["left_out"] >= HOGS and scan["cut_short"] is False, scan


def test_with_all_users_the_holders_of_our_socket_are_read_first(fd_hog, listening_port, tmp_path, monkeypatch):
    summary, hog_links, listeners = _plan(tmp_path, listening_port, True, 60, monkeypatch, fd_hog)
    # our socket's holders are root's processes: found there, the other user's tables never read
    assert hog_links == 0 and os.getpid() in listeners[0].pids, (hog_links, listeners)
    assert summary["port_holders_scan"]["users"] is None


@pytest.fixture
def own_hog() -> Iterator[List[int]]:
    """The same hog as the module's own user: its processes are read (they could hold the
    socket), so only the timeout bounds the walk."""
    proc = subprocess.Popen(argv(sys.executable), start_new_session=True)
    try:
        yield wait_full(lambda: _session_pids(proc.pid))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _session_pids(sid: int) -> List[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getsid(int(name)) == sid:
                    out.append(int(name))
            except OSError:
                continue
    return out


def test_the_walk_over_the_users_own_processes_stops_at_the_timeout(own_hog, listening_port, tmp_path, monkeypatch):
    timeout = 0.05
    summary, _links, _listeners = _plan(tmp_path, listening_port, False, timeout, monkeypatch, [])
    scan = summary["port_holders_scan"]
    assert scan["cut_short"] is True and scan["unreached"] >= 1 and "cut short" in scan["note"], scan
    assert scan["seconds"] <= timeout + 2.0, scan


FOREIGN_LISTENER = ("import socket, sys, time\n"
                    "s = socket.socket(socket.AF_INET6)\n"
                    "s.bind(('::1', int(sys.argv[1])))\n"
                    "s.listen(4)\n"
                    "time.sleep(120)\n")


def test_another_users_socket_beside_ours_costs_at_most_the_budget(
        fd_hog, throwaway_user, listening_port, monkeypatch):
    """The review's attack: another user listens on [::1]:PORT beside our 127.0.0.1:PORT (no
    collision: only reported) and holds many fds. Naming the holders for the preflight, the
    probe, the drain and the readiness read all of that user's fds (7.4 s for 190,000). Now one
    holder of their socket is looked for within FOREIGN_BUDGET_S; with no budget, none of their
    fds is read, and ours is still named with every holder."""
    listener = throwaway_user.start(["/usr/bin/python3", "-c", FOREIGN_LISTENER, str(listening_port)])
    assert wait_for(lambda: any(l.address == "::1" for l in _ports.listeners([listening_port])), 20)
    monkeypatch.setattr(_ports, "FOREIGN_BUDGET_S", 0.0, raising=False)
    read = _count_links(monkeypatch, fd_hog + [listener.pid])
    found = {l.address: l for l in _ports.listeners([listening_port])}
    monkeypatch.undo()
    assert read[0] == 0, "%d fd links of the other user's processes read" % read[0]
    assert os.getpid() in found["127.0.0.1"].pids and found["::1"].uid == throwaway_user.uid, found
