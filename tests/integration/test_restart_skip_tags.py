"""`--skip-tags verify` (or launch, ready, teardown, prewarm) on a run whose configuration changed.
The plan carries all those tags, so it is skipped too: nothing is planned, the OLD configuration
keeps running - the summary must not say "unchanged: the requested server was already running".
`--skip-tags summary` skips none of the end (the last check gives the lock back)."""
from __future__ import annotations

import os
import re

from helpers import play_runs


def test_skip_tags_verify_does_not_call_the_old_config_the_requested_one(tmp_path):
    hosts = {"h1": play_runs.host_vars(str(tmp_path), "h1")}
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), hosts)
    try:
        first = play_runs.play(inv, "restart_serving.yml")
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        run = play_runs.play(inv, "restart_serving.yml", "--skip-tags", "verify",
                             "-e", '{"sglang_serving_env": {"REVIEW_MARK": "1"}}')
        out = run.stdout + run.stderr
        with open(str(tmp_path / "play.out"), "w") as fh:
            fh.write(out)
        head = re.findall(r"%s on h1: (.*)" % re.escape(hosts["h1"]["sglang_name"]), out)
        assert head, out[-4000:]
        assert "the requested server was already running" not in head[-1], (head, out[-3000:])
        # `--skip-tags summary` skips nothing of the end: the last check is the step that gives
        # the operation lock back (it was skipped, and the lock of a good restart stayed behind)
        lock = os.path.join(hosts["h1"]["sglang_state_dir"], "%s.restart.lock" % hosts["h1"]["sglang_name"])
        forced = play_runs.play(inv, "restart_serving.yml", "--skip-tags", "summary", "-e", "sglang_force=true")
        out = forced.stdout + forced.stderr
        assert forced.returncode == 0, out[-4000:]
        head = re.findall(r"%s on h1: (.*)" % re.escape(hosts["h1"]["sglang_name"]), out)
        assert head and head[-1].startswith("serving NEW config"), out[-4000:]
        assert not os.path.exists(lock), out[-4000:]
    finally:
        down = play_runs.teardown(inv)
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
