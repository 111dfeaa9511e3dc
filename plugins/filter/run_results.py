# -*- coding: utf-8 -*-
"""Filters hosts_failed, run_results and this_run: the restart results of THIS ansible-playbook run. The
restart reports its outcome as facts (ansible_facts.sglang_restart_failed, .sglang_restart_result), and
a persistent fact cache (fact_caching = jsonfile, redis, ...) hands them to the next run: read
as they are, a host that failed last time stopped the next run's roll before it was even tried
again, and the report showed last run's outcome for a host this run never reached. Each result
carries its run (plugin_utils/_operation_lock.run_id); only this run's count. Controller side only."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.filter.host_order import hosts_in
from ansible_collections.llmops.sglang.plugins.plugin_utils._operation_lock import run_id


def of_run(result: Any, run: str) -> bool:
    """A restart result of the run `run`. One that names no run was set by hand (set_fact, which
    no fact cache keeps) or by a collection before results carried it: taken as it is."""
    return isinstance(result, Mapping) and result.get("run", run) == run


def failed_now(facts: Any, run: str) -> bool:
    """These facts say the restart failed, in the run `run`."""
    if not isinstance(facts, Mapping) or not facts.get("sglang_restart_failed"):
        return False
    return of_run(facts.get("sglang_restart_result", {}), run)


def hosts_failed(hosts: Any, hostvars: Any, run: Optional[str] = None) -> List[str]:
    """The hosts of ``hosts`` (in their order, each once) whose restart failed in this run."""
    run = run or run_id()
    names = hosts_in(hosts, hosts)
    return [h for h in names if h in hostvars and failed_now(hostvars[h].get("ansible_facts"), run)]


def _at(value: Any, path: str) -> Any:
    """`value` followed down the dotted `path` (None where a key is missing)."""
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def this_run(result: Any, run: Optional[str] = None) -> Dict[str, Any]:
    """`result` when this run produced it (or it names no run), else {}: a reader of one host's
    restart result never takes a cached one for this run's."""
    return dict(result) if of_run(result, run or run_id()) else {}


def run_results(hosts: Any, hostvars: Any, fact: str = "ansible_facts.sglang_restart_result",
                run: Optional[str] = None) -> List[Dict[str, Any]]:
    """The restart results (at the dotted path `fact` of each host's variables) that this run
    produced, in the order of ``hosts``; a host without one of this run is left out."""
    run = run or run_id()
    out = []
    for host in hosts_in(hosts, hosts):
        result = _at(hostvars[host], fact) if host in hostvars else None
        if of_run(result, run):
            out.append(dict(result))
    return out


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"hosts_failed": hosts_failed, "run_results": run_results, "this_run": this_run}
