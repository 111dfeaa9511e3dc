"""sglang_teardown of a contained instance: the cgroup is the member list, stopped and removed.

The instances are the emulator launched through _launcher.spawn with containment cgroup (what
auto chooses on this host), behind the wrapper of test_containment that starts a worker which
escapes every heuristic (double fork, setsid, new title, no environment, no descriptors).
"""
from __future__ import annotations

import os
from typing import Any, Dict

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers.fixtures import free_port, run_module

# launched is a fixture: pytest finds it by its name in this module's namespace.
from integration.test_containment import (  # noqa: F401  # pylint: disable=unused-import
    _assert_escaped, _escaper, _launch, _port_free, _spec, launched)


def _teardown(rec: Dict[str, Any], port: int, check_mode: bool = False) -> Dict[str, Any]:
    return run_module("sglang_teardown", {"name": rec["name"], "state_dir": rec["state_dir"], "ports": [port],
                                          "gpus": [], "sglang_processes": False, "gpu_backend": "none",
                                          "grace_period": 15, "timeout": 15}, check_mode=check_mode)


def test_teardown_stops_the_cgroup_with_its_escaped_worker_and_removes_it(emulator_python, tmp_path, launched):
    port = free_port()
    rec = _launch(_spec(emulator_python, tmp_path, port), launched, tmp_path, port)
    escaper = _escaper(tmp_path)
    _assert_escaped(escaper, rec)
    members = _cgroup.members(rec["cgroup"])

    result = _teardown(rec, port)

    assert result["_rc"] == 0, result.get("msg")
    assert result["changed"]
    assert result["containment"]["cgroup"] == rec["cgroup"] and result["containment"]["removed"]
    assert not os.path.exists(rec["cgroup"])
    assert not _procs.is_alive(escaper) and _port_free(port)
    killed = {k["pid"]: k for k in result["killed"]}
    assert set(members) <= set(killed) and killed[escaper]["signal"] == "SIGTERM"
    assert any(s["kind"] == "cgroup" and s["id"] == rec["cgroup"] for s in result["signals"])
    # members come from the cgroup, not from record heuristics
    assert not any(s["kind"] == "group" and s["id"] == rec["pgid"] for s in result["signals"])

    again = _teardown(rec, port)
    assert again["_rc"] == 0, again.get("msg")
    assert not again["changed"] and again["killed"] == []


def test_check_mode_lists_the_cgroup_step_and_changes_nothing(emulator_python, tmp_path, launched):
    port = free_port()
    rec = _launch(_spec(emulator_python, tmp_path, port), launched, tmp_path, port)
    escaper = _escaper(tmp_path)
    members = _cgroup.members(rec["cgroup"])

    result = _teardown(rec, port, check_mode=True)

    assert result["_rc"] == 0, result.get("msg")
    assert result["changed"]
    steps = [s for s in result["signals"] if s["kind"] == "cgroup"]
    assert steps == [{"signal": "SIGTERM", "kind": "cgroup", "id": rec["cgroup"], "pids": sorted(members)}]
    assert escaper in steps[0]["pids"]
    # the record's own pids are listed through the cgroup step only
    assert not any(s["kind"] != "cgroup" and rec["pid"] in s["pids"] for s in result["signals"])
    assert _procs.is_alive(escaper) and sorted(_cgroup.members(rec["cgroup"])) == sorted(members)
