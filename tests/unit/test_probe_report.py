"""The probe playbook's report (plugins/filter/probe_report.py): every branch of every line."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from ansible_collections.llmops.sglang.plugins.filter import probe_report as pr

FULL: Dict[str, Any] = {
    "interpreter": {"sglang_installed": True, "sglang_version": "0.5.6", "path": "/v/bin/python",
                    "python_version": "3.12.1"},
    "interpreters": [{"python": "/a/bin/python", "sglang_version": "0.4.1"},
                     {"python": "/v/bin/python", "sglang_version": "0.5.6"}],
    "servers": [{"pid": 10, "instance": "ex", "listening_ports": [30000, 30001], "user": "root", "members": [1, 2, 3]},
                {"pid": 11, "instance": None, "listening_ports": [], "user": "bob", "members": []}],
    "ports": [{"port": 30000, "listening": True, "version": "0.5.6",
               "server_info": {"tp_size": 8, "model_path": "/m"}},
              {"port": 30001, "listening": False, "version": None, "server_info": None}],
    "gpus": {"backend": "nvml", "gpus": [{"index": 0, "memory_used_mib": 100, "memory_total_mib": 81559,
                                          "processes": [{"pid": 10}]}]},
    "shm": [{"size": 3 * 1048576, "held": True}, {"size": 555, "held": False}, {"size": 0}],
    "records": [{"name": "ex", "alive": True}, {"name": "old", "alive": False}],
    "diagnosis": ["port 30001 is free"],
}


def test_a_full_result_reads_top_to_bottom():
    assert pr.probe_report(FULL) == [
        "sglang: sglang 0.5.6 in /v/bin/python (python 3.12.1)",
        "other installs: /a/bin/python has sglang 0.4.1",
        "servers (pid | instance | ports | user | processes): 2",
        "  10 | ex | [30000, 30001] | root | 3",
        "  11 | unmanaged | [] | bob | 0",
        "ports (port | state | version | tp_size | model):",
        "  30000 | listening | 0.5.6 | 8 | /m",
        "  30001 | free | - | - | -",
        "GPUs (nvml): 1 (index used_MiB total_MiB processes)",
        "  0 100 81559 1",
        "shm: 3 sglang files, 1 held by live processes, 3.0 MiB",
        "records: ex=alive, old=dead",
        "diagnosis:",
        "  - port 30001 is free",
    ]


def test_an_empty_result_says_none_everywhere_and_nothing_wrong():
    assert pr.probe_report({}) == [
        "sglang: NO sglang for ?: not installed",
        "servers (pid | instance | ports | user | processes): none",
        "ports (port | state | version | tp_size | model):",
        "GPUs (?): none",
        "shm: 0 sglang files, 0 held by live processes, 0.0 MiB",
        "records: none",
        "diagnosis:",
        "  (nothing wrong found)",
    ]


@pytest.mark.parametrize("interp, line", [
    ({"sglang_installed": False, "path": "/x/bin/python", "error": "No module named 'sglang'"},
     "sglang: NO sglang for /x/bin/python: No module named 'sglang'"),
    ({"sglang_installed": False, "path": "/x/bin/python", "error": ""},
     "sglang: NO sglang for /x/bin/python: not installed"),
    ({"sglang_installed": True, "path": "/y/bin/python"}, "sglang: sglang ? in /y/bin/python (python ?)"),
    (None, "sglang: NO sglang for ?: not installed"),
])
def test_the_first_line_names_the_interpreter_or_why_it_has_no_sglang(interp: Any, line: str):
    assert pr.probe_report({"interpreter": interp})[0] == line


@pytest.mark.parametrize("gpus, head", [
    ({"backend": "none", "note": "no GPU backend on this host"}, "GPUs (none): no GPU backend on this host"),
    ({"backend": "nvidia-smi", "gpus": []}, "GPUs (nvidia-smi): none"),
    ({"backend": "nvml", "gpus": [{"index": 0}, {"index": 1}]}, "GPUs (nvml): 2 (index used_MiB total_MiB processes)"),
])
def test_the_gpu_heading_counts_gpus_or_gives_the_backends_note(gpus: Dict[str, Any], head: str):
    lines: List[str] = pr.gpu_lines(gpus)
    assert lines[0] == head and len(lines) == 1 + len(gpus.get("gpus", []))


def test_other_installs_only_when_there_are_some_besides_the_one_asked_about():
    asked = {"path": "/v/bin/python", "executable": "/usr/bin/python3.12"}
    assert pr.elsewhere_lines([], asked) == []
    assert pr.elsewhere_lines([{"python": "/v/bin/python", "sglang_version": "1"}], asked) == []
    assert pr.elsewhere_lines([{"python": "/usr/bin/python3.12", "sglang_version": "1"}], asked) == []
    assert pr.elsewhere_lines([{"python": "/a", "sglang_version": "1"}, {"python": "/b", "sglang_version": "2"}], {}) == [
        "other installs: /a has sglang 1; /b has sglang 2"]


def test_shm_counts_held_files_and_rounds_mib():
    assert pr.shm_line([{"size": 1572864, "held": True}, {"size": 1, "held": True}, {}]) == (
        "shm: 3 sglang files, 2 held by live processes, 1.5 MiB")


def test_a_record_without_a_name_is_still_listed():
    assert pr.records_line([{"alive": True}, {"name": "b"}]) == "records: ?=alive, b=dead"
