"""`--skip-tags verify` (or launch, ready, teardown, prewarm) on a run whose configuration changed.
The plan carries all those tags, so it is skipped too: nothing is planned, the OLD configuration
keeps running - the summary must not say "unchanged: the requested server was already running".
`--skip-tags summary` skips none of the end (the last check gives the lock back)."""
from __future__ import annotations

import json
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
        # nothing was planned, so nothing changed: the host serves what ran before (the step that
        # keeps the plan runs whatever the tags; skipped with the plan, the restart failed on it)
        assert run.returncode == 0, out[-4000:]
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


EARLIER_PLAN = """
- name: A plan of the play before the restart, as the rolling role makes one
  hosts: gpu_8x
  gather_facts: false
  vars:
    sglang_restart_verify: none
  tasks:
    - name: Plan, as the roll does (the restart's plan entry point in check mode, no lock)
      ansible.builtin.import_role:
        name: llmops.sglang.sglang_restart
        tasks_from: plan
      check_mode: true
      vars:
        sglang_restart_lock: false
        sglang_restart_prewarm: false
    - name: Restart
      ansible.builtin.include_role:
        name: llmops.sglang.sglang_restart
"""


def test_skip_tags_verify_after_an_earlier_plan_of_the_play_replaces_nothing(tmp_path):
    """The rolling role plans with the restart's plan entry point, which registers sglang_launch_result;
    under `--skip-tags verify` the restart's own plan is skipped, and the restart took the roll's
    plan for its own: a changed configuration was launched - the old server stopped - without the
    operation lock, the prewarm or the readiness wait. The restart now forgets the step results of
    earlier tasks of the play first: nothing is planned, nothing is replaced."""
    hosts = {"h1": play_runs.host_vars(str(tmp_path), "h1")}
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), hosts)
    playbook = tmp_path / "earlier_plan.yml"
    playbook.write_text(EARLIER_PLAN)
    record = os.path.join(hosts["h1"]["sglang_state_dir"], hosts["h1"]["sglang_name"] + ".json")
    try:
        first = play_runs.play(inv, str(playbook))
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        with open(record) as fh:
            pid = json.load(fh)["pid"]
        run = play_runs.play(inv, str(playbook), "--skip-tags", "verify", "-e", '{"sglang_restart_args": {"mem-fraction-static": 0.7}}')
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-4000:]
        with open(record) as fh:
            assert json.load(fh)["pid"] == pid, out[-4000:]
        head = re.findall(r"%s on h1: (.*)" % re.escape(hosts["h1"]["sglang_name"]), out)
        assert head and not head[-1].startswith("serving NEW"), (head, out[-3000:])
    finally:
        down = play_runs.teardown(inv)
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
