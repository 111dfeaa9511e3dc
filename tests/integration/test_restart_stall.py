"""A converged re-run while the healthy server stalls (issue finding 11, its first half): the plan
asked once (`GET /v1/models`, 5 s) and called a server that did not answer in time unresponsive,
so a stall of a few seconds replaced a healthy server. It now asks again (3 attempts, 1 s apart)
before it does. The stall here is real: the server's main process is stopped (SIGSTOP) from
before the re-run starts until 16 s later, longer than any one attempt of the plan and shorter
than all three."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

from helpers import play_runs


def _record(hv):
    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        return json.load(fh)


def test_a_stalled_healthy_server_is_asked_again_and_kept(one_host):
    inv, hv = one_host
    first = play_runs.play(inv, "restart_serving.yml")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    before = _record(hv)
    os.kill(before["pid"], signal.SIGSTOP)
    resumed = threading.Timer(16.0, os.kill, (before["pid"], signal.SIGCONT))
    resumed.start()
    started = time.monotonic()
    try:
        rerun = play_runs.play(inv, "restart_serving.yml")
    finally:
        resumed.cancel()
        try:
            os.kill(before["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass  # replaced (and so stopped) by the re-run: the assertions below say so
    out = rerun.stdout + rerun.stderr
    # the stall outlasted the plan's first attempt (it ran while the server was stopped)
    assert time.monotonic() - started > 16.0, out[-4000:]
    assert rerun.returncode == 0, out[-4000:]
    assert "%s on h1: serving (unchanged" % hv["sglang_name"] in out, out[-4000:]
    after = _record(hv)
    assert (after["launch_id"], after["pid"]) == (before["launch_id"], before["pid"]), out[-4000:]
