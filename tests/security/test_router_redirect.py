"""Finding 6 of the third review (the router half): sglang_router sends its api key only to the
router URL the operator named, and follows no redirect.

The named "router" answers every request with a redirect to another listener on this host, which
answers as an empty router. The old module followed it (requests follows redirects by default)
and believed what the other listener said. Now a 3xx is the router refusing (reason
router_refused): the other listener gets no request at all, and the key went nowhere but the
named URL.
"""
from __future__ import annotations

from helpers.fixtures import free_port, run_module
from _listeners import heads, start

KEY = "sk-router-secret-91ab"
SERVER_KEY = "sk-server-secret-77cd"


def test_a_redirect_is_never_followed(tmp_path):
    named, other = free_port(), free_port()
    named_log, other_log = str(tmp_path / "named.log"), str(tmp_path / "other.log")
    elsewhere = start(other, "router", other_log)
    router = start(named, "redirect", named_log, to="http://127.0.0.1:%d/workers" % other)
    try:
        res = run_module("sglang_router", {"router_url": "http://127.0.0.1:%d" % named, "router_api_key": KEY,
                                           "request_timeout": 5}, timeout=60)
    finally:
        for proc in (router, elsewhere):
            proc.kill()
            proc.wait()
    assert heads(other_log) == [], heads(other_log)
    assert res.get("failed") and res["reason"] == "router_refused" and "redirect" in res["msg"], res
    asked = heads(named_log)
    assert asked and all("Authorization: Bearer %s" % KEY in h for h in asked)
    assert KEY not in str(res)


def test_the_servers_api_key_never_reaches_the_router(tmp_path):
    """module_defaults on the llmops.sglang.sglang group give every module of the group the
    servers' `api_key`, sglang_router included. The old module sent its `api_key` to the router:
    set once for the group, the servers' key went to the router. Now the router's key is
    `router_api_key` and `api_key` goes nowhere."""
    port = free_port()
    log = str(tmp_path / "router.log")
    router = start(port, "router", log)
    try:
        res = run_module("sglang_router", {"router_url": "http://127.0.0.1:%d" % port, "api_key": SERVER_KEY,
                                           "state_dir": str(tmp_path / "state"), "gpu_backend": "none",
                                           "request_timeout": 5}, timeout=60)
    finally:
        router.kill()
        router.wait()
    assert not res.get("failed") and res["workers"] == [], res
    asked = heads(log)
    assert asked and not any("Authorization" in h for h in asked), asked
    assert SERVER_KEY not in str(res)
