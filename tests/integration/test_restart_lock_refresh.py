"""A restart's readiness wait refreshes the restart's operation lock while it waits (issue 31,
item 3), through the real playbook: the wait gets the lock's token as `refresh_lock` (the
restart role's vars; the rollback's wait gets the same); it does not give it back (the last
check does, once the server held). Before, the wait never touched the lock, and its age counted
from the plan that took it."""
from __future__ import annotations

import os
import re

from helpers import play_runs


def test_the_restarts_readiness_wait_refreshes_its_lock(tmp_path):
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    try:
        run = play_runs.play(inv, "restart_extraction.yml", "-vvv")
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-4000:]
        start = re.search(r"TASK \[[^\]]*: Wait until the server is ready", out)
        assert start, out[-4000:]
        wait = out[start.start():]
        wait = wait[:wait.index("\nTASK [", 1)]
        refreshed = re.search(r"refresh_lock: ([0-9a-f]{32})\b", wait)
        # kept through the hold (a rollback runs under it): the last check gives it back
        assert refreshed and re.search(r"release_lock: null\b", wait), wait[-3000:]
        assert not os.path.exists(os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"]))
    finally:
        play_runs.teardown(inv)
