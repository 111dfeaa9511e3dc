"""Who owns the port: one rule for the launch preflight and sglang_ready, and a wait that names
the port's holders once instead of scanning every process on every poll."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns as lp
from ansible_collections.llmops.sglang.plugins.module_utils._host import _portowner
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness
from helpers.fixtures import free_port, wait_for

READY = "[2025-01-01 10:00:09] The server is fired up and ready to roll!"
UVICORN = "[2025-01-01 10:00:07] INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)"

# A launch whose listener is a member of its session but no descendant of the recorded pid:
# the session leader forks a sleeper (the recorded pid) and a listener; pids go to argv[2].
SESSION = ("import os,socket,sys,time\n"
           "port, out = int(sys.argv[1]), sys.argv[2]\n"
           "leader = os.getpid()\n"
           "def child(body):\n"
           "    pid = os.fork()\n"
           "    if pid == 0:\n"
           "        body()\n"
           "        while os.getppid() == leader: time.sleep(0.2)\n"
           "        os._exit(0)\n"
           "    return pid\n"
           "def listen():\n"
           "    global s\n"
           "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "    s.bind(('127.0.0.1', port)); s.listen()\n"
           "x = child(lambda: None)\n"
           "y = child(listen)\n"
           "open(out + '.tmp', 'w').write('%d %d' % (x, y)); os.rename(out + '.tmp', out)\n"
           "time.sleep(60)\n")


def _session_launch(spawn, tmp_path):
    port, out = free_port(), str(tmp_path / "pids")
    leader = spawn.start([sys.executable, "-c", SESSION, str(port), out])
    assert wait_for(lambda: os.path.exists(out) and _ports.has_listener(port), 10)
    sleeper, listener = (int(p) for p in open(out).read().split())
    record = {"name": "t", "pid": sleeper, "start_time": _procs.start_time_of(sleeper), "pgid": leader.pid,
              "sid": leader.pid, "launch_id": uuid.uuid4().hex, "port": port, "host": "127.0.0.1"}
    return record, port, listener


def _preflight_state(port, record):
    return _preflight.check_port(_preflight.Report(), "127.0.0.1", port, record, True)[0]


def test_a_session_member_holding_the_port_is_the_instance_for_preflight_and_readiness(spawn, tmp_path):
    record, port, listener = _session_launch(spawn, tmp_path)
    owners = _portowner.port_owners(port, _portowner.LaunchIdentity.from_record(record))
    assert [o["pid"] for o in owners.listeners[0]["owners"]] == [listener] and not owners.foreign
    assert owners.listeners[0]["owners"][0]["why"] == "in the launch's process group %d" % record["pgid"]
    assert _preflight_state(port, record) == "instance"


def test_a_reused_pid_is_not_the_instance_for_preflight_or_readiness():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        # the recorded pid is this process, but the record's start time is another process's
        record = {"name": "x", "port": port, "pid": os.getpid(), "start_time": 1.0, "launch_id": "none"}
        owners = _portowner.port_owners(port, _portowner.LaunchIdentity.from_record(record))
        assert not owners.ours and [o["pid"] for o in owners.foreign] == [os.getpid()]
        assert _preflight_state(port, record) == "busy"
    finally:
        sock.close()


def test_the_launchs_supervisor_holding_the_port_is_the_instance_for_both(spawn):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    server = spawn.start(["sleep", "60"])
    try:
        record = {"name": "x", "port": port, "pid": server.pid, "supervisor_pid": os.getpid(),
                  "supervisor_start_time": _procs.start_time_of(os.getpid()), "launch_id": "none"}
        owners = _portowner.port_owners(port, _portowner.LaunchIdentity.from_record(record))
        assert owners.ours and not owners.foreign
        assert owners.listeners[0]["owners"][0]["why"] == "the launch's supervisor"
        assert _preflight_state(port, record) == "instance"
    finally:
        sock.close()


def test_a_copied_launch_marker_of_another_user_proves_nothing(monkeypatch):
    proc = _procs.Proc(pid=4_000_321, ppid=1, pgid=4_000_321, sid=4_000_321, comm="srv", state="S",
                       uid=os.geteuid() + 4242, start_time=1.0, cmdline=["srv"])
    monkeypatch.setattr(_procs, "read_proc", lambda p: proc if p == proc.pid else None)
    monkeypatch.setattr(_procs, "marker_of", lambda p: {_procs.MARKER_INSTANCE: "t", _procs.MARKER_LAUNCH_ID: "L1"})
    ident = _portowner.LaunchIdentity(pid=4_000_999, launch_id="L1")
    assert _portowner.ownership(proc.pid, ident) is None
    proc.uid = os.geteuid()
    assert _portowner.ownership(proc.pid, ident) == "carries %s=L1" % _procs.MARKER_LAUNCH_ID


def test_a_holders_one_string_title_is_masked(spawn):
    # `exec -a` makes argv one string, as setproctitle does: the secret is inside one argument.
    holder = spawn.start(["bash", "-c", "exec -a 'srv --api-key SECRET123 --port 1' sleep 60"])
    title = "srv --api-key SECRET123 --port 1"
    assert wait_for(lambda: title in (getattr(_procs.read_proc(holder.pid), "cmdline", None) or []), 10)
    described = _portowner.describe_owner(holder.pid)
    assert "SECRET123" not in described["cmdline"] and "srv --api-key" in described["cmdline"]


# --- the wait: one scan of the processes while the port keeps its holders ----------------------

class _Scans:
    """Counts the host-wide walks (psutil's connection table reads every process's fds; the fd
    walk that names every holder of a socket), and the full scans that named the port's holders
    (`port_owners` with a listener found); `walks_after_named`: walks since the last of those."""

    def __init__(self, monkeypatch) -> None:
        self.walks = 0
        self.named = 0
        self.walks_after_named = 0
        for owner, name in ((psutil, "net_connections"), (_procs, "all_pids"), (_ports, "_table")):
            monkeypatch.setattr(owner, name, self._walk(getattr(owner, name)))
        monkeypatch.setattr(_portowner, "port_owners", self._scan(_portowner.port_owners))

    def _walk(self, func):
        def counted(*args, **kwargs):
            self.walks += 1
            self.walks_after_named += 1
            return func(*args, **kwargs)
        return counted

    def _scan(self, func):
        def counted(*args, **kwargs):
            out = func(*args, **kwargs)
            if out.listeners:
                self.named += 1
                self.walks_after_named = 0
            return out
        return counted


def _http_server(spawn, tmp_path, delay=0.0):
    """http.server over a directory with server_info and health; with `delay`, a shell that
    execs it later (same pid and start time: the launch before it binds)."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "server_info").write_text(json.dumps({"version": "0.5.6"}))
    (root / "health").write_text("")
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)]
    if delay:
        argv = ["sh", "-c", 'sleep %s; exec "$@"' % delay, "sh"] + argv
    return spawn.start(argv), port


