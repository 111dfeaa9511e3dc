"""Finding 5 of the third review: a listener that trickles its answer (one byte a second) holds
no module past its own timeout.

requests' timeout is per socket read, so a byte a second never trips it: the old sglang_probe,
sglang_drain and sglang_router sat on such a listener for as long as it kept trickling (here 100 s
and more), far past their 2 s request timeouts. Every request of the one HTTP client now ends at
its timeout, counted from its start, whichever phase trickles (the status line and headers, or the
body). Each module run gets a hang guard well above its timeout (`run_module(timeout=...)`
raises when the module is still running): that guard, not a stopwatch, is what fails on the old
code. The drain's listener is a recognised sglang server of root (the drain asks nothing else).
"""
from __future__ import annotations


import pytest

from helpers.fixtures import free_port, run_module
from _listeners import fake_sglang, heads, start

REQUEST_TIMEOUT = 2
HANG_GUARD = 60  # the listener trickles for 100 s and more: the old code is still reading then


@pytest.fixture(params=["trickle-head", "trickle-body"])
def trickler(request, tmp_path):
    log = str(tmp_path / "heads.log")
    port = free_port()
    proc = start(port, request.param, log, as_sglang_from=fake_sglang(str(tmp_path)))
    yield port, log
    proc.kill()
    proc.wait()


def test_the_probe_is_not_held(trickler, tmp_path):
    port, log = trickler
    res = run_module("sglang_probe", {"ports": [port], "http_timeout": REQUEST_TIMEOUT, "gpu_backend": "none",
                                      "search_paths": [], "state_dir": str(tmp_path / "state"),
                                      "shm_dir": str(tmp_path)}, timeout=HANG_GUARD)
    assert res["_rc"] == 0, res
    (entry,) = res["ports"]
    assert entry["listening"] and not entry["reachable"], entry
    assert "timed out after %g s" % REQUEST_TIMEOUT in entry["error"], entry
    assert heads(log), "the listener was never asked"


def test_the_drain_is_not_held(trickler):
    port, log = trickler
    res = run_module("sglang_drain", {"port": port, "timeout": 5, "settle": 0.2, "poll_interval": 0.1,
                                      "request_timeout": REQUEST_TIMEOUT}, timeout=HANG_GUARD)
    assert res.get("failed") and res["reason"] == "server_unresponsive", res
    assert "timed out after %g s" % REQUEST_TIMEOUT in res["msg"], res["msg"]
    assert res.get("drained") is not True
    assert heads(log), "the listener was never asked"


def test_the_router_module_is_not_held(trickler):
    port, log = trickler
    res = run_module("sglang_router", {"router_url": "http://127.0.0.1:%d" % port,
                                       "request_timeout": REQUEST_TIMEOUT}, timeout=HANG_GUARD)
    assert res.get("failed") and res["reason"] == "router_unreachable", res
    assert "did not answer GET /workers within %d s" % REQUEST_TIMEOUT in res["msg"], res["msg"]
    assert heads(log), "the listener was never asked"


def test_a_body_over_the_bound_is_no_answer():
    """The bound on the body: an answer larger than max_bytes is refused, not read into memory."""
    from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
    import http.server
    import threading

    class Big(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 20))
            self.end_headers()
            try:
                self.wfile.write(b"x" * (1 << 20))
            except OSError:
                pass

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Big)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        resp = _http.request("127.0.0.1", srv.server_address[1], "/metrics", max_bytes=64 * 1024)
        whole = _http.request("127.0.0.1", srv.server_address[1], "/metrics")
    finally:
        srv.shutdown()
        srv.server_close()
    assert resp.status is None and resp.body is None and "over 65536 bytes" in resp.error, resp
    assert whole.status == 200 and len(whole.body) == 1 << 20
