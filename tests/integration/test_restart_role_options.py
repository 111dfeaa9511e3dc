"""The restart role passes the launch and readiness settings through to the modules
(inventory variable -> sglang_restart_* -> module option), and the summary names a foreign
port holder."""
from __future__ import annotations

import os
import re
import sys

from helpers import play_runs
from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http


def _record_exists(hv: dict) -> bool:
    return os.path.exists(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"]))


def test_foreign_port_holder_fails_by_default_and_is_stopped_with_kill(one_host, spawn, tmp_path):
    inv, hv = one_host
    port = hv["sglang_port"]
    holder = spawn.start([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                         cwd=str(tmp_path))
    assert wait_for(lambda: _http.request("127.0.0.1", port, "/", timeout=1).status == 200, 30)
    refused = play_runs.play(inv, "restart_serving.yml")
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out[-3000:]
    assert "port_busy" in out and "nothing was stopped" in out.lower()
    assert holder.poll() is None and not _record_exists(hv)

    killed = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_foreign_port_holders=kill")
    out = killed.stdout + killed.stderr
    assert killed.returncode == 0, out[-4000:]
    assert re.search(r"foreign port holder \(kill\): %d " % holder.pid, out), out[-4000:]
    assert wait_for(lambda: holder.poll() is not None, 10)
    assert _http.request("127.0.0.1", port, "/health", timeout=5).status == 200


def test_min_free_mb_and_settle_reach_the_modules(one_host):
    inv, hv = one_host
    full = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_min_free_mb=1000000000")
    out = full.stdout + full.stderr
    assert full.returncode != 0 and "no_space" in out, out[-3000:]
    assert not _record_exists(hv)
    run = play_runs.play(inv, "restart_serving.yml", "-v", "-e", "sglang_ready_settle=0.7")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert re.search(r"settle: 0\.7\b", out), out[-3000:]


def test_spawn_timeout_reaches_the_module(one_host):
    inv, hv = one_host
    run = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_spawn_timeout=-1")
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "spawn_timeout must be a positive number" in out, out[-3000:]
    assert not _record_exists(hv)
