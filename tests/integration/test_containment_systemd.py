"""The systemd containment backend under a real systemd: systemd 252 booted as PID 1 of a
throwaway container (tests/helpers/systemd_container.py), the emulator launched there through
_launcher.spawn with containment auto (which must pick systemd) and stopped through
_containment.stop. The cases run inside the container (tests/integration/systemd_inner.py) and
report what they saw; the assertions are here."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator

import pytest

from helpers.fixtures import ROOT, emulator_python_path
from helpers.systemd_container import SystemdContainer, available

WHY_NOT = available()


@pytest.fixture(scope="module")
def seen() -> Iterator[Dict[str, Any]]:
    assert WHY_NOT is None, "the systemd container cannot run here: %s" % WHY_NOT
    emulator = emulator_python_path()
    # the checkout and the emulator venv wherever they are (a clone under /tmp: the container's
    # /tmp is its own)
    box = SystemdContainer(binds=[ROOT, os.path.dirname(os.path.dirname(os.path.abspath(emulator)))])
    try:
        box.start()
        proc = box.run([os.path.join(ROOT, ".venv", "bin", "python"), os.path.join(ROOT, "tests", "integration",
                                                                                   "systemd_inner.py"),
                        ROOT, emulator], timeout=400, env={"PYTHONDONTWRITEBYTECODE": "1"})
        assert proc.returncode == 0, proc.stderr[-4000:]
        yield json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        box.close()


def test_auto_picks_systemd_where_pid1_is_systemd_and_the_unit_holds_the_launch(seen) -> None:
    run = seen["honours"]
    assert run["backend"] == "systemd" and run["why"].startswith("auto: PID 1 is systemd"), run["why"]
    assert run["ready"] and run["containment"] == "systemd" and run["log_has_server_output"]
    assert run["unit"].startswith("llmops-sglang-sd-") and run["unit"].endswith(".service")
    assert run["cgroup"] == run["expected_cgroup"] and run["cgroup_id_ok"]
    assert run["main_pid_is_supervisor"] and run["supervisor_parent"] == 1
    assert run["members_have_all"] and run["escaper_sid_differs"]
    assert run["escaper_title"] == seen["escaper_title"] and run["escaper_env"] == {}
    assert run["server_env_has_marker"]


def test_no_secret_in_unit_properties_supervisor_or_leftover_payload(seen) -> None:
    """Unit properties are readable by every local user over D-Bus: the API key and secret env
    values reach the server through the payload file only, which is gone once the server runs."""
    for case in ("honours", "ignores", "crashed"):
        assert not seen[case]["secret_in_unit_properties"]
        assert not seen[case]["secret_in_supervisor"]
        assert not seen[case]["payload_left"]


def test_a_running_unit_refuses_a_second_launch_of_the_instance(seen) -> None:
    problem, reason = seen["busy"]
    assert "is active" in problem and reason == "cgroup_busy"


def test_stop_terms_every_member_and_the_unit_and_its_cgroup_go(seen) -> None:
    stop = seen["honours_stop"]
    result = stop["result"]
    ended = {m["pid"]: m["ended"] for m in result["members"]}
    assert set(seen["honours"]["members"]) <= set(ended) and set(ended.values()) == {"SIGTERM"}
    assert result["changed"] and result["empty"] and result["removed"] and result["killed_with"] is None
    assert stop["alive"] == [] and not stop["cgroup_exists"] and stop["unit_state"] == "inactive"
    assert stop["port_free"]
    again = seen["honours_stop_again"]
    assert not again["changed"] and again["cgroup"] is None


def test_systemctl_kill_reaches_members_that_ignore_sigterm(seen) -> None:
    stop = seen["ignores_stop"]
    result = stop["result"]
    ended = {m["pid"]: m["ended"] for m in result["members"]}
    assert result["killed_with"] == "systemctl kill --signal=SIGKILL"
    assert set(seen["ignores"]["members"]) <= set(ended) and set(ended.values()) == {"SIGKILL"}
    assert stop["alive"] == [] and result["removed"]
    assert stop["unit_state"] == "inactive" and stop["port_free"]


def test_a_unit_that_already_died_is_nothing_to_do(seen) -> None:
    result = seen["crashed_stop"]
    assert not result["changed"] and result["members"] == [] and result["cgroup"] is None
    assert any("has no cgroup" in n for n in result["notes"])
