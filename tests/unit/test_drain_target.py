"""_drain_target: the drain asks only proven holders, re-checks them per reading, proves again
when they change, and hands them from slice to slice."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _drain_target
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports, _procs
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _discovery

PORT = 30000


class World:
    """Who listens on PORT, and what the probe's rule says of them."""

    def __init__(self, monkeypatch: Any) -> None:
        self.holders: Dict[int, float] = {100: 1.5}
        self.refusal: Any = None
        self.scans = 0
        self.asked: List[str] = []
        monkeypatch.setattr(_ports, "listeners", self.listeners)
        monkeypatch.setattr(_ports, "sockets_of", self.sockets_of)
        monkeypatch.setattr(_procs, "start_time_of", self.start_time_of)  # reads self.holders at call time
        monkeypatch.setattr(_procs, "read_proc", lambda pid: None)
        monkeypatch.setattr(_discovery, "find_servers", lambda table, with_ports=True: [])
        monkeypatch.setattr(_discovery, "credential_refusal", lambda servers, socks, user, ids: self.refusal)
        monkeypatch.setattr(_http, "request", self.request)

    def start_time_of(self, pid: int) -> Any:
        return self.holders.get(pid)

    def listeners(self, ports: Any = None) -> List[_ports.Listener]:
        self.scans += 1
        return [_ports.Listener(PORT, "127.0.0.1", "ipv4", 1, sorted(self.holders))] if self.holders else []

    def sockets_of(self, pid: int, start: Any, port: int) -> Any:
        return {("ipv4", "127.0.0.1")} if self.holders.get(pid) == start else None

    def request(self, host: str, port: int, path: str, api_key: Any = None, timeout: float = 5.0,
                connect_to: Any = None) -> _http.Response:
        assert connect_to == "127.0.0.1"  # the proven socket's address, never the name again
        self.asked.append(path)
        return _http.Response(200, [{"num_reqs": 0}])


def test_proves_once_then_rechecks_the_holders_only(monkeypatch):
    world = World(monkeypatch)
    target = _drain_target.Target("127.0.0.1", PORT, "root", "k", 2)
    for _attempt in range(3):
        assert target.fetch("/get_load").status == 200
    assert world.scans == 1 and world.asked == ["/get_load"] * 3
    world.holders = {200: 9.0}  # another process holds the port now: proven again, and refused
    world.refusal = "pid 200 (user mallory: nc -l) is not an sglang server"
    with pytest.raises(SglangError) as err:
        target.fetch("/get_load")
    assert err.value.details["reason"] == "foreign_listener" and "mallory" in err.value.msg
    assert world.scans == 2 and len(world.asked) == 3


def test_nothing_listening_is_no_answer_and_nothing_is_asked(monkeypatch):
    world = World(monkeypatch)
    world.holders = {}
    resp = _drain_target.Target("127.0.0.1", PORT, "root", None, 2).fetch("/get_load")
    assert resp.status is None and "nothing listens" in resp.error and world.asked == []


def test_a_proven_server_that_does_not_answer_is_unresponsive(monkeypatch):
    world = World(monkeypatch)
    monkeypatch.setattr(_http, "request", lambda *a, **k: _http.Response(None, None, "timed out after 2 s", True))
    with pytest.raises(SglangError) as err:
        _drain_target.Target("127.0.0.1", PORT, "root", None, 2).fetch("/get_load")
    assert err.value.details["reason"] == "server_unresponsive" and world.scans == 1


def test_a_socket_that_does_not_cover_the_host_is_refused(monkeypatch):
    World(monkeypatch)
    monkeypatch.setattr(_ports, "listeners", lambda ports=None: [_ports.Listener(PORT, "127.0.0.2", "ipv4", 1, [100])])
    with pytest.raises(SglangError) as err:
        _drain_target.Target("127.0.0.1", PORT, "root", None, 2).fetch("/get_load")
    assert "does not listen on 127.0.0.1" in err.value.msg


def test_the_next_slice_takes_the_proof_over(monkeypatch):
    world = World(monkeypatch)
    first = _drain_target.Target("127.0.0.1", PORT, "root", None, 2)
    first.fetch("/get_load")
    state = first.to_state()
    second = _drain_target.Target("127.0.0.1", PORT, "root", None, 2)
    second.resume(state)
    second.fetch("/get_load")
    assert world.scans == 1
    second.resume([["x", 1, []]])  # a bad state proves nothing
    assert second.proven is None


def test_a_host_of_another_machine_is_refused():
    with pytest.raises(SglangError) as err:
        _drain_target.Target("192.0.2.1", PORT, "root", None, 2)
    assert err.value.details["reason"] == "invalid_argument"
