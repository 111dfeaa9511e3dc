"""A converged run (the server is the last proven-good launch) with a longer sglang_restart_hold than
the run that promoted it: the last check gives the lock back only in the call that held the server
to the end of the hold, and the summary says it was given back (it said 'still held' before)."""
from __future__ import annotations

import os

from helpers import play_runs


def test_a_converged_run_with_a_longer_hold_says_truly_whether_the_lock_was_given_back(tmp_path):
    hosts = {"h1": play_runs.host_vars(str(tmp_path), "h1")}
    hv = hosts["h1"]
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), hosts)
    lock = os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"])
    try:
        first = play_runs.play(inv, "restart_serving.yml")
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        run = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_restart_hold=25")
        out = run.stdout + run.stderr
        with open(str(tmp_path / "play.out"), "w") as fh:
            fh.write(out)
        assert run.returncode == 0, out[-4000:]
        assert "server: checked now: pid" in out, out[-3000:]   # the proven path: no readiness wait
        assert not os.path.exists(lock)                           # the lock is gone ...
        assert "still held" not in out, out[-3000:]               # ... and the summary must say so
    finally:
        down = play_runs.teardown(inv)
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
