"""sglang_launch's `teardown` against the emulator: a replacement in one call stops the running
server and proves it gone, then launches - only after the launch's own preflight passed; check
mode and bad teardown options stop nothing.

Scoped to this test's instance: the teardown selects by launch record and the test's port
(sglang_processes off); every server started here is stopped after the test (fixture `launched`).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, unique_name, wait_for

REPLACE = unique_name("replace")  # its own instance name: cgroups and teardowns go by name

READY = "The server is fired up and ready to roll!"
EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}


def _args(emulator_python: str, model: str, state_dir: str, log_dir: str, port: int, **extra: Any) -> Dict[str, Any]:
    venv = os.path.dirname(os.path.dirname(emulator_python))
    args = {"name": REPLACE, "venv": venv, "model_path": model, "port": port, "state_dir": state_dir,
            "log_dir": log_dir, "gpu_backend": "none", "env": dict(EMU_ENV), "lock_timeout": 10,
            "args": {"mem-fraction-static": 0.8}}
    args.update(extra)
    return args


def _teardown(port: int, **extra: Any) -> Dict[str, Any]:
    spec = {"ports": [port], "sglang_processes": False, "grace_period": 5, "timeout": 15}
    spec.update(extra)
    return spec


def _alive(result: Dict[str, Any]) -> bool:
    return _procs.is_alive(result["pid"], result["record"]["start_time"])


def test_teardown_option_replaces_the_running_server_in_one_call(emulator_python, model_dir, state_dir, log_dir,
                                                                 launched):
    port = free_port()
    base = _args(emulator_python, model_dir, state_dir, log_dir, port)
    first = run_module("sglang_launch", base)
    assert first["_rc"] == 0, first.get("msg")
    launched.append(first["record"])
    assert wait_for(lambda: READY in open(first["log_path"]).read(), 20)
    changed = dict(base, args={"mem-fraction-static": 0.7})

    # check mode: the teardown's plan (the old server among its targets), nothing stopped
    plan = run_module("sglang_launch", dict(changed, teardown=_teardown(port)), check_mode=True)
    assert plan["_rc"] == 0, plan.get("msg")
    assert plan["changed"] and plan["reason"] == "config_changed"
    assert first["pid"] in [pid for step in plan["teardown"]["signals"] for pid in step["pids"]]
    assert _alive(first)

    # a refused preflight stops nothing (and runs no teardown)
    refused = run_module("sglang_launch", dict(changed, args={"mem-fraction-statik": 0.7}, teardown=_teardown(port)))
    assert refused["_rc"] != 0 and refused["reason"] == "preflight_failed" and "teardown" not in refused
    # bad teardown options stop nothing either
    bad = run_module("sglang_launch", dict(changed, teardown=_teardown(port, grace_period=-1)))
    assert bad["_rc"] != 0 and bad["reason"] == "bad_option" and "grace_period" in bad["msg"]
    assert _alive(first)

    # the replacement: the old server stopped and proven gone, then the new one launched
    new = run_module("sglang_launch", dict(changed, teardown=_teardown(port)))
    assert new["_rc"] == 0, new.get("msg")
    launched.append(new["record"])
    td = new["teardown"]
    assert td["changed"] and not td["survivors"] and not td["errors"]
    assert td["record_removed"] and td["ports_after"] == [] and "failed" not in td
    assert not _alive(first)
    assert new["changed"] and new["reason"] == "new" and new["pid"] != first["pid"]
    assert new["record"]["launch_id"] != first["record"]["launch_id"]
    assert wait_for(lambda: READY in open(new["log_path"]).read(), 20)
    assert _alive(new)
    on_disk = json.load(open(os.path.join(state_dir, REPLACE + ".json")))
    assert on_disk["launch_id"] == new["record"]["launch_id"] and "0.7" in on_disk["argv"]
