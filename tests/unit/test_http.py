"""_http: requests underneath, the same Response contract (never raises for network trouble)."""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List

import pytest
import requests

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http


class _Handler(BaseHTTPRequestHandler):
    seen: List[Dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                          "body": body.decode()})
        if self.path == "/denied":
            status, payload = 401, b'{"error": "unauthorized"}'
        elif self.path == "/text":
            status, payload = 200, b"plain text"
        elif self.path == "/moved":
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.end_headers()
            return
        else:
            status, payload = 200, json.dumps({"path": self.path}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    _Handler.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _port(srv: ThreadingHTTPServer) -> int:
    return srv.server_address[1]


def test_request_goes_through_a_requests_session_without_environment_proxies(server, monkeypatch):
    made: List[requests.Session] = []
    real = requests.Session.request

    def spy(self, *args, **kwargs):
        made.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(requests.Session, "request", spy)
    # A proxy from the environment would swallow loopback traffic: it must not be used.
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    resp = _http.request("127.0.0.1", _port(server), "/server_info", timeout=5)
    assert resp.status == 200 and resp.body == {"path": "/server_info"} and resp.error is None
    assert made and all(s.trust_env is False for s in made)


def test_api_key_header_only_when_given_and_json_payload(server):
    _http.request("127.0.0.1", _port(server), "/a")
    _http.request("127.0.0.1", _port(server), "/b", api_key="k-123", method="POST", payload={"x": 1})
    first, second = _Handler.seen
    assert "Authorization" not in first["headers"]
    assert second["headers"]["Authorization"] == "Bearer k-123"
    assert second["method"] == "POST" and json.loads(second["body"]) == {"x": 1}


def test_http_errors_and_text_bodies_are_answers(server):
    denied = _http.request("127.0.0.1", _port(server), "/denied")
    assert denied.status == 401 and denied.error == "HTTP 401" and denied.body == {"error": "unauthorized"}
    text = _http.request("127.0.0.1", _port(server), "/text")
    assert text.status == 200 and text.body == "plain text"
    info, error, endpoint = _http.server_info("127.0.0.1", _port(server), timeout=5)
    assert info == {"path": "/server_info"} and error is None and endpoint == "/server_info"


def test_redirects_are_not_followed(server):
    """An api key sent to loopback never travels on to wherever a redirect points."""
    resp = _http.request("127.0.0.1", _port(server), "/moved", api_key="k-123")
    assert resp.status == 307
    assert [s["path"] for s in _Handler.seen] == ["/moved"]


def test_network_trouble_never_raises_and_says_what_happened():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        refused = _http.request("127.0.0.1", port, "/health", timeout=2)  # bound, not listening
    assert refused.status is None and refused.body is None
    assert refused.error.startswith("http://127.0.0.1:%d/health: " % port)
    assert "Connection refused" in refused.error and "HTTPConnectionPool" not in refused.error
    with socket.socket() as sock:  # listens, never accepts an answer in time
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        slow = _http.request("127.0.0.1", sock.getsockname()[1], "/health", timeout=0.3)
    assert slow.status is None and "timed out" in slow.error
    bad = _http.request("no such host name.invalid", 80, "/", timeout=1)
    assert bad.status is None and bad.error


def test_url_host_forms():
    assert _http.url_host("0.0.0.0") == "127.0.0.1"
    assert _http.url_host("::") == "[::1]"
    assert _http.url_host("::1") == "[::1]"
    assert _http.url_host("127.0.0.2") == "127.0.0.2"
