"""restart_fleet.yml with a persistent fact cache (fact_caching = jsonfile, as many fleets run),
behind the real sglang-router 0.3.2 with one emulated worker: the last run's restart result must
not pass for this run's."""
from __future__ import annotations

from helpers.fleet import Fleet, routed


def test_a_cached_restart_result_does_not_keep_a_never_stopped_worker_out(tmp_path, monkeypatch) -> None:
    """With a persistent fact cache, the last run's restart result (its teardown listed targets)
    must not pass for this run's: a restart that fails before stopping anything (here its
    arguments are refused) puts the worker it took out back into the router. Before, the cached
    result said the server had been stopped, and the serving worker stayed out."""
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN", "jsonfile")
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    with routed(Fleet(str(tmp_path / "fleet"), size=1)) as fleet:
        before = fleet.pids()
        roll = fleet.play("restart_fleet.yml", {"sglang_force": True, "sglang_hold": "ten",
                                                "sglang_router_min_healthy": 0})
        out = roll.stdout + roll.stderr
        assert roll.returncode != 0, out[-5000:]
        stop = out[out.index("Action failed: rolling restart of w1"):]
        assert "was put back into the router (its server was not stopped)" in stop[:3000], out[-5000:]
        assert fleet.pids() == before
        assert [w["url"] for w in fleet.router_workers()] == [fleet.worker_url("w1")]
