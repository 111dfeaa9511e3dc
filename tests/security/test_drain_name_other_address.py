"""The drain proved the holder on one address of a host NAME, then connected to the name.

With `host: localhost` where localhost is both ::1 and 127.0.0.1 (Debian/Ubuntu's /etc/hosts),
the server listens on 127.0.0.1:P and the proof passes (its socket collides with "localhost").
Another user then binds [::1]:P - the kernel allows it, it collides with nothing - and the next
reading, "still proven" by the proven holders alone, let requests resolve the name again,
tried ::1 first and sent `Authorization: Bearer <key>` to that user.

Now the request connects to the numeric address the proven socket covers (127.0.0.1 here;
`_ports.connect_address`), with the name in the Host header. The same for sglang_ready, whose
owner check re-reads only the launch's holders once it has proved them.

This machine's /etc/hosts may map localhost to 127.0.0.1 only, so the resolver of this (root)
process answers as Debian's does; everything else is real: the fake sglang server runs as root,
the other listener as a throwaway user.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

from helpers.fixtures import free_port
from _listeners import fake_sglang, heads, start
from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _drain_target

KEY = "sk-drain-name-secret-41c7"
# The other user's listener on [::1]:PORT: logs what it gets, answers "idle".
ATTACKER = r"""
import json, socket, sys
port, log = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET6)
s.bind(("::1", port))
s.listen()
print("bound", flush=True)
while True:
    c, _ = s.accept()
    data = c.recv(65536).decode("latin-1")
    with open(log, "a") as fh:
        fh.write(json.dumps(data) + "\n")
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]")
    c.close()
"""


def test_the_drain_sends_the_key_only_to_the_proven_address(monkeypatch, shared_tmp, throwaway_user):
    real = socket.getaddrinfo

    def debian(host, *args, **kw):
        if host == "localhost":
            return real("::1", *args, **kw) + real("127.0.0.1", *args, **kw)
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", debian)
    port = free_port()
    server_log = os.path.join(shared_tmp, "server.log")
    other_log = os.path.join(shared_tmp, "other.log")
    for log in (server_log, other_log):
        open(log, "w").close()
        os.chmod(log, 0o666)
    server = start(port, "idle", server_log, as_sglang_from=fake_sglang(shared_tmp))
    try:
        target = _drain_target.Target("localhost", port, "root", KEY, 2.0)
        first = target.fetch("/get_load")
        assert first.status == 200 and target.proofs == 1
        other = throwaway_user.start([sys.executable, "-c", ATTACKER, str(port), other_log],
                                     stdout=subprocess.PIPE, text=True)
        assert other.stdout.readline().strip() == "bound"
        second = target.fetch("/get_load")
        got = open(other_log, encoding="utf-8").read()
        assert KEY not in got, "the other user's [::1] listener received the api key"
        assert got == ""
        assert second.status == 200
        served = heads(server_log)
        assert len(served) == 2 and all("Authorization: Bearer %s" % KEY in h for h in served)
        assert all("Host: localhost:%d" % port in h for h in served)  # the name is kept in the Host header
    finally:
        server.kill()
        server.wait()


def test_sglang_ready_sends_the_key_only_to_the_launchs_own_socket(monkeypatch, shared_tmp, throwaway_user):
    """The same for sglang_ready: its owner check proves this launch's socket on 127.0.0.1 and
    sees the other user's [::1] socket as not colliding; its requests connect to 127.0.0.1."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
    from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness

    real = socket.getaddrinfo

    def debian(host, *args, **kw):
        if host == "localhost":
            return real("::1", *args, **kw) + real("127.0.0.1", *args, **kw)
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", debian)
    port = free_port()
    server_log, other_log, log = (os.path.join(shared_tmp, n) for n in ("server.log", "other.log", "sglang.log"))
    for path in (server_log, other_log):
        open(path, "w").close()
        os.chmod(path, 0o666)
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("[2025-01-01 10:00:07] INFO:     Uvicorn running on http://localhost:%d\n"
                 "[2025-01-01 10:00:09] The server is fired up and ready to roll!\n" % port)
    server = start(port, "idle", server_log)
    bound = []

    def bind_once_proven() -> None:
        # after the wait proved this launch's socket and asked it once (the owners are then
        # re-checked by their holders only): the other user takes [::1]:PORT
        while not heads(server_log):
            time.sleep(0.02)
        other = throwaway_user.start([sys.executable, "-c", ATTACKER, str(port), other_log],
                                     stdout=subprocess.PIPE, text=True)
        bound.append(other.stdout.readline().strip())

    binder = threading.Thread(target=bind_once_proven, daemon=True)
    binder.start()
    try:
        info = _procs.read_proc(server.pid)
        record = {"name": "t", "pid": server.pid, "start_time": info.start_time, "pgid": info.pgid,
                  "sid": info.sid, "launch_id": "0" * 32, "log_path": log, "log_offset": 0, "host": "localhost",
                  "port": port, "launched_at": 0.0, "argv": [], "expect": {}}
        _readiness.wait_ready(record, _readiness.Options(timeout=4.0, poll_interval=0.1, settle=0.2, api_key=KEY))
        binder.join(10)
        assert bound == ["bound"]
        got = open(other_log, encoding="utf-8").read()
        assert KEY not in got, "the other user's [::1] listener received the api key"
        assert len(heads(server_log)) >= 2  # asked again after the other socket came
        assert all("Authorization: Bearer %s" % KEY in h for h in heads(server_log))
    finally:
        server.kill()
        server.wait()