def _record(proc, log, port):
    info = _procs.read_proc(proc.pid)
    return {"name": "t", "pid": proc.pid, "start_time": info.start_time, "pgid": info.pgid, "sid": info.sid,
            "launch_id": uuid.uuid4().hex, "log_path": log, "log_offset": 0, "host": "127.0.0.1",
            "port": port, "launched_at": time.time(), "argv": [], "expect": {}}


def _append(log, line):
    with open(log, "a") as fh:
        fh.write(line + "\n")


def test_a_running_server_is_scanned_once_in_the_whole_wait(spawn, tmp_path, monkeypatch):
    proc, port = _http_server(spawn, tmp_path)
    assert wait_for(lambda: _ports.has_listener(port), 10)
    log = str(tmp_path / "l.log")
    _append(log, UVICORN % port)
    _append(log, READY)
    scans = _Scans(monkeypatch)
    opts = _readiness.Options(timeout=20.0, poll_interval=0.02, settle=0.5)
    out = _readiness.wait_ready(_record(proc, log, port), opts)
    assert out.ready and out.details["already_running"], out.msg
    # one full scan named the holders; every later poll asked psutil about them only
    assert scans.named == 1 and scans.walks_after_named == 0


def test_a_starting_launch_is_scanned_once_when_it_binds_before_its_ready_line(spawn, tmp_path, monkeypatch):
    proc, port = _http_server(spawn, tmp_path, delay=1.0)
    log = str(tmp_path / "l.log")
    _append(log, "[2025-01-01 10:00:01 TP0] Init torch distributed begin.")
    scans = _Scans(monkeypatch)
    opts = _readiness.Options(timeout=30.0, poll_interval=0.02, settle=0.5)
    waiter = _readiness.Readiness(_readiness.instance_from_record(_record(proc, log, port)), opts)
    assert waiter.run(slice_seconds=0.2) is None  # not bound yet: nothing listens, no holder named
    assert scans.named == 0
    assert wait_for(lambda: _ports.has_listener(port), 10)
    _append(log, UVICORN % port)
    assert waiter.run(slice_seconds=0.3) is None  # bound: its holders named now, once
    assert scans.named == 1 and scans.walks_after_named == 0
    _append(log, READY)
    out = waiter.run()
    assert out.ready and not out.details["already_running"], out.msg
    assert scans.named == 1 and scans.walks_after_named == 0


