"""NVML reading against a fake pynvml: v2 memory (what nvidia-smi shows), v1 fallback, processes."""
from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus

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


def _fake_smi(tmp_path, monkeypatch, gpu_rows, app_rows) -> None:
    import os
    import stat
    fake = tmp_path / "nvidia-smi"

    def echo(rows) -> str:
        return "; ".join("printf '%%s\\n' '%s'" % r for r in rows) or "true"
    fake.write_text("#!/bin/sh\ncase \"$1\" in\n--query-gpu*) %s;;\n--query-compute-apps*) %s;;\nesac\n"
                    % (echo(gpu_rows), echo(app_rows)), encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("LC_ALL", "C.UTF-8")


def test_nvidia_smi_rows_with_non_ascii_digits_are_skipped(tmp_path, monkeypatch):
    # str.isdigit accepts "\u00b2" (int() then raised out of query_gpus, which must never raise)
    # and "\u0663" (read as pid 3): only ASCII digits are a pid or an index.
    _fake_smi(tmp_path, monkeypatch, ["0, GPU-a, NVIDIA H200, 10, 143771", "\u00b9, GPU-b, NVIDIA H200, 0, 143771"],
              ["4242, 900, GPU-a", "\u00b2, 5, GPU-a", "\u0663, 5, GPU-a", "[N/A], [N/A], GPU-a"])
    report = _gpus.query_gpus("nvidia-smi")
    assert report.backend == "nvidia-smi" and [g.index for g in report.gpus] == [0]
    assert report.pids_on() == {4242: {0: 900}}
