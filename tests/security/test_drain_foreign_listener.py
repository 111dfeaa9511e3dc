"""Finding 6 of the third review (the drain half): sglang_drain asks only a listener proven to be
the instance's server.

Another user binds the instance's port (the server is down, or between a teardown and a launch)
with a listener that answers "idle" to every load request. The old drain sent it the api key and
believed it (`drained: true`). Now the port's holders must be a recognised sglang server of the
module's user (the probe's rule): this listener gets no request at all, key or no key, and the
drain fails with reason foreign_listener. So does root's own listener that is no sglang server.
A listener that is a recognised sglang server of this user is still drained (the rule's other
side).
"""
from __future__ import annotations

import os

import pytest

from helpers.fixtures import free_port, run_module
from _listeners import fake_sglang, heads, start

KEY = "sk-drain-secret-6f1d"


def _drain(port: int) -> dict:
    return run_module("sglang_drain", {"port": port, "api_key": KEY, "timeout": 5, "settle": 0.2,
                                       "poll_interval": 0.1, "request_timeout": 2}, timeout=120)


@pytest.mark.parametrize("who", ["other_user", "root_not_sglang"])
def test_a_foreign_listener_gets_no_request_and_no_key(who, shared_tmp, throwaway_user):
    log = os.path.join(shared_tmp, "heads.log")
    open(log, "w").close()
    os.chmod(log, 0o666)
    port = free_port()
    if who == "other_user":
        prefix = throwaway_user.argv([])
        # its own fake sglang: a title or command line is free for any user to take
        listener = start(port, "idle", log, as_sglang_from=fake_sglang(shared_tmp), prefix=prefix)
    else:
        listener = start(port, "idle", log)
    try:
        res = _drain(port)
    finally:
        listener.kill()
        listener.wait()
    got = heads(log)
    assert not any(KEY in h for h in got), got
    assert got == [], got
    assert res.get("failed") and res["reason"] == "foreign_listener", res
    assert res.get("drained") is not True
    assert KEY not in str(res)


def test_the_instances_own_server_is_still_drained(shared_tmp):
    log = os.path.join(shared_tmp, "heads.log")
    port = free_port()
    listener = start(port, "idle", log, as_sglang_from=fake_sglang(shared_tmp))
    try:
        res = _drain(port)
    finally:
        listener.kill()
        listener.wait()
    assert not res.get("failed") and res["drained"] is True and res["reason"] == "drained", res
    assert any("Authorization: Bearer %s" % KEY in h for h in heads(log))
