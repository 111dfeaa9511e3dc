"""playbooks/restart_multinode.yml's decisions and messages (plugins/filter/multinode_plan.py):
one row per branch, each derived from the Jinja the play had before (the same values and the
same bytes, checked against that Jinja under ansible-core 2.17 and 2.19 when it moved)."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from ansible_collections.llmops.sglang.plugins.filter import multinode_plan as mp

HOSTS = ["h0", "h1", "h2"]


def _rank(host: str = "h0", head: Any = None, **kw: Any) -> Dict[str, Any]:
    return mp.multinode_rank(HOSTS, host, {} if head is None else head, kw.pop("port", 30000), **kw)


# -- rank, rendezvous, args, env, ports ------------------------------------------------------------

@pytest.mark.parametrize("head, addr", [
    ({}, "h0:50000"),                                                        # no address: rank 0's name
    ({"ansible_host": "10.0.0.5"}, "10.0.0.5:50000"),                        # IPv4 ansible_host
    ({"ansible_host": "fd00::1"}, "[fd00::1]:50000"),                        # IPv6: bracketed
    ({"ansible_host": "10.0.0.5", "sglang_multinode_dist_init_host": "node0.ib"}, "node0.ib:50000"),  # wins
    ({"sglang_multinode_dist_init_host": "fe80::2", "sglang_multinode_dist_init_port": "34000"}, "[fe80::2]:34000"),
    ({"sglang_multinode_dist_init_port": "34000.0"}, "h0:34000"),            # Jinja's int: a float string
    # an address given in brackets is bracketed once (the Jinja bracketed it again: [[fd00::1]])
    ({"sglang_multinode_dist_init_host": "[fd00::1]"}, "[fd00::1]:50000"),
])
def test_the_rendezvous_is_rank_0s_address(head, addr):
    for host in HOSTS:  # every rank computes the same one
        assert _rank(host, head)["dist_init_addr"] == addr


def test_a_rendezvous_port_that_is_no_port_is_refused():
    """(it gave `h0:0` before, and the ranks failed at the rendezvous)"""
    with pytest.raises(ValueError, match="port 'nope' is not a number"):
        _rank(HOSTS[0], {"sglang_multinode_dist_init_port": "nope"})


@pytest.mark.parametrize("host, rank", [("h0", 0), ("h1", 1), ("h2", 2)])
def test_the_rank_is_the_inventory_position(host, rank):
    got = _rank(host)
    assert (got["rank"], got["nnodes"], got["head"], got["host"]) == (rank, 3, "h0", host)
    assert got["args"] == {"nnodes": 3, "node-rank": rank, "dist-init-addr": "h0:50000"}


def test_a_host_outside_the_group_has_no_rank():
    with pytest.raises(ValueError):
        _rank("elsewhere")


def test_args_combine_common_then_multinode_then_the_ranks_own():
    got = _rank("h1", args={"a": 1, "nnodes": 9, "b": 2, "node-rank": 7}, multinode_args={"b": 3, "c": 4, "dist-init-addr": "x"})
    assert got["args"] == {"a": 1, "nnodes": 3, "b": 3, "node-rank": 1, "c": 4, "dist-init-addr": "h0:50000"}
    assert list(got["args"]) == ["a", "nnodes", "b", "node-rank", "c", "dist-init-addr"]  # combine's key order


def test_env_combines_common_then_nccl_then_multinode():
    got = _rank(env={"E": "1", "F": "1", "G": "1"}, nccl_env={"F": "2", "G": "2"}, multinode_env={"G": "3"})
    assert got["env"] == {"E": "1", "F": "2", "G": "3"}
    assert _rank()["env"] == {}


@pytest.mark.parametrize("host, extra, ports", [
    ("h0", None, [30000, 34000]),                 # rank 0 also frees the rendezvous port
    ("h1", None, [30000]),
    ("h0", ["9", 10], [30000, 34000, 9, 10]),     # extra ports after, as ints
    ("h2", [8001], [30000, 8001]),
])
def test_teardown_ports(host, extra, ports):
    head = {"sglang_multinode_dist_init_port": 34000}
    assert _rank(host, head, port="30000", extra_ports=extra)["teardown_ports"] == ports


# -- locks -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("locks, hosts, msg", [
    ({"h0": {"reason": "taken"}, "h1": {"reason": "taken_over"}, "h2": {"reason": "held"}}, [], None),
    ({"h0": {"skipped": True}, "h1": {"skipped": True}}, [], None),          # sglang_lock: false
    ({}, [], None),                                                           # no lock task ran yet
    ({"h0": {"reason": "taken"}, "h1": {"reason": "locked", "msg": "pid 5 of ctl2 holds it"}},
     ["h1"], "ex is locked on h1: pid 5 of ctl2 holds it. Nothing was stopped on any rank."),
    ({"h0": {"reason": "not_writable", "msg": "a"}, "h2": {"reason": "locked"}, "h1": {"msg": "no reason"}},
     ["h0", "h1", "h2"], "ex is locked on h0, h1, h2: a | no reason | ?. Nothing was stopped on any rank."),
])
def test_locked_ranks_and_their_message(locks, hosts, msg):
    hostvars = {h: ({"sglang_mn_lock": locks[h]} if h in locks else {}) for h in HOSTS}
    got = mp.multinode_locked(HOSTS, hostvars, "ex")
    assert got["hosts"] == hosts
    if msg:
        assert got["msg"] == msg


# -- the group's decision --------------------------------------------------------------------------

@pytest.mark.parametrize("plans, force, changing", [
    ([{"changed": False}, {"changed": False}, {"changed": False}], False, False),
    ([{"changed": False}, {"changed": True}, {"changed": False}], False, True),   # one rank changes: all
    ([{"changed": False}, {"changed": False}, {"changed": False}], True, True),   # forced
    ([{"changed": False}, None, {}], False, False),                               # a rank without a plan
])
def test_any_changed_rank_or_force_replaces_every_rank(plans, force, changing):
    hostvars = {h: ({} if p is None else {"sglang_launch_result": p}) for h, p in zip(HOSTS, plans)}
    assert mp.multinode_decide(HOSTS, hostvars, force, "ex", "h0:1")["changing"] is changing


def test_the_plan_line_names_each_ranks_reason():
    hostvars = {"h0": {"sglang_launch_result": {"changed": False, "reason": "running"}},
                "h1": {"sglang_launch_result": {"changed": True, "reason": "config_changed"}}, "h2": {}}
    got = mp.multinode_decide(HOSTS, hostvars, False, "ex", "[fd00::1]:34000")
    assert got["reasons"] == {"h0": "running", "h1": "config_changed", "h2": "?"}
    assert got["msg"] == ("ex: replace every rank (3 nodes, dist-init-addr [fd00::1]:34000; per rank: "
                          "{'h0': 'running', 'h1': 'config_changed', 'h2': '?'})")
    hostvars["h1"]["sglang_launch_result"]["changed"] = False
    assert mp.multinode_decide(HOSTS, hostvars, False, "ex", "a:1")["msg"].startswith("ex: unchanged (3 nodes, ")


# -- the waits' conditions -------------------------------------------------------------------------

@pytest.mark.parametrize("results, ok", [
    ([{"changed": True}, {"changed": False}, {"skipped": True}], True),   # launched, running, or skipped
    ([{"changed": True}, {"failed": True}, {}], False),                   # one launch failed
    ([{}, {}, None], False),                                              # one rank never got there
    ([{"failed": False}] * 3, True),
])
def test_every_rank_got_there_and_none_failed(results, ok):
    hostvars = {h: ({} if r is None else {"sglang_launch_result": r}) for h, r in zip(HOSTS, results)}
    assert mp.multinode_all_ok(HOSTS, hostvars, "sglang_launch_result") is ok


def test_no_other_rank_means_rank_0_waits_at_once():
    assert mp.multinode_all_ok([], {}, "sglang_mn_ready_peer") is True


# -- a rank's failure ------------------------------------------------------------------------------

@pytest.mark.parametrize("result, lines", [
    ({"decisive_lines": ["d1", "d2"], "log_tail": ["t"]}, ["d1", "d2"]),   # decisive lines first
    ({"decisive_lines": [], "log_tail": ["t1", "t2"]}, ["t1", "t2"]),      # else the tail (a list)
    ({"decisive_lines": None, "log_tail": "a\nb\n"}, ["a", "b"]),          # ... or one string
    ({"log_tail": None}, []),
    ({"log_tail": ""}, []),
    # a step without a log (a teardown, a refused launch): the Jinja failed to render here and the
    # rank dropped out of the play as "unreachable"; it keeps its own failure now
    ({"msg": "still running"}, []),
])
def test_the_lines_of_a_failed_step(result, lines):
    assert mp.multinode_failure(result, 1, "t")["lines"] == lines


def test_the_failure_keeps_rank_task_msg_reason():
    assert mp.multinode_failure({"msg": "m", "reason": "crashed"}, "2", "Launch the rank") == {
        "rank": 2, "task": "Launch the rank", "msg": "m", "reason": "crashed", "lines": []}
    assert mp.multinode_failure({}, 0, "?") == {"rank": 0, "task": "?", "msg": "?", "reason": "", "lines": []}


# -- the verdict and its message -------------------------------------------------------------------

LINES = ["l%d" % i for i in range(1, 18)]


def _verdict(failures: Dict[str, Any], play: List[str], head_ready: Any = None) -> Dict[str, Any]:
    hostvars: Dict[str, Dict[str, Any]] = {h: {} for h in HOSTS}
    for h, f in failures.items():
        hostvars[h]["sglang_mn_failure"] = f
    if head_ready is not None:
        hostvars["h0"]["sglang_ready_result"] = head_ready
    return mp.multinode_verdict(HOSTS, hostvars, play, "ex", "grp")


def test_a_healthy_group_is_no_failure():
    got = _verdict({}, HOSTS, {"reason": "ready"})
    assert got == {"failed_hosts": [], "rank0_waited": True, "failed": False, "msg": ""}


def test_decisive_lines_are_the_last_15_and_a_gone_rank_is_named():
    fail = {"rank": 1, "task": "Wait for ranks >= 1", "msg": "boom", "reason": "crashed", "lines": LINES}
    got = _verdict({"h1": fail}, ["h1", "h0"], {"skipped": True})
    assert got["failed_hosts"] == ["h1", "h2"] and got["failed"] and not got["rank0_waited"]
    assert got["msg"] == ("multi-node server ex on 'grp' failed; every rank was torn down.\n"
                          "h1 (rank 1): failed at Wait for ranks >= 1: boom\n"
                          + "".join("    | l%d\n" % i for i in range(3, 18))
                          + "h2 (rank 2): unreachable or stopped by an earlier error\n")


def test_a_failure_without_lines_and_inventory_order():
    got = _verdict({"h2": {"task": "Launch the rank", "msg": "refused", "lines": []},
                    "h0": {"task": "Tear down the old rank and prove it is gone", "msg": None, "lines": ["x"]}},
                   HOSTS, {"reason": "ready"})
    assert got["failed_hosts"] == ["h0", "h2"]
    assert got["msg"].splitlines() == ["multi-node server ex on 'grp' failed; every rank was torn down.",
                                       "h0 (rank 0): failed at Tear down the old rank and prove it is gone: None",
                                       "    | x", "h2 (rank 2): failed at Launch the rank: refused"]


@pytest.mark.parametrize("head_ready", [None, {"skipped": True}])
def test_rank_0_never_checked(head_ready):
    got = _verdict({}, HOSTS, head_ready)
    assert got["failed"] and got["failed_hosts"] == [] and not got["rank0_waited"]
    assert got["msg"] == ("multi-node server ex on 'grp' failed; every rank was torn down.\n"
                          "rank 0 was never checked: a rank >= 1 did not come up.")


# -- the rank's summary ----------------------------------------------------------------------------

MN = {"rank": 0, "nnodes": 2, "host": "h0", "dist_init_addr": "h0:34000"}


@pytest.mark.parametrize("mn, own, line", [
    (MN, {"sglang_launch_result": {"changed": True, "pid": 41}, "sglang_ready_result": {"reason": "ready"},
          "sglang_mn_ready_peer": {"reason": "not me"}},
     "ex rank 0/2 on h0: launched pid 41, ready (ready), dist-init-addr h0:34000"),
    (dict(MN, rank=1, host="h1"), {"sglang_launch_result": {"changed": False}, "sglang_mn_plan": {"record": {"pid": 7}},
                                   "sglang_ready_result": {"skipped": True}, "sglang_mn_ready_peer": {"reason": "peer_ready"}},
     "ex rank 1/2 on h1: running pid 7, ready (peer_ready), dist-init-addr h0:34000"),
    (MN, {"sglang_launch_result": {"skipped": True}, "sglang_mn_plan": {"record": None}, "sglang_ready_result": {}},
     "ex rank 0/2 on h0: running pid ?, ready (?), dist-init-addr h0:34000"),
])
def test_the_summary_line(mn, own, line):
    assert mp.multinode_summary(mn, "ex", own) == line


def test_every_filter_is_registered():
    assert set(mp.FilterModule().filters()) == {
        "multinode_rank", "multinode_locked", "multinode_decide", "multinode_all_ok", "multinode_failure",
        "multinode_verdict", "multinode_summary"}
