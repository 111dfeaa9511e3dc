# -*- coding: utf-8 -*-
"""The lines playbooks/probe.yml prints for one host's sglang_probe result: the interpreter
and its sglang, other installs, servers, ports, GPUs, /dev/shm, launch records, diagnosis.
Controller side only; one table of tests (tests/unit/test_probe_report.py) holds every branch.

    {{ sglang_probe_result | llmops.sglang.probe_report }}
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

# Indents of the list lines under each heading.
_ITEM = "  "
_DIAG = "  - "


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else []


def _cells(values: Sequence[Any], sep: str) -> str:
    return sep.join(str(v) for v in values)


def sglang_line(interp: Mapping[str, Any]) -> str:
    if interp.get("sglang_installed"):
        return "sglang: sglang %s in %s (python %s)" % (
            interp.get("sglang_version", "?"), interp.get("path", "?"), interp.get("python_version", "?"))
    return "sglang: NO sglang for %s: %s" % (interp.get("path", "?"), interp.get("error") or "not installed")


def elsewhere_lines(interpreters: Sequence[Any], interp: Mapping[str, Any]) -> List[str]:
    """Interpreters with sglang other than the one asked about (its own line says that one):
    where the operator's venv may be."""
    own = {interp.get("path"), interp.get("executable")} - {None}
    found = "; ".join("%s has sglang %s" % (i.get("python"), i.get("sglang_version"))
                      for i in map(_dict, interpreters) if i.get("python") not in own)
    return ["other installs: " + found] if found.strip() else []


def server_lines(servers: Sequence[Any]) -> List[str]:
    rows = [_ITEM + _cells([s.get("pid"), s.get("instance") or "unmanaged", s.get("listening_ports", []),
                            s.get("user", "?"), len(_list(s.get("members")))], " | ")
            for s in map(_dict, servers)]
    head = "servers (pid | instance | ports | user | processes): " + (str(len(rows)) if rows else "none")
    return [head] + rows


def port_lines(ports: Sequence[Any]) -> List[str]:
    rows = []
    for port in map(_dict, ports):
        info = _dict(port.get("server_info"))
        rows.append(_ITEM + _cells([port.get("port"), "listening" if port.get("listening") else "free",
                                    port.get("version") or "-", info.get("tp_size", "-"),
                                    info.get("model_path", "-")], " | "))
    return ["ports (port | state | version | tp_size | model):"] + rows


def gpu_lines(gpus: Mapping[str, Any]) -> List[str]:
    rows = [_ITEM + _cells([g.get("index"), g.get("memory_used_mib"), g.get("memory_total_mib"),
                            len(_list(g.get("processes")))], " ")
            for g in map(_dict, _list(gpus.get("gpus")))]
    what = ("%d (index used_MiB total_MiB processes)" % len(rows)) if rows else str(gpus.get("note", "none"))
    return ["GPUs (%s): %s" % (gpus.get("backend", "?"), what)] + rows


def shm_line(shm: Sequence[Any]) -> str:
    files = [_dict(f) for f in shm]
    held = sum(1 for f in files if f.get("held"))
    mib = round(sum(f.get("size", 0) or 0 for f in files) / 1048576, 1)
    return "shm: %d sglang files, %d held by live processes, %s MiB" % (len(files), held, mib)


def records_line(records: Sequence[Any]) -> str:
    named = ", ".join("%s=%s" % (r.get("name", "?"), "alive" if r.get("alive") else "dead")
                      for r in map(_dict, records))
    return "records: " + (named or "none")


def diagnosis_lines(diagnosis: Sequence[Any]) -> List[str]:
    return ["diagnosis:"] + ([_DIAG + str(d) for d in diagnosis] or [_ITEM + "(nothing wrong found)"])


def probe_report(result: Mapping[str, Any]) -> List[str]:
    """Every line of the probe playbook's report for one host."""
    res = _dict(result)
    interp = _dict(res.get("interpreter"))
    return ([sglang_line(interp)]
            + elsewhere_lines(_list(res.get("interpreters")), interp)
            + server_lines(_list(res.get("servers")))
            + port_lines(_list(res.get("ports")))
            + gpu_lines(_dict(res.get("gpus")))
            + [shm_line(_list(res.get("shm"))), records_line(_list(res.get("records")))]
            + diagnosis_lines(_list(res.get("diagnosis"))))


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"probe_report": probe_report}
