"""A converged re-run of the last proven-good server that stalls for ~25 s right after the plan found
it answering: the last check, which stands in for the readiness wait on this path, gets the wait's
timeout (sglang_restart_timeout), so the run says `serving (unchanged ...)` instead of failing the
host as `DOWN (no server)` while the server lives and serves again seconds later."""
from __future__ import annotations

import json
import os
import re
import signal
import threading

from helpers import play_runs
from helpers.fixtures import wait_for


def test_a_short_stall_of_the_proven_server_is_not_called_down(one_host, tmp_path):
    inv, hv = one_host
    first = play_runs.play(inv, "restart_serving.yml")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        pid = json.load(fh)["pid"]
    log = str(tmp_path / "rerun.log")
    proc = play_runs.start(inv, "restart_serving.yml", log)
    resumed = threading.Timer(25.0, os.kill, (pid, signal.SIGCONT))
    try:
        # the plan is done (it found the server answering): the server stalls from here on
        assert wait_for(lambda: "Keep the plan" in open(log).read(), timeout=120, interval=0.1)
        os.kill(pid, signal.SIGSTOP)
        resumed.start()
        proc.wait(timeout=300)
    finally:
        resumed.cancel()
        os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            play_runs.kill_tree(proc.pid)
    out = open(log).read()
    head = re.findall(r"%s on h1: (.*)" % re.escape(hv["sglang_name"]), out)
    assert head, out[-4000:]
    assert not head[-1].startswith("DOWN (no server"), (head, out[-3000:])
    assert proc.returncode == 0, out[-3000:]
