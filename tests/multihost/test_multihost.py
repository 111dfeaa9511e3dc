"""The collection's playbooks over real SSH against several hosts (tests/multihost/harness.sh).

Each host is a network + PID + mount namespace with its own sshd, address, /proc and /dev/shm;
the emulator plays sglang. The tests run in file order and build on each other (one set of
hosts, servers left running for the next test), like an operator's session:

  ssh -> probe -> restart (servers outlive ssh, idempotent) -> teardown of one host only ->
  rolling restart stopped by a broken host -> multi-node server (ranks, rendezvous, idempotent)
  -> multi-node preflight failure stops nothing -> multi-node rank failure tears down every rank
  -> final teardown.
"""
from __future__ import annotations

import os
import time

import pytest

NAME = "mh"        # independent server on every host (sglang_name in inventory_vars.yml)
MN_NAME = "mhmn"   # the multi-node server over group sglang_multinode
DUMMY = "Dummy health check server started in background thread at"

_state = {}


def _run(mh, playbook, *extra, overlays=(), expect_rc=0):
    run = mh.playbook(playbook, "-e", "llmops_mh_test_run=%s" % os.environ.get("LLMOPS_SGLANG_TEST_RUN", "llmops-mh"),
                      *extra, overlays=overlays)
    if expect_rc == 0:
        assert run.rc == 0, run.explain()
    else:
        assert run.rc != 0, "expected the play to fail:\n" + run.explain()
    return run


