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


def test_a_redirect_is_never_followed(tmp_path):
    named, other = free_port(), free_port()
    named_log, other_log = str(tmp_path / "named.log"), str(tmp_path / "other.log")
    elsewhere = start(other, "router", other_log)
    router = start(named, "redirect", named_log, to="http://127.0.0.1:%d/workers" % other)
    try:
        res = run_module("sglang_router", {"router_url": "http://127.0.0.1:%d" % named, "api_key": KEY,
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
