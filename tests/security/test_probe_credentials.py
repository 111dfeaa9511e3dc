"""sglang_probe sends its api_key only to a recognised SGLang server of the expected user.

Anything else on an asked-for port (a plain listener, another user's server that merely looks
like SGLang) is reported with its holder and gets no request carrying the key: the listeners
here record every request header they receive.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Iterator, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from helpers.fixtures import free_port, run_module, wait_for

SECRET = "probe-cred-key-51f0a7c3"
FAKE_SERVER = '''"""Looks like `python -m sglang.launch_server`; prints every request's headers."""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        print(json.dumps({"path": self.path, "headers": dict(self.headers)}), flush=True)
        body = json.dumps({"version": "0.0.0-fake", "model_path": "x"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

port = int(sys.argv[sys.argv.index("--port") + 1])
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _python3() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _probe(tmp_path, port: int) -> Dict:
    return run_module("sglang_probe", {"ports": [port], "api_key": SECRET, "http_timeout": 3,
                                       "state_dir": str(tmp_path / "state"), "gpu_backend": "none",
                                       "shm_dir": str(tmp_path / "shm"), "search_paths": []})


@pytest.fixture
def recording_listener() -> Iterator[tuple]:
    seen: List[Dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(dict(self.headers))
            body = b'{"version": "0.0.0-recorder"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_sglang_dir(shared_tmp) -> str:
    """`sglang/launch_server.py` in a directory every user can read (run with `python -m`)."""
    os.mkdir(os.path.join(shared_tmp, "sglang"), 0o755)
    for name, text in (("__init__.py", ""), ("launch_server.py", FAKE_SERVER)):
        path = os.path.join(shared_tmp, "sglang", name)
        with open(path, "w") as fh:
            fh.write(text)
        os.chmod(path, 0o644)
    return shared_tmp


def _requests(log_path: str) -> List[Dict]:
    if not os.path.exists(log_path):
        return []
    return [json.loads(line) for line in open(log_path) if line.startswith("{")]


def test_plain_listener_gets_no_credentials(recording_listener, tmp_path):
    port, seen = recording_listener
    res = _probe(tmp_path, port)
    assert res["_rc"] == 0, res
    assert all("Authorization" not in h and SECRET not in json.dumps(h) for h in seen), seen
    rep = res["ports"][0]
    assert rep["api_key_sent"] is False
    assert [h["pid"] for h in rep["holders"]] == [os.getpid()]
    assert "api_key was not sent" in rep["error"]
    assert any("api_key was not sent" in d for d in res["diagnosis"])
    assert SECRET not in json.dumps(res)


def test_another_users_sglang_lookalike_gets_no_credentials(fake_sglang_dir, tmp_path, throwaway_user):
    port = free_port()
    log = str(tmp_path / "fake-other-user.log")
    with open(log, "wb") as out:
        throwaway_user.start([_python3(), "-m", "sglang.launch_server", "--port", str(port)],
                             cwd=fake_sglang_dir, stdout=out, stderr=out)
    assert wait_for(lambda: bool(_ports.listeners([port])), 15), open(log).read()
    res = _probe(tmp_path, port)
    assert res["_rc"] == 0, res
    assert all("Authorization" not in r["headers"] for r in _requests(log)), _requests(log)
    rep = res["ports"][0]
    assert rep["api_key_sent"] is False and "api_key was not sent" in rep["error"]
    assert "sglang server of user %s, not of root" % throwaway_user.name in rep["error"]


def test_own_users_sglang_server_gets_the_key(fake_sglang_dir, tmp_path, spawn):
    """The positive control: the same listener run by the module's own user is trusted."""
    port = free_port()
    log = str(tmp_path / "fake-own.log")
    spawn.start([_python3(), "-m", "sglang.launch_server", "--port", str(port)], cwd=fake_sglang_dir,
                log_path=log)
    assert wait_for(lambda: bool(_ports.listeners([port])), 15), open(log).read()
    res = _probe(tmp_path, port)
    assert res["_rc"] == 0, res
    rep = res["ports"][0]
    assert rep["api_key_sent"] is True and rep["reachable"] is True, rep
    assert any(r["headers"].get("Authorization") == "Bearer %s" % SECRET for r in _requests(log))
    assert SECRET not in json.dumps(res)


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace needs root")
def test_an_sglang_lookalike_in_another_pid_namespace_gets_no_credentials(fake_sglang_dir, tmp_path, spawn):
    port = free_port()
    log = str(tmp_path / "fake-container.log")
    spawn.start(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", _python3(), "-m",
                 "sglang.launch_server", "--port", str(port)], cwd=fake_sglang_dir, log_path=log)
    assert wait_for(lambda: bool(_ports.listeners([port])), 15), open(log).read()
    res = _probe(tmp_path, port)
    assert res["_rc"] == 0, res
    assert all("Authorization" not in r["headers"] for r in _requests(log)), _requests(log)
    rep = res["ports"][0]
    assert rep["api_key_sent"] is False and "PID namespace" in rep["error"]
