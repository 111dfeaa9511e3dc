"""With the GPU check on, a GPU check that cannot run (no NVML, no nvidia-smi) refuses the launch
- and so a restart's plan, before anything is stopped - instead of a warning after which the old
server was stopped for a tp_size this host may not have (in-process)."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight

NOTHING = _gpus.GpuReport("none", [], "nvidia-ml-py (pynvml) is not importable; nvidia-smi not found")


@pytest.fixture
def no_gpu_backend(monkeypatch):
    monkeypatch.delenv(_gpus.ENV_BACKEND, raising=False)
    monkeypatch.setattr(_gpus, "query_gpus", lambda backend: NOTHING)


@pytest.mark.parametrize("backend", ["auto", "nvml", "nvidia-smi"])
def test_a_check_that_cannot_run_refuses(no_gpu_backend, backend):
    report = _preflight.Report()
    _preflight.check_gpus(report, 8, backend, {}, {})
    assert len(report.errors) == 1 and report.reason() == "preflight_failed", report.checks
    msg = report.errors[0]
    assert msg.startswith("GPUs cannot be checked (nvidia-ml-py (pynvml) is not importable; nvidia-smi not found")
    assert "tp_size 8 needs GPUs that nothing on this host can count (gpu_backend %s)" % backend in msg
    assert "gpu_check: false" in msg and "gpu_backend: none" in msg


def test_turned_off_it_is_a_note(no_gpu_backend, monkeypatch):
    for args in (("none", True), ("auto", False)):
        report = _preflight.Report()
        _preflight.check_gpus(report, 8, args[0], {}, {}, enabled=args[1])
        assert not report.errors and report.checks[0]["status"] == "note"
    monkeypatch.setenv(_gpus.ENV_BACKEND, "none")  # auto deferring to the environment's none
    report = _preflight.Report()
    _preflight.check_gpus(report, 8, "auto", {}, {})
    assert not report.errors and report.checks[0]["status"] == "note"
