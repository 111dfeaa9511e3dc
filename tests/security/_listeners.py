"""Listeners the HTTP security tests point the modules at, each writing down every request head
it gets (the Authorization header included): one that answers an idle load, one that answers as
an empty router, one that trickles its answer a byte a second, one that redirects. Each can run as a plain script or, through a fake
sglang package on PYTHONPATH, as `python -m sglang.launch_server` (what the drain's proof
recognises). Every one is started by the test and killed by it."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Optional

from helpers.fixtures import wait_for

SERVER = r'''
import json, socket, sys, threading, time
argv = sys.argv
port = int(argv[argv.index("--port") + 1])
mode = argv[argv.index("--mode") + 1]
log = argv[argv.index("--log") + 1]
target = argv[argv.index("--to") + 1] if "--to" in argv else ""
lock = threading.Lock()


def head_of(conn):
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n\r\n", 1)[0].decode("latin-1")


def answer(conn):
    head = head_of(conn)
    with lock, open(log, "a") as fh:
        fh.write(json.dumps(head) + "\n")
    if mode == "idle":
        body = json.dumps([{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0}]).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(body), body))
    elif mode == "router":  # an empty router of the workers API
        body = json.dumps({"workers": [], "total": 0}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(body), body))
    elif mode == "redirect":
        conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: %s\r\nContent-Length: 0\r\n"
                     b"Connection: close\r\n\r\n" % target.encode())
    elif mode in ("trickle-head", "trickle-body"):
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        if mode == "trickle-body":
            conn.sendall(head)
            head = b""
        for byte in head + b"[" + b" " * 99999:
            conn.sendall(bytes([byte]))
            time.sleep(1.0)
    conn.close()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(16)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    conn, _addr = srv.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
'''


def fake_sglang(root: str) -> str:
    """A directory holding a package `sglang` whose launch_server is SERVER; returns it (for PYTHONPATH)."""
    pkg = os.path.join(root, "fake-sglang", "sglang")
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, "__init__.py"), "w") as fh:
        fh.write("")
    with open(os.path.join(pkg, "launch_server.py"), "w") as fh:
        fh.write(SERVER)
    for path in (os.path.dirname(pkg), pkg):
        os.chmod(path, 0o755)
    for name in os.listdir(pkg):
        os.chmod(os.path.join(pkg, name), 0o644)
    return os.path.dirname(pkg)


def start(port: int, mode: str, log: str, as_sglang_from: Optional[str] = None, prefix: List[str] = (),
          to: str = "") -> subprocess.Popen:
    """Start a listener on 127.0.0.1:`port` (`prefix`: e.g. a throwaway user's setpriv) and wait
    until it listens. `as_sglang_from`: the fake_sglang() directory, to run as
    `python -m sglang.launch_server`."""
    args = ["--port", str(port), "--mode", mode, "--log", log] + (["--to", to] if to else [])
    env = dict(os.environ)
    if as_sglang_from:
        env["PYTHONPATH"] = as_sglang_from
        argv = list(prefix) + [sys.executable, "-m", "sglang.launch_server"] + args
    else:
        argv = list(prefix) + [sys.executable, "-c", SERVER] + args
    proc = subprocess.Popen(argv, cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    import socket

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    if not wait_for(listening, 20):
        proc.kill()
        raise AssertionError("the test's listener on port %d did not start" % port)
    # that probe connection was logged as an empty head: start the log afresh
    wait_for(lambda: os.path.exists(log), 2)
    open(log, "w").close()
    return proc


def heads(log: str) -> List[str]:
    """The request heads the listener got (empty ones - a bare connect - left out)."""
    import json

    if not os.path.exists(log):
        return []
    with open(log) as fh:
        return [h for h in (json.loads(line) for line in fh if line.strip()) if h]
