"""restart_fleet.yml behind the real sglang-router (0.3.2, CPU) with emulated workers, under a
steady load of multi-second streams and plain requests through the router:

- the roll: zero failed client requests, every worker restarted (new pid), never fewer than
  N-1 workers serving, all back healthy in the router;
- a second run on the converged fleet: changed=0 and the router untouched (same worker ids);
- a host whose new server fails stays out of the router, the roll stops, the rest serves;
- the load generator does count a stream cut by a killed server (so zero means zero);
- the module against an old router with the legacy API (sglang-router 0.1.9).

The roll tests share one fleet of three workers behind one router, brought up once for the file:
the fleet a roll leaves serving is where the next one starts (each test checks that it is).
"""
from __future__ import annotations

import os
import re
import signal
from typing import Iterator

import pytest
import requests

from helpers.fixtures import emulator_python_path, free_port, run_module, wait_for
from helpers.fleet import MODEL_DIR, Fleet, recap, routed, router_python
from helpers.loadgen import HealthSampler, LoadGen


@pytest.fixture(scope="module")
def router_py() -> str:
    return router_python()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, router_py: str) -> Iterator[Fleet]:
    """Three workers up (restart_serving.yml, all at once) behind a router that has all three;
    stopped after the file's last test."""
    with routed(Fleet(str(tmp_path_factory.mktemp("fleet-router") / "fleet"), size=3), router_py) as fleet:
        yield fleet


def _serving(fleet: Fleet) -> Fleet:
    """The shared fleet, every worker in the router and healthy."""
    fleet.assert_serving()
    return fleet


def test_roll_behind_the_router_under_load_fails_no_request(served: Fleet) -> None:
    fleet = _serving(served)
    before = fleet.pids()
    load = LoadGen(fleet.router_url, model=MODEL_DIR, clients=6).start()
    health = HealthSampler(fleet.router_url, [fleet.worker_url(h) for h in fleet.hosts])
    health.start()
    try:
        assert wait_for(lambda: load.summary()["streams_ok"] >= 3, timeout=60)  # load is flowing
        roll = fleet.play("restart_fleet.yml", {"sglang_force": True})
    finally:
        load.stop()
        health.stop()
    out = roll.stdout + roll.stderr
    assert roll.returncode == 0, out[-5000:]
    summary = load.summary()
    assert summary["failed"] == 0, summary
    # the load covered the roll with multi-second streams of every kind
    assert min(summary["by_kind"].values()) >= 3 and summary["longest_stream"] >= 2.0, summary
    after = fleet.pids()
    assert all(after[h] != before[h] for h in fleet.hosts), (before, after)
    assert health.min_serving() >= len(fleet.hosts) - 1, health.samples
    routed = fleet.router_workers()
    assert sorted(w["url"] for w in routed) == sorted(fleet.worker_url(h) for h in fleet.hosts)
    assert all(w["is_healthy"] for w in routed)
    for h in fleet.hosts:
        assert "%s (%s): restarted" % (h, fleet.worker_url(h)) in out

    # check mode with force (one host, to keep the test short): it would leave the router, and
    # the diff shows it; nothing is done
    check = fleet.play("restart_fleet.yml", {"sglang_force": True, "sglang_hosts": "w2"}, check=True)
    out = check.stdout + check.stderr
    assert check.returncode == 0, out[-4000:]
    assert "w2 (%s): check mode: would restart" % fleet.worker_url("w2") in out, out[-4000:]
    assert re.search(r"^-%s$" % re.escape(fleet.worker_url("w2")), out, re.M), out[-4000:]
    assert {w["id"] for w in fleet.router_workers()} == {w["id"] for w in routed}
    assert fleet.pids() == after

    # converged: nothing changes, the router is not touched (its worker ids stay the same)
    again = fleet.play("restart_fleet.yml")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap(out).values()), recap(out)
    assert {w["id"] for w in fleet.router_workers()} == {w["id"] for w in routed}
    assert fleet.pids() == after