# An HTTP server that answers every GET with 200 on 127.0.0.1:argv[1].
SERVE = ("import http.server, sys\n"
         "class H(http.server.BaseHTTPRequestHandler):\n"
         "    def do_GET(self):\n"
         "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
         "    def log_message(self, *args): pass\n"
         "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
# The launch: a parent that stays alive while its child serves the port (until killed).
LAUNCH = ("import subprocess, sys, time\n"
          "child = subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]])\n"
          "open(sys.argv[3] + '.tmp', 'w').write(str(child.pid))\n"
          "import os; os.rename(sys.argv[3] + '.tmp', sys.argv[3])\n"
          "time.sleep(120)\n")


def test_a_holder_replaced_during_the_settle_window_is_still_judged(spawn, tmp_path):
    # the one scan is reused only while the holders it named keep listening: the launch's
    # listener exits, a foreign server takes the port, and the wait names it: a stale server
    port, out_file = free_port(), str(tmp_path / "child")
    ours = spawn.start([sys.executable, "-c", LAUNCH, str(port), SERVE, out_file])
    assert wait_for(lambda: os.path.exists(out_file) and _ports.has_listener(port), 10)
    child = int(open(out_file).read())
    log = str(tmp_path / "l.log")
    with open(log, "w") as fh:
        fh.write(UVICORN % port + "\n" + READY + "\n")
    opts = _readiness.Options(timeout=20.0, poll_interval=0.02, settle=10.0, health="none")
    waiter = _readiness.Readiness(_readiness.instance_from_record(_record(ours, log, port)), opts)

    def replace() -> None:
        os.kill(child, 9)
        spawn.start([sys.executable, "-c", SERVE, str(port)])
    later = threading.Timer(1.0, replace)
    later.start()
    try:
        out = waiter.run()
    finally:
        later.join()
    assert waiter.owners is not None
    assert out.reason == "stale_server", out.msg
    assert [o["pid"] for o in out.details["stale_owners"]] == [spawn.procs[-1].pid]


def test_listeners_read_addresses_and_holders_from_psutil_and_a_holder_alone_per_poll():
    socks = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"), (socket.AF_INET6, "::")):
        sock = socket.socket(family)
        sock.bind((host, 0))
        sock.listen(1)
        socks.append(sock)
    me, start = os.getpid(), _procs.start_time_of(os.getpid())
    try:
        for sock, (family, host) in zip(socks, (("ipv4", "127.0.0.1"), ("ipv6", "::1"), ("ipv6", "::"))):
            port = sock.getsockname()[1]
            [found] = _ports.listeners([port])
            assert (found.family, found.address, found.pids) == (family, host, [me])
            assert found.inode == os.fstat(sock.fileno()).st_ino
            assert _ports.sockets_of(me, start, port) == {(family, host)}
            assert _ports.sockets_of(me, start + 5.0, port) is None  # another process by that pid
    finally:
        for sock in socks:
            sock.close()


def test_the_last_scan_is_reused_while_its_holders_listen_and_redone_when_one_lets_go(monkeypatch):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    ident = _portowner.LaunchIdentity(pid=os.getpid(), start_time=_procs.start_time_of(os.getpid()))
    try:
        last = _portowner.port_owners(port, ident)
        assert last.ours and last.holders == {(os.getpid(), _procs.start_time_of(os.getpid()))}
        restored = _portowner.PortOwners.from_state(json.loads(json.dumps(last.to_state())))
        scans = _Scans(monkeypatch)
        assert _portowner.current(port, ident, last) is last
        assert _portowner.current(port, ident, restored) is restored  # a sliced wait's next slice
        assert scans.walks == 0
    finally:
        sock.close()
    now = _portowner.current(port, ident, last)
    assert now is not last and now.listeners == [] and scans.walks == 1


@pytest.mark.parametrize("level,quiet", [("WARNING", True), ("warn", True), (" error ", True), ("fatal", True),
                                         ("critical", True), ("info", False), ("debug", False), (None, False)])
def test_one_rule_for_a_log_level_too_quiet_for_the_ready_line(level, quiet):
    assert lp.is_quiet_level(level) is quiet
    argv = [] if level is None else ["--log-level", level]
    assert (lp.quiet_log_levels(argv)[0] is not None) is quiet


V6_ONLY = ("import socket,sys,time\n"
           "s=socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
           "s.bind(('::1', int(sys.argv[1]))); s.listen(); time.sleep(60)\n")


V4_LATER = ("import socket,sys,time\n"
            "sys.stdin.readline()\n"  # binds when told
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(60)\n")


def test_a_scan_without_the_launchs_listener_is_not_reused_when_the_launch_binds_later(spawn):
    # the foreign holder on ::1 keeps listening; the launch binds 127.0.0.1 afterwards (no
    # collision): only the launch's own listener makes a scan reusable
    port = free_port()
    foreign = spawn.start([sys.executable, "-c", V6_ONLY, str(port)])
    ours = subprocess.Popen([sys.executable, "-c", V4_LATER, str(port)], stdin=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: _ports.has_listener(port), 10)
        ident = _portowner.LaunchIdentity(pid=ours.pid, start_time=_procs.start_time_of(ours.pid))
        last = _portowner.port_owners(port, ident)
        assert not last.ours and [o["pid"] for o in last.foreign] == [foreign.pid]
        ours.stdin.write("bind\n")
        ours.stdin.flush()
        assert wait_for(lambda: _ports.sockets_of(ours.pid, None, port), 10)
        now = _portowner.current(port, ident, last)
        assert [e["address"] for e in now.ours] == ["127.0.0.1"]
    finally:
        ours.kill()
        ours.wait()


def test_a_socket_caught_while_its_launch_binds_is_scanned_again(monkeypatch):
    """psutil reads the fds before the socket table: a socket bound in between has no owner in
    that scan. Once counted as foreign, it made the readiness wait call the launch it waits for
    a stale server (CI, two launches at once); the scan now runs once more before judging."""
    me = os.getpid()
    ident = _portowner.LaunchIdentity(pid=me, start_time=_procs.start_time_of(me))
    scans = [[_ports.Listener(port=30611, address="127.0.0.1", family="ipv4", inode=0, pids=[])],
             [_ports.Listener(port=30611, address="127.0.0.1", family="ipv4", inode=7, pids=[me])]]
    monkeypatch.setattr(_ports, "listeners", lambda ports: scans.pop(0))
    slept = []
    owners = _portowner.port_owners(30611, ident, sleep=slept.append)
    assert slept == [_portowner.UNNAMED_RESCAN_S]
    assert not owners.clashing("127.0.0.1") and owners.ours, owners


def test_a_socket_whose_owner_stays_unnamed_is_foreign(monkeypatch):
    """Another user's socket (its fds unreadable) stays unnamed: foreign, after the second look."""
    ident = _portowner.LaunchIdentity(pid=os.getpid())
    unnamed = _ports.Listener(port=30611, address="0.0.0.0", family="ipv4", inode=0, pids=[])
    monkeypatch.setattr(_ports, "listeners", lambda ports: [unnamed])
    owners = _portowner.port_owners(30611, ident, sleep=lambda s: None)
    assert [o["cmdline"] for o in owners.clashing("127.0.0.1")] == [_portowner.UNREADABLE_OWNER]
