"""restart_fleet.yml when a host's new configuration fails and the restart rolls it back
(behind the real sglang-router 0.3.2, emulated workers, a small bounded load through the router):
the rolled-back host, serving its OLD configuration and answering a real generation, goes back
into the router; the roll stops there and the hosts after it are not touched. A host that ends
DOWN (the rollback fails too) stays out.

Both tests roll one fleet of three, brought up once for the file: the fleet the first roll leaves
serving (w2 rolled back, all three in the router) is where the second starts."""
from __future__ import annotations

import os
import shutil
from typing import Any, Dict, Iterator

import pytest

from helpers.fleet import MODEL_DIR, Fleet, recap, routed
from helpers.loadgen import LoadGen


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    """Three workers up (restart_serving.yml, all at once) behind a router that has all three;
    w1 serves a model directory of its own (a copy of the demo model: the second test removes
    it). Stopped after the file's last test."""
    top = tmp_path_factory.mktemp("fleet-rollback")
    model = str(top / "model-w1")
    shutil.copytree(MODEL_DIR, model)
    base = {"w1": {"sglang_model_path": model}}
    with routed(Fleet(str(top / "fleet"), size=3, extra_host_vars=base)) as fleet:
        yield {"fleet": fleet, "model": model, "base": base}


@pytest.fixture
def fleet(served: Dict[str, Any]) -> Dict[str, Any]:
    """The shared fleet, every worker in the router and healthy."""
    served["fleet"].assert_serving()
    return served


def _faulty(served: Dict[str, Any], host: str, **more: Any) -> str:
    """An inventory of the fleet where `host`'s next server dies while loading (the emulator's
    "Not enough memory")."""
    f: Fleet = served["fleet"]
    f.extra_host_vars = {h: dict(v) for h, v in served["base"].items()}
    f.extra_host_vars.setdefault(host, {}).update(sglang_serving_env={"SGLANG_EMULATOR_FAULT": "oom"}, **more)
    try:
        return f.write_inventory(os.path.join(f.workdir, "faulty-%s.json" % host))
    finally:
        f.extra_host_vars = served["base"]


def test_a_rolled_back_host_goes_back_into_the_router_and_the_roll_stops(fleet: Dict[str, Any]) -> None:
    served, fleet = fleet, fleet["fleet"]
    before = {h: fleet.record(h) for h in fleet.hosts}
    ids = {w["url"]: w["id"] for w in fleet.router_workers()}
    # the new configuration (one more argument) for every host; w2's new server dies while
    # loading (the emulator's "Not enough memory"), so its restart rolls back to the old one
    inventory = _faulty(served, "w2")
    load = LoadGen(fleet.router_url, model=MODEL_DIR, clients=2, stream_tokens=(20, 30), max_requests=400).start()
    try:
        roll = fleet.play("restart_fleet.yml", {"sglang_serving_args": {"mem-fraction-static": 0.6}},
                          inventory=inventory)
    finally:
        load.stop()
    out = roll.stdout + roll.stderr
    with open(fleet.workdir + "/roll.out", "w") as fh:
        fh.write(out)
    assert fleet.router is not None and fleet.router.poll() is None, "the router exited: %s" % fleet.router
    assert roll.returncode != 0, out[-5000:]  # the roll stopped: the play fails

    # w1 took the new configuration; w2 is back on the OLD one, in a new process
    assert fleet.record("w1")["pid"] != before["w1"]["pid"]
    assert fleet.record("w1")["fingerprint_inputs"]["args"]["--mem-fraction-static"] == 0.6
    w2 = fleet.record("w2")
    assert w2["pid"] != before["w2"]["pid"]
    assert w2["fingerprint"] == before["w2"]["fingerprint"]
    assert "--mem-fraction-static" not in w2["fingerprint_inputs"]["args"]
    assert "SGLANG_EMULATOR_FAULT" not in w2["fingerprint_inputs"]["env"]

    # the roll stopped at w2: w3 was not touched (same process, same router entry, no task ran)
    assert fleet.record("w3")["pid"] == before["w3"]["pid"]
    assert set(recap(out)) == {"w1", "w2"}, recap(out)
    assert recap(out)["w2"]["failed"] == 1

    # w2 is back in the router, healthy, next to the others
    routed = {w["url"]: w for w in fleet.router_workers()}
    assert sorted(routed) == sorted(fleet.worker_url(h) for h in fleet.hosts), routed
    assert all(w["is_healthy"] for w in routed.values()), routed
    assert routed[fleet.worker_url("w3")]["id"] == ids[fleet.worker_url("w3")]

    # the play says so in the host's failure: rolled back, which pid, back in the router, the stop
    stops = [line for line in out.splitlines() if "Action failed: rolling restart of w2" in line]
    assert len(stops) == 1, out[-5000:]
    stop = stops[0]
    assert "rolled back to its previous configuration (pid %s," % w2["pid"] in stop, stop
    assert "It answered a generation and is back in the router, healthy (3 of 3" in stop, stop
    assert "The roll stops here: w3 not touched." in stop, stop

    summary = load.summary()
    assert summary["failed"] == 0, summary
    assert summary["total"] >= 5, summary


def test_a_host_that_ends_down_stays_out(fleet: Dict[str, Any]) -> None:
    """The rollback fails too (the old configuration's model directory is gone): the host is
    DOWN, it is not put back into the router, and the roll stops before the next host."""
    served, fleet = fleet, fleet["fleet"]
    rest = ["w2", "w3"]  # the hosts after the failing one
    before = fleet.pids()
    ids = {w["url"]: w["id"] for w in fleet.router_workers()}
    shutil.rmtree(served["model"])  # w1's previous configuration can no longer start
    # the new one (the demo model itself) dies while loading
    roll = fleet.play("restart_fleet.yml", {"sglang_force": True},
                      inventory=_faulty(served, "w1", sglang_model_path=MODEL_DIR))
    out = roll.stdout + roll.stderr
    assert roll.returncode != 0, out[-5000:]
    stops = [line for line in out.splitlines() if "Action failed: rolling restart of w1" in line]
    assert len(stops) == 1, out[-5000:]
    assert "DOWN (no server: the rollback failed too)" in stops[0], stops[0]  # docs/roles.md, state down
    assert "is left out of the router. The roll stops here: w2, w3 not touched." in stops[0], stops[0]
    assert sorted(w["url"] for w in fleet.router_workers()) == sorted(fleet.worker_url(h) for h in rest)
    assert {w["url"]: w["id"] for w in fleet.router_workers()} == {fleet.worker_url(h): ids[fleet.worker_url(h)]
                                                                   for h in rest}
    assert all(fleet.pids()[h] == before[h] for h in rest)
    assert set(recap(out)) == {"w1"}, recap(out)