def test_a_host_that_fails_stays_out_and_the_roll_stops(served: Fleet) -> None:
    fleet = _serving(served)
    rest = ["w2", "w3"]  # the hosts after the failing one
    before = fleet.pids()
    routed = {w["url"]: w["id"] for w in fleet.router_workers()}
    # w1's next server dies while loading (the emulator's "Not enough memory")
    # rollback off: the host ends DOWN (a rolled-back host goes back in: test_fleet_rollback.py)
    fleet.extra_host_vars = {"w1": {"sglang_serving_env": {"SGLANG_EMULATOR_FAULT": "oom"},
                                    "sglang_restart_rollback": False}}
    broken = fleet.write_inventory(os.path.join(fleet.workdir, "broken.json"))
    fleet.extra_host_vars = {}
    load = LoadGen(fleet.router_url, model=MODEL_DIR, clients=4).start()
    try:
        roll = fleet.play("restart_fleet.yml", {"sglang_force": True}, inventory=broken)
    finally:
        load.stop()
    out = roll.stdout + roll.stderr
    assert roll.returncode != 0
    assert "is left out of the router" in out, out[-5000:]
    # the roll stopped: w2's batch never started (ansible ends a serial play whose whole batch
    # failed; with wider batches the playbook's guard stops the next ones)
    assert set(recap(out)) == {"w1"}, recap(out)
    # w1 is out; w2 and w3 were not touched and serve; no client request failed
    assert sorted(w["url"] for w in fleet.router_workers()) == sorted(fleet.worker_url(h) for h in rest)
    assert {w["url"]: w["id"] for w in fleet.router_workers()} == {fleet.worker_url(h): routed[fleet.worker_url(h)]
                                                                   for h in rest}
    assert all(fleet.pids()[h] == before[h] for h in rest)
    assert load.summary()["failed"] == 0, load.summary()
    # the next run (fault gone) restarts w1, checks it and puts it back; w2 and w3 stay untouched
    fix = fleet.play("restart_fleet.yml")
    out = fix.stdout + fix.stderr
    assert fix.returncode == 0, out[-5000:]
    now = {w["url"]: w for w in fleet.router_workers()}
    assert sorted(now) == sorted(fleet.worker_url(h) for h in fleet.hosts)
    assert all(w["is_healthy"] for w in now.values())
    for h in rest:
        assert now[fleet.worker_url(h)]["id"] == routed[fleet.worker_url(h)]
        assert fleet.pids()[h] == before[h] and recap(out)[h]["changed"] == 0


def test_the_load_generator_counts_a_cut_stream(spawn, tmp_path) -> None:
    """Without the router (which would retry): a server killed mid-stream is a failure."""
    port = free_port()
    proc = spawn.start([emulator_python_path(), "-m", "sglang.launch_server", "--model-path", MODEL_DIR,
                        "--port", str(port), "--tp-size", "1"],
                       env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "SGLANG_EMULATOR_TOKEN_DELAY": "0.1",
                            "no_proxy": "*"}, log_path=str(tmp_path / "emu.log"))
    url = "http://127.0.0.1:%d" % port
    session = requests.Session()
    session.trust_env = False

    def healthy() -> bool:
        try:
            return session.get(url + "/health", timeout=1).status_code == 200
        except requests.exceptions.RequestException:
            return False

    assert wait_for(healthy, timeout=60)
    load = LoadGen(url, clients=2, mix=("stream_generate",), stream_tokens=(100,)).start()
    assert wait_for(lambda: session.get(url + "/get_load", timeout=2).json()[0]["num_reqs"] >= 2, timeout=30)
    os.killpg(proc.pid, signal.SIGKILL)
    load.stop()
    summary = load.summary()
    assert summary["failed"] >= 2, summary
    assert any("truncated stream" in e or "connection" in e for e in summary["errors"]), summary


def test_module_against_a_legacy_router(spawn, tmp_path) -> None:
    """sglang-router 0.1.9: /list_workers, /add_worker?url=, /remove_worker?url=."""
    python = router_python("0.1.9")
    urls = []
    for i in range(2):
        port = free_port()
        spawn.start([emulator_python_path(), "-m", "sglang.launch_server", "--model-path", MODEL_DIR,
                     "--port", str(port), "--tp-size", "1"],
                    env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "no_proxy": "*"},
                    log_path=str(tmp_path / ("emu%d.log" % i)))
        urls.append("http://127.0.0.1:%d" % port)
    router_port = free_port()
    spawn.start([python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(router_port),
                 "--policy", "round_robin", "--prometheus-port", str(free_port()), "--worker-urls"] + urls,
                env={"no_proxy": "*", "NO_PROXY": "*"}, log_path=str(tmp_path / "router.log"))
    router = "http://127.0.0.1:%d" % router_port
    base = {"router_url": router, "poll_interval": 0.2, "timeout": 120}

    def listed() -> bool:
        try:
            return run_module("sglang_router", base).get("total_workers") == 2
        except AssertionError:
            return False

    assert wait_for(listed, timeout=120, interval=1)
    out = run_module("sglang_router", dict(base, worker_url=urls[0], state="absent"))
    assert out["_rc"] == 0 and out["changed"] and out["api"] == "legacy", out
    assert [w["url"] for w in out["workers"]] == [urls[1]]
    refused = run_module("sglang_router", dict(base, worker_url=urls[1], state="absent"))
    assert refused["failed"] and refused["reason"] == "last_healthy_worker", refused
    back = run_module("sglang_router", dict(base, worker_url=urls[0], state="present"))
    assert back["changed"] and sorted(w["url"] for w in back["workers"]) == sorted(urls), back
    again = run_module("sglang_router", dict(base, worker_url=urls[0], state="present"))
    assert not again["changed"]
    gone = run_module("sglang_router", {"router_url": "http://127.0.0.1:%d" % free_port()})
    assert gone["failed"] and gone["reason"] == "router_unreachable"
