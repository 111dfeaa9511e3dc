"""restart_fleet.yml restarts a worker whose patch directory changed (`sglang_launch_identity_paths`
in the inventory, as docs/roles.md says to set it for a restart), behind the real sglang-router
0.3.2. The rolling role planned with a copy of the restart's plan call that left out
identity_paths, ignore_changes, the cache dir and the containment: its plan saw no change, left
the worker alone and the patched code never ran. Now the roll plans with the restart role's own
launch task (its entry point `launch`), so both decide alike."""
from __future__ import annotations

import os

from helpers.fleet import Fleet, routed

# the only worker may leave the router (no other to keep serving)
ONE_WORKER = {"sglang_router_min_healthy": 0}


def test_a_changed_patch_directory_restarts_the_worker_in_a_roll(tmp_path) -> None:
    patch = tmp_path / "patch"
    patch.mkdir()
    (patch / "fix.py").write_text("X = 1\n")
    fleet = Fleet(str(tmp_path / "fleet"), size=1,
                  extra_host_vars={"w1": {"sglang_launch_identity_paths": [str(patch)]}})
    with routed(fleet):
        before = fleet.pids()["w1"]
        converged = fleet.play("restart_fleet.yml", ONE_WORKER)
        out = converged.stdout + converged.stderr
        assert converged.returncode == 0, out[-5000:]
        assert fleet.pids()["w1"] == before, "a roll with nothing changed restarted the worker"
        (patch / "fix.py").write_text("X = 2  # the patch changed\n")
        os.utime(patch / "fix.py", (1, 1))  # a new mtime and size, whatever the clock's resolution
        roll = fleet.play("restart_fleet.yml", ONE_WORKER)
        out = roll.stdout + roll.stderr
        assert roll.returncode == 0, out[-5000:]
        assert fleet.pids()["w1"] != before, out[-5000:]
        assert [w["url"] for w in fleet.router_workers()] == [fleet.worker_url("w1")]