def _wait(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def _serving(mh, host, name=NAME, port=None):
    """The recorded server of `name` on host: alive in the host's PID namespace and /health 200."""
    record = mh.record(host, name)
    assert record is not None, "no launch record of %s on %s" % (name, host)
    assert mh.alive(host, record), "%s: pid %s of %s is not alive" % (host, record["pid"], name)
    port = port or mh.port(host)
    assert mh.health(host, port) == 200, "%s: /health on %s:%d is not 200" % (host, mh.addr(host), port)
    return record


def _gone(mh, host, record, port):
    return not mh.alive(host, record) and mh.health(host, port) is None


# -- the hosts -------------------------------------------------------------------------------------

def test_hosts_are_separate_and_reached_over_ssh(mh):
    results = mh.adhoc_shell("all",
                             "echo $(ip -4 -o addr show dev eth0 | awk '{print $4}') $(ls /proc | grep -c '^[0-9]') "
                             "$(stat -c %d /dev/shm) ${SSH_CONNECTION%% *}")
    assert sorted(results) == mh.names
    shm_ids = set()
    for host, res in results.items():
        assert res.get("rc") == 0, res
        addr, nprocs, shm_id, ssh_from = res["stdout"].split()
        assert addr == "%s/24" % mh.addr(host)
        assert int(nprocs) < 20, "%s sees %s processes: not its own PID namespace" % (host, nprocs)
        assert ssh_from == "%s.1" % mh.net, "%s: not reached over ssh from the bridge" % host
        shm_ids.add(shm_id)
    assert len(shm_ids) == mh.n, "the hosts share /dev/shm"
    for host in mh.names:  # key authentication through each host's own sshd
        with open(mh.sshd_log(host)) as fh:
            assert "Accepted publickey for root" in fh.read()


def test_probe_playbook(mh):
    if not os.path.exists(os.path.join(os.path.dirname(__file__), "..", "..", "playbooks", "probe.yml")):
        pytest.skip("playbooks/probe.yml does not exist yet")
    _run(mh, "probe.yml")


# -- independent servers ---------------------------------------------------------------------------

def test_restart_over_ssh_server_outlives_the_session(mh):
    run = _run(mh, "restart_extraction.yml", "-e", "sglang_serial=%d" % mh.n)
    records = {}
    for host in mh.names:
        records[host] = _serving(mh, host)
        assert records[host]["host"] == mh.addr(host)
        assert records[host]["state_dir"] == mh.state_dir(host)
    # The ssh sessions of the play (ControlPersist keeps one per host) end; the servers stay.
    for host in mh.names:
        mh.end_ssh_sessions(host)
    assert _wait(lambda: all(not mh.ssh_sessions(h) for h in mh.names), 10)
    time.sleep(1.0)
    for host in mh.names:
        record = _serving(mh, host)
        assert record["launch_id"] == records[host]["launch_id"]
    _state["records"] = records
    assert all(stats["failed"] == 0 for stats in run.recap().values()), run.explain()


def test_restart_again_changes_nothing(mh):
    run = _run(mh, "restart_extraction.yml", "-e", "sglang_serial=%d" % mh.n)
    recap = run.recap()
    assert sorted(recap) == mh.names, run.explain()
    assert all(stats["changed"] == 0 for stats in recap.values()), run.explain()
    for host in mh.names:
        assert _serving(mh, host)["launch_id"] == _state["records"][host]["launch_id"]


def test_teardown_of_one_host_leaves_the_others(mh):
    first, others = mh.names[0], mh.names[1:]
    _run(mh, "teardown.yml", "-e", "sglang_hosts=%s" % first)
    assert _wait(lambda: _gone(mh, first, _state["records"][first], mh.port(first)))
    for host in others:
        assert _serving(mh, host)["launch_id"] == _state["records"][host]["launch_id"]


def test_rolling_restart_stops_at_the_broken_host(mh):
    """serial 1 over mh1..mhN with a broken venv on mh2: mh1 is restarted, mh2 fails its
    preflight (its old server keeps serving), mh3.. are never touched."""
    if mh.n < 3:
        pytest.skip("needs 3 hosts")
    first, broken, rest = mh.names[0], mh.names[1], mh.names[2:]
    run = _run(mh, "restart_extraction.yml", "-e", "sglang_serial=1", "-e", "llmops_mh_generation=2",
               overlays=[{broken: {"sglang_venv": "/nonexistent/llmops-mh-venv"}}], expect_rc=2)
    assert "/nonexistent/llmops-mh-venv" in run.out, run.explain()
    recap = run.recap()
    new = _serving(mh, first)
    assert new["env"]["LLMOPS_MH_GENERATION"] == "2"
    assert recap[broken]["failed"] >= 1, run.explain()
    old = _serving(mh, broken)
    assert old["launch_id"] == _state["records"][broken]["launch_id"], "the broken host's server was replaced"
    for host in rest:
        assert host not in recap or recap[host]["ok"] == 0, "%s was touched:\n%s" % (host, run.explain())
        record = _serving(mh, host)
        assert record["launch_id"] == _state["records"][host]["launch_id"]
        assert record["env"]["LLMOPS_MH_GENERATION"] == "1"


# -- one server over the group ---------------------------------------------------------------------

def _mn_state(mh):
    return {h: mh.record(h, MN_NAME) for h in mh.names}


def test_multinode_forms_one_server(mh):
    independent = {h: mh.record(h, NAME) for h in mh.names}
    run = _run(mh, "restart_multinode.yml")
    head = mh.names[0]
    dist = "%s:34000" % mh.addr(head)
    records = _mn_state(mh)
    for rank, host in enumerate(mh.names):
        rec = records[host]
        assert rec is not None and mh.alive(host, rec), run.explain()
        assert int(rec["nnodes"]) == mh.n and int(rec["node_rank"]) == rank
        argv = " ".join(rec["argv"])
        assert "--nnodes %d" % mh.n in argv and "--node-rank %d" % rank in argv
        assert "--dist-init-addr %s" % dist in argv
        with open(rec["log_path"]) as fh:
            log = fh.read()
        if rank == 0:
            assert "The server is fired up and ready to roll!" in log
        else:
            assert DUMMY in log and "fired up" not in log
    assert mh.health(head, mh.mn_port(head)) == 200
    info = mh.server_info(head, mh.mn_port(head))
    assert int(info["nnodes"]) == mh.n and info["dist_init_addr"] == dist
    # the independent servers on the same hosts were not touched
    for host, rec in independent.items():
        if rec and mh.alive(host, rec):
            assert mh.record(host, NAME)["launch_id"] == rec["launch_id"]
    _state["mn"] = records


def test_multinode_again_changes_nothing(mh):
    run = _run(mh, "restart_multinode.yml")
    assert all(s["changed"] == 0 for s in run.recap().values()), run.explain()
    for host, rec in _mn_state(mh).items():
        assert rec["launch_id"] == _state["mn"][host]["launch_id"]


def test_multinode_check_mode_only_plans(mh):
    run = _run(mh, "restart_multinode.yml", "--check", "-e", "llmops_mh_generation=3")
    assert "replace every rank" in run.out, run.explain()
    for host, rec in _mn_state(mh).items():
        assert rec["launch_id"] == _state["mn"][host]["launch_id"] and mh.alive(host, rec)


def test_multinode_refuses_a_partial_group(mh):
    run = _run(mh, "restart_multinode.yml", "--limit", mh.names[0], expect_rc=2)
    assert "must run on every host of group" in run.out, run.explain()
    for host, rec in _mn_state(mh).items():
        assert rec["launch_id"] == _state["mn"][host]["launch_id"] and mh.alive(host, rec)


def test_multinode_preflight_failure_stops_nothing(mh):
    broken = mh.names[1]
    run = _run(mh, "restart_multinode.yml", overlays=[{broken: {"sglang_venv": "/nonexistent/llmops-mh-venv"}}],
               expect_rc=2)
    assert "Nothing was stopped on any rank" in run.out, run.explain()
    for host, rec in _mn_state(mh).items():
        assert rec["launch_id"] == _state["mn"][host]["launch_id"] and mh.alive(host, rec), run.explain()
    assert mh.health(mh.names[0], mh.mn_port(mh.names[0])) == 200


def test_multinode_rank_failure_tears_down_every_rank(mh):
    """The last rank dies while loading (emulator fault oom): the play fails with its lines
    and no rank of the group is left running; the independent servers are untouched."""
    bad = mh.names[-1]
    independent = {h: mh.record(h, NAME) for h in mh.names}
    alive_before = {h: bool(rec) and mh.alive(h, rec) for h, rec in independent.items()}
    run = _run(mh, "restart_multinode.yml",
               overlays=[{bad: {"sglang_multinode_env": {"SGLANG_EMULATOR_FAULT": "oom"}}}], expect_rc=2)
    assert "every rank was torn down" in run.out, run.explain()
    assert "%s (rank %d)" % (bad, mh.n - 1) in run.out, run.explain()
    assert "Not enough memory" in run.out, run.explain()
    for host in mh.names:
        # the relaunched ranks are gone (the teardown also removed their records), and so are
        # the ranks that ran before this play
        assert _wait(lambda: not mh.instance_pids(host, MN_NAME)), "%s: a rank is still up\n%s" % (host, run.explain())
        assert mh.health(host, mh.mn_port(host)) is None
        assert not mh.alive(host, _state["mn"][host])
    assert "Launch the new server, once the old one is stopped" in run.out and "Tear down every rank of the failed group" in run.out
    for host, rec in independent.items():
        if alive_before[host]:
            assert mh.alive(host, rec), "%s: independent server %s was hit" % (host, NAME)


def test_final_teardown_leaves_nothing(mh):
    for name, port_var in ((NAME, "llmops_mh_port"), (MN_NAME, "llmops_mh_mn_port")):
        _run(mh, "teardown.yml", "-e", "sglang_name=%s" % name, "-e", "{\"sglang_port\": \"{{ %s }}\"}" % port_var)
    for host in mh.names:
        out = mh.inside(host, "ps", "-e", "-o", "args=").stdout
        assert "sglang" not in out, "%s still runs:\n%s" % (host, out)
