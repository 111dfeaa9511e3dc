"""A full log (or state) filesystem fails the launch preflight, before anything is stopped.

The restart role plans with `sglang_launch` in check mode; a plan that fails stops nothing. Each
case mounts a small tmpfs of its own (root only), fills it, and unmounts it afterwards.
"""
from __future__ import annotations

import os
from typing import Iterator

import pytest

from helpers import tmpfs
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, unique_name

NOSPACE = unique_name("nospace")  # its own instance name: cgroups and teardowns go by name

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}


@pytest.fixture
def mounts() -> Iterator[list]:
    paths: list = []
    yield paths
    for path in reversed(paths):
        tmpfs.unmount(path)


def _args(emulator_python: str, model_dir: str, state_dir: str, log_dir: str, **extra):
    args = {"name": NOSPACE, "venv": os.path.dirname(os.path.dirname(emulator_python)),
            "model_path": model_dir, "port": free_port(), "state_dir": state_dir, "log_dir": log_dir,
            "gpu_backend": "none", "env": dict(EMU_ENV)}
    args.update(extra)
    return args


def test_full_log_dir_fails_the_plan_and_the_launch(emulator_python, model_dir, tmp_path, mounts):
    logs = str(tmp_path / "logs")
    tmpfs.mount_private(logs, "size=64k")
    mounts.append(logs)
    tmpfs.fill(logs)
    args = _args(emulator_python, model_dir, str(tmp_path / "state"), logs)

    plan = run_module("sglang_launch", args, check_mode=True)
    assert plan["_rc"] != 0 and plan["reason"] == "no_space", plan
    assert "log_dir %s" % logs in plan["msg"] and "MiB free" in plan["msg"], plan["msg"]
    assert "min_free_mb" in plan["msg"]

    failed = run_module("sglang_launch", args)
    assert failed["_rc"] != 0 and failed["reason"] == "no_space"
    assert not os.path.exists(os.path.join(str(tmp_path / "state"), NOSPACE + ".json"))
    assert os.listdir(logs) == ["filler"]

    # The floor is a setting: with min_free_mb 0 a full filesystem passes.
    lowered = run_module("sglang_launch", dict(args, min_free_mb=0), check_mode=True)
    assert lowered["_rc"] == 0 and lowered["reason"] == "new", lowered


def test_full_state_dir_names_state_dir_and_tmpdir(emulator_python, model_dir, tmp_path, mounts):
    state = str(tmp_path / "state")
    tmpfs.mount_private(state, "size=64k")
    mounts.append(state)
    tmpfs.fill(state)
    plan = run_module("sglang_launch", _args(emulator_python, model_dir, state, str(tmp_path / "logs")),
                      check_mode=True)
    assert plan["_rc"] != 0 and plan["reason"] == "no_space", plan["preflight"]["errors"]
    assert "state_dir %s" % state in plan["msg"]
    # TMPDIR <state_dir>/<name>.tmp does not exist yet: its nearest existing ancestor is measured
    assert "tmpdir %s/%s.tmp (measured at %s)" % (state, NOSPACE, state) in plan["msg"], plan["msg"]


def test_log_dir_without_free_inodes_fails_the_plan(emulator_python, model_dir, tmp_path, mounts):
    logs = str(tmp_path / "logs")
    tmpfs.mount_private(logs, "size=16m,nr_inodes=64")
    mounts.append(logs)
    plan = run_module("sglang_launch", _args(emulator_python, model_dir, str(tmp_path / "state"), logs),
                      check_mode=True)
    assert plan["_rc"] != 0 and plan["reason"] == "no_space", plan
    assert "inodes free" in plan["msg"] and "min_free_inodes" in plan["msg"]
