"""The restart's teardown and launch in one module call (sglang_launch's `teardown`) whenever
both steps run; on its own when the tags pick the teardown without the launch."""
from __future__ import annotations

import json
import os

from helpers import play_runs
from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

ONE_CALL = "Launch the new server, once the old one is stopped and proven gone (one call)"
ALONE = "Tear down the old server and prove it is gone"


def _record(hv: dict):
    path = os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])
    return json.load(open(path)) if os.path.exists(path) else None


def _task_status(out: str, title: str) -> str:
    """The first status line after the task's banner (ok/changed/skipping/fatal)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("TASK [") and title in line)
    return next(line for line in lines[start + 1:] if line.split(":")[0] in ("ok", "changed", "skipping", "fatal"))


def test_a_config_change_is_replaced_in_one_call_and_tags_still_pick_one_step(one_host):
    inv, hv = one_host
    first = play_runs.play(inv, "restart_serving.yml")
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    old = _record(hv)

    changed = play_runs.play(inv, "restart_serving.yml", "-e", '{"sglang_args": {"mem-fraction-static": 0.7}}')
    out = changed.stdout + changed.stderr
    assert changed.returncode == 0, out[-4000:]
    assert ALONE not in out, out[-4000:]  # tagged never: only --tags teardown runs it (and shows it)
    assert _task_status(out, ONE_CALL).startswith("changed"), out[-4000:]
    # the summary reads the teardown from the launch's result: the old server was stopped
    assert "stopped: 0 processes" not in out and "stopped: nothing" not in out, out[-4000:]
    assert "stopped: " in out and " processes (" in out, out[-4000:]
    new = _record(hv)
    assert new["launch_id"] != old["launch_id"] and "0.7" in new["argv"]
    assert not _procs.is_alive(old["pid"], old["start_time"])

    # --tags teardown: the teardown alone (the launch is not selected), the server stays down
    alone = play_runs.play(inv, "restart_serving.yml", "--tags", "teardown", "-e",
                           '{"sglang_args": {"mem-fraction-static": 0.6}}')
    out = alone.stdout + alone.stderr
    assert alone.returncode == 0, out[-4000:]
    assert _task_status(out, ALONE).startswith("changed"), out[-4000:]
    assert ONE_CALL not in out and "TASK [llmops.sglang.sglang_launch : Launch the new server]" not in out
    assert wait_for(lambda: not _procs.is_alive(new["pid"], new["start_time"]), 10)
    assert _record(hv) is None
