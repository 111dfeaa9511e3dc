"""restart_fleet.yml when a host's new configuration fails and the restart rolls it back
(behind the real sglang-router 0.3.2, emulated workers, a small bounded load through the router):
the rolled-back host, serving its OLD configuration and answering a real generation, goes back
into the router; the roll stops there and the hosts after it are not touched. A host that ends
DOWN (the rollback fails too) stays out."""
from __future__ import annotations

import shutil

from helpers.fleet import MODEL_DIR, Fleet, recap, router_python
from helpers.loadgen import LoadGen


def test_a_rolled_back_host_goes_back_into_the_router_and_the_roll_stops(fleet: Fleet) -> None:
    up = fleet.up()
    assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
    fleet.start_router(router_python())
    before = {h: fleet.record(h) for h in fleet.hosts}
    ids = {w["url"]: w["id"] for w in fleet.router_workers()}
    # the new configuration (one more argument) for every host; w2's new server dies while
    # loading (the emulator's "Not enough memory"), so its restart rolls back to the old one
    fleet.extra_host_vars = {"w2": {"sglang_serving_env": {"SGLANG_EMULATOR_FAULT": "oom"}}}
    inventory = fleet.write_inventory(fleet.workdir + "/faulty.json")
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


def test_a_host_that_ends_down_stays_out(tmp_path) -> None:
    """The rollback fails too (the old configuration's model directory is gone): the host is
    DOWN, it is not put back into the router, and the roll stops before the next host."""
    model = tmp_path / "model-w1"
    shutil.copytree(MODEL_DIR, str(model))
    fleet = Fleet(str(tmp_path / "fleet"), size=2, extra_host_vars={"w1": {"sglang_model_path": str(model)}})
    try:
        up = fleet.up()
        assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
        fleet.start_router(router_python())
        before = fleet.pids()
        ids = {w["url"]: w["id"] for w in fleet.router_workers()}
        shutil.rmtree(str(model))  # the previous configuration can no longer start
        fleet.extra_host_vars = {"w1": {"sglang_serving_env": {"SGLANG_EMULATOR_FAULT": "oom"}}}
        roll = fleet.play("restart_fleet.yml", {"sglang_force": True},
                          inventory=fleet.write_inventory(fleet.workdir + "/faulty.json"))
        out = roll.stdout + roll.stderr
        assert roll.returncode != 0, out[-5000:]
        stops = [line for line in out.splitlines() if "Action failed: rolling restart of w1" in line]
        assert len(stops) == 1, out[-5000:]
        assert "DOWN (no server: the rollback failed too)" in stops[0], stops[0]  # docs/roles.md, state down
        assert "is left out of the router. The roll stops here: w2 not touched." in stops[0], stops[0]
        assert [w["url"] for w in fleet.router_workers()] == [fleet.worker_url("w2")]
        assert fleet.router_workers()[0]["id"] == ids[fleet.worker_url("w2")]
        assert fleet.record("w2")["pid"] == before["w2"]
        assert set(recap(out)) == {"w1"}, recap(out)
    finally:
        fleet.stop_router()
        fleet.down()
