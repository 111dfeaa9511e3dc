"""The restart role's entry points (plan, replace, ready, teardown) compose a restart in an
operator's own play, with the restart's settings from the inventory, and Ansible validates each
against its argument spec before anything runs."""
from __future__ import annotations

import os

import yaml

from helpers import play_runs
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http

ROLE = "llmops.sglang.sglang_restart"


def _step(entry: str, **task) -> dict:
    return dict({"name": "entry point %s" % entry, "ansible.builtin.import_role": {"name": ROLE, "tasks_from": entry}},
                **task)


def _playbook(path, tasks) -> str:
    with open(path, "w") as fh:
        yaml.safe_dump([{"name": "entry points", "hosts": "gpu_8x", "gather_facts": False, "tasks": tasks}], fh,
                       sort_keys=False)
    return str(path)


def _record(hv: dict) -> dict:
    import json

    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        return json.load(fh)


def test_plan_replace_ready_restart_and_converge(one_host, tmp_path):
    inv, hv = one_host
    book = _playbook(tmp_path / "own.yml", [
        _step("plan", check_mode=True),
        {"name": "remember the plan", "ansible.builtin.set_fact": {"own_plan": "{{ sglang_launch_result }}"}},
        _step("replace", when="own_plan is changed"),
        _step("ready", vars={"sglang_restart_ready_record": "{{ sglang_launch_result.record | default(none) }}"}),
        {"name": "give the plan's lock back", "llmops.sglang.sglang_lock": {
            "name": "{{ sglang_name }}", "state_dir": "{{ sglang_state_dir }}", "state": "absent"}},
        {"name": "say what happened", "ansible.builtin.debug": {
            "msg": "OWN plan={{ own_plan.reason }} ready={{ sglang_ready_result.ready }}"}},
    ])
    first = play_runs.play(inv, book)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-4000:]
    # each entry point was validated against its spec, then ran
    for entry in ("plan", "replace", "ready"):
        assert "Validating arguments against arg spec '%s'" % entry in out, out[-4000:]
    assert "OWN plan=" in out and "ready=True" in out, out[-3000:]
    rec = _record(hv)
    assert _http.request("127.0.0.1", hv["sglang_port"], "/health", timeout=5).status == 200
    assert not os.path.exists(os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"]))

    again = play_runs.play(inv, book)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    assert "OWN plan=running" in out and "ready=True" in out, out[-3000:]
    assert _record(hv)["launch_id"] == rec["launch_id"], "the converged run replaced the server"

    # the teardown entry point on its own: it takes the lock, stops the server and gives the lock back
    down = play_runs.play(inv, _playbook(tmp_path / "down.yml", [_step("teardown")]))
    out = down.stdout + down.stderr
    assert down.returncode == 0, out[-4000:]
    assert _http.request("127.0.0.1", hv["sglang_port"], "/health", timeout=2).status != 200
    assert not os.path.exists(os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"])), out[-3000:]


def test_each_entry_point_refuses_bad_options_before_anything_runs(one_host, tmp_path):
    inv, hv = one_host
    bad_flag = play_runs.play(inv, _playbook(tmp_path / "plan.yml", [_step("plan", check_mode=True)]),
                              "-e", "sglang_restart_steps_fail=maybe")
    out = bad_flag.stdout + bad_flag.stderr
    assert bad_flag.returncode != 0, out[-3000:]
    assert "Validating arguments against arg spec 'plan'" in out and "sglang_restart_steps_fail" in out, out[-3000:]
    assert "Plan the restart" not in out, out[-3000:]

    bad_rank = play_runs.play(inv, _playbook(tmp_path / "ready.yml", [
        _step("ready", vars={"sglang_restart_ready_node_rank": "first"})]))
    out = bad_rank.stdout + bad_rank.stderr
    assert bad_rank.returncode != 0, out[-3000:]
    assert "arg spec 'ready'" in out and "sglang_restart_ready_node_rank" in out, out[-3000:]
    assert "Wait until the server is ready" not in out, out[-3000:]
    assert not os.path.exists(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"]))
