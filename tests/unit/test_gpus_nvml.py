"""NVML reading against a fake pynvml: v2 memory (what nvidia-smi shows), v1 fallback, processes."""
from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _gpus

MIB = 1024 * 1024


def _fake_pynvml(with_v2: bool) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    reserved = 615 * MIB

    def get_memory_info(handle, version=None):
        if version is None:  # v1 counts the driver's reserved memory as used
            return SimpleNamespace(used=handle["used"] + reserved, total=handle["total"])
        return SimpleNamespace(used=handle["used"], total=handle["total"])

    gpus = [{"used": 0, "total": 143771 * MIB, "procs": []},
            {"used": 4706 * MIB, "total": 143771 * MIB,
             "procs": [SimpleNamespace(pid=4242, usedGpuMemory=4706 * MIB)]}]
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: len(gpus)
    mod.nvmlDeviceGetHandleByIndex = lambda i: dict(gpus[i], index=i)
    mod.nvmlDeviceGetUUID = lambda h: "GPU-%d" % h["index"]
    mod.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    mod.nvmlDeviceGetComputeRunningProcesses = lambda h: h["procs"]
    mod.nvmlDeviceGetMemoryInfo = get_memory_info
    if with_v2:
        mod.nvmlMemory_v2 = object()
    return mod


@pytest.mark.parametrize("with_v2, idle_used", [(True, 0), (False, 615)])
def test_nvml_memory_v2_matches_nvidia_smi_and_v1_falls_back(monkeypatch, with_v2, idle_used):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(with_v2))
    report = _gpus.query_gpus("nvml")
    assert report.backend == "nvml"
    assert [g.name for g in report.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert report.gpus[0].memory_used_mib == idle_used
    assert report.pids_on([1]) == {4242: {1: 4706}}
    assert report.pids_on([0]) == {}


def test_forced_backend_none_reports_a_note(monkeypatch):
    report = _gpus.query_gpus("none")
    assert report.backend == "none" and report.gpus == [] and "disabled" in report.note
