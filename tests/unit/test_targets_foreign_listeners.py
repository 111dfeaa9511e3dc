"""A listener of another user on a managed port blocks a teardown only when its address
collides with the instance's bind address; one beside it (another address family or address)
is reported in foreign_listeners and the teardown goes on."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import select

from unit.test_targets import P, scope, world

SERVER = ["/venv/bin/python", "-m", "sglang.launch_server", "--port", "9000"]
RECORD = {"name": "a", "pid": 100, "start_time": 1000.0, "host": "0.0.0.0", "port": 9000}


def _world(listeners):
    procs = [P(100, 1, SERVER, comm="python"),
             P(700, 1, ["/usr/bin/python3", "-m", "http.server"], comm="python3", uid=2000)]
    return world(procs, listeners=listeners)


def test_a_foreign_listener_on_another_address_is_reported_not_a_conflict():
    lis = [_ports.Listener(9000, "0.0.0.0", "ipv4", 1, [100]), _ports.Listener(9000, "::1", "ipv6", 2, [700])]
    sel = select(scope(name="a", state_dir="/state", ports=[9000]), _world(lis), RECORD)
    assert not sel.conflicts
    assert 100 in sel.targets and 700 not in sel.targets
    assert [(f["pid"], f["address"]) for f in sel.foreign_listeners] == [(700, "::1")]


def test_an_unreadable_listener_on_another_address_is_reported_not_a_conflict():
    lis = [_ports.Listener(9000, "0.0.0.0", "ipv4", 1, [100]), _ports.Listener(9000, "::1", "ipv6", 2, [])]
    sel = select(scope(name="a", state_dir="/state", ports=[9000]), _world(lis), RECORD)
    assert not sel.conflicts and [f["address"] for f in sel.foreign_listeners] == ["::1"]


def test_a_foreign_listener_that_collides_is_still_a_conflict():
    for lis in ([_ports.Listener(9000, "::", "ipv6", 2, [700])], [_ports.Listener(9000, "0.0.0.0", "ipv4", 2, [])]):
        sel = select(scope(name="a", state_dir="/state", ports=[9000]), _world(lis), RECORD)
        assert sel.conflicts and not sel.foreign_listeners
    # without a record the instance's address is unknown: cautious
    sel = select(scope(ports=[9000]), _world([_ports.Listener(9000, "::1", "ipv6", 2, [700])]))
    assert sel.conflicts
