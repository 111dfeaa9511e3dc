"""Every documented inventory setting reaches its module through the real playbooks, whichever of
its names the inventory uses: the public `sglang_<setting>` (docs/roles.md, "Settings") or the
role-prefixed variable, which wins for its role. What the play cannot honour is named in a
warning; an old name works and says its new one."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

import yaml

from helpers import play_runs
from helpers.fixtures import ROOT, free_port

CALLBACKS = os.path.join(ROOT, "tests", "integration", "progress_callbacks")


def _run(inv: str, playbook: str, *extra: str) -> Dict[str, Any]:
    """The run's task results, through the tests' one-document `json` stdout callback."""
    env = dict(play_runs.env(), ANSIBLE_CALLBACK_PLUGINS=CALLBACKS, ANSIBLE_STDOUT_CALLBACK="json")
    import subprocess

    proc = subprocess.run(play_runs.argv(inv, playbook, list(extra)), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=420, stdin=subprocess.DEVNULL, check=False)
    assert proc.stdout.strip().startswith("{"), (proc.stdout + proc.stderr)[-3000:]
    doc = json.loads(proc.stdout)
    failed = [(t["task"], r.get("msg")) for t in doc["tasks"] for r in t["hosts"].values() if r["_status"] == "failed"]
    # the warnings: on stderr (ansible-core < 2.19), or in the task's result for its callback (2.19)
    said = [str(w) for t in doc["tasks"] for r in t["hosts"].values() for w in
            (r.get("warnings") or []) + (r.get("deprecations") or [])]
    return {"rc": proc.returncode, "doc": doc, "stderr": proc.stderr + "\n".join(said), "why": "%s %s" % (failed, proc.stderr[-2000:])}


def _module_args(run: Dict[str, Any], task_fragment: str) -> Dict[str, Any]:
    found: List[Dict[str, Any]] = [
        r["invocation"]["module_args"] for t in run["doc"]["tasks"] if task_fragment in t["task"]
        for r in t["hosts"].values() if r.get("invocation")]
    assert found, "no run of %r in %s" % (task_fragment, [t["task"] for t in run["doc"]["tasks"]])
    return found[0]


def _inventory(tmp_path, **extra: Any) -> str:
    hv = play_runs.host_vars(str(tmp_path), "h1", **extra)
    return play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})


def test_public_names_reach_the_plan_and_its_teardown(tmp_path):
    purge = tmp_path / "purge"
    purge.mkdir()
    extra_port = free_port()
    inv = _inventory(tmp_path, sglang_grace_period=7, sglang_stop_timeout=31, sglang_foreign_gpu_processes="ignore",
                     sglang_sweep_sglang_processes=False, sglang_purge_paths=[str(purge)], sglang_extra_ports=[extra_port],
                     sglang_foreign_port_holders="kill", sglang_min_free_mb=7, sglang_spawn_timeout=29, sglang_keep_logs=3,
                     sglang_tp_size=2, sglang_gpu_check=False, sglang_clear_cache=True)
    run = _run(inv, "restart_serving.yml", "--check")
    assert run["rc"] == 0, run["why"]
    plan = _module_args(run, "Plan the restart")
    hv = yaml.safe_load(open(inv))["all"]["children"]["gpu_8x"]["hosts"]["h1"]
    assert (plan["name"], plan["port"], plan["tp_size"], plan["keep_logs"]) == (hv["sglang_name"], hv["sglang_port"], 2, 3)
    assert (plan["foreign_port_holders"], plan["min_free_mb"], plan["spawn_timeout"], plan["gpu_check"]) == ("kill", 7, 29, False)
    # (sglang_cache_dir: a directory under the sticky /tmp is refused by design; its own tests)
    assert (plan["state_dir"], plan["log_dir"]) == (hv["sglang_state_dir"], hv["sglang_log_dir"])
    stop = plan["teardown"]
    assert (stop["grace_period"], stop["timeout"], stop["foreign_gpu_processes"], stop["sglang_processes"]) == (
        7, 31, "ignore", False)
    assert stop["ports"] == [hv["sglang_port"], extra_port] and stop["purge_paths"] == [str(purge)]
    assert stop["clear_cache"] is True and stop["gpus"] == []


def test_role_prefixed_names_win_for_their_role_and_the_unhonoured_ones_are_named(tmp_path):
    inv = _inventory(tmp_path, sglang_restart_foreign_port_holders="kill", sglang_foreign_port_holders="fail",
                     sglang_restart_grace_period=9, sglang_restart_args={"x": 1}, sglang_restart_grace_perod=3,
                     sglang_stop_grace_period=4)
    run = _run(inv, "restart_extraction.yml", "--check")
    assert run["rc"] == 0, run["why"]
    plan = _module_args(run, "Plan the restart")
    assert plan["foreign_port_holders"] == "kill" and plan["teardown"]["grace_period"] == 9
    assert "x" not in plan["args"]  # the extraction playbook's own args
    err = " ".join(run["stderr"].split())
    assert "sglang_restart_args in the inventory is ignored: the play sets it itself; set sglang_args" in err, err
    assert "sglang_restart_grace_perod in the inventory is not a variable of llmops.sglang.sglang_restart" in err, err
    assert "sglang_stop_grace_period is deprecated: set sglang_grace_period instead" in err, err
    for reached in ("sglang_restart_foreign_port_holders", "sglang_restart_grace_period in"):
        assert reached not in err, err


def test_the_old_name_alone_still_works(tmp_path):
    inv = _inventory(tmp_path, sglang_stop_grace_period=4)
    data = yaml.safe_load(open(inv))
    data["all"]["children"]["gpu_8x"]["vars"].pop("sglang_grace_period")  # the demo inventory's
    with open(inv, "w") as fh:
        yaml.safe_dump(data, fh)
    run = _run(inv, "teardown.yml", "--check")
    assert run["rc"] == 0, run["why"]
    assert _module_args(run, "Tear down the SGLang instance")["grace_period"] == 4
    err = " ".join(run["stderr"].split())
    assert "sglang_stop_grace_period is deprecated: set sglang_grace_period instead" in err, err
    assert "both are set" not in err


def test_the_teardown_playbook_reads_the_public_names_and_its_role_variables(tmp_path):
    extra_port = free_port()
    inv = _inventory(tmp_path, sglang_grace_period=6, sglang_extra_ports=[extra_port], sglang_teardown_timeout=33,
                     sglang_takeover=["other"], sglang_teardown_gpu_backend="none")
    run = _run(inv, "teardown.yml", "--check")
    assert run["rc"] == 0, run["why"]
    args = _module_args(run, "Tear down the SGLang instance")
    hv = yaml.safe_load(open(inv))["all"]["children"]["gpu_8x"]["hosts"]["h1"]
    assert (args["name"], args["state_dir"]) == (hv["sglang_name"], hv["sglang_state_dir"])
    assert args["ports"] == [hv["sglang_port"], extra_port]
    assert (args["grace_period"], args["timeout"], args["takeover"]) == (6, 33, ["other"])
    assert "warning" not in run["stderr"].lower(), run["stderr"]
