"""What an operator must see is an Ansible warning (`warnings`, shown without -v): GPUs that could
not be read, tp_size not checked against GPUs, a model path taken for a hub id, and every
preflight warning of the launch."""
from __future__ import annotations

import os

from helpers.fixtures import free_port, run_module
from helpers.warnings import warnings_of


def _launch(emulator_python, tmp_path, **args):
    base = {"venv": os.path.dirname(os.path.dirname(emulator_python)), "model_path": "org/model",
            "port": free_port(), "tp_size": 2, "state_dir": str(tmp_path / "state"),
            "log_dir": str(tmp_path / "logs"), "gpu_backend": "auto"}
    base.update(args)
    return run_module("sglang_launch", base, check_mode=True, env={"LLMOPS_SGLANG_GPU_BACKEND": "auto"})


def test_launch_warns_about_a_hub_id_and_refuses_gpus_it_cannot_check(emulator_python, tmp_path):
    # This host has neither NVML nor nvidia-smi: with the GPU check on, a check that cannot run
    # refuses (before a restart stops anything), and the warnings still come with the failure.
    res = _launch(emulator_python, tmp_path, args={"log-level": "warning"}, allow_log_level_warning=True)
    assert res.get("failed") is True and res["reason"] == "preflight_failed", res
    assert "GPUs cannot be checked" in res["msg"] and "tp_size 2" in res["msg"], res["msg"]
    warnings = warnings_of(res)
    assert any("org/model" in w and "treated as a hub id" in w for w in warnings), warnings
    assert any("hides" in w for w in warnings), warnings  # a preflight warning is a warning too
    assert res["preflight"]["warnings"][0] in warnings


def test_launch_warnings_also_come_with_a_failure(emulator_python, tmp_path):
    res = _launch(emulator_python, tmp_path, port=70000, gpu_check=False)
    assert res.get("failed") is True, res
    assert any("treated as a hub id" in w for w in warnings_of(res)), res


def test_no_gpu_warning_when_the_operator_turned_the_check_off(emulator_python, tmp_path):
    for args in ({"gpu_backend": "none"}, {"gpu_check": False}):
        res = _launch(emulator_python, tmp_path, model_path=str(tmp_path), **args)
        assert not any("GPUs not checked" in w or "hub id" in w for w in warnings_of(res)), res


def test_probe_warns_when_gpus_cannot_be_read(tmp_path):
    res = run_module("sglang_probe", {"gpu_backend": "auto", "state_dir": str(tmp_path / "state"),
                                      "shm_dir": str(tmp_path / "shm")}, env={"LLMOPS_SGLANG_GPU_BACKEND": "auto"})
    assert res["_rc"] == 0, res
    assert any(w.startswith("GPUs not checked") for w in warnings_of(res)), res.get("warnings")
    quiet = run_module("sglang_probe", {"gpu_backend": "none", "state_dir": str(tmp_path / "state"),
                                        "shm_dir": str(tmp_path / "shm")})
    assert not any("GPUs not checked" in w for w in warnings_of(quiet))
