# -*- coding: utf-8 -*-
"""Filter hosts_failed: the hosts whose restart failed in THIS ansible-playbook run. The restart
reports its outcome as facts (ansible_facts.sglang_restart_failed, .sglang_restart_result), and
a persistent fact cache (fact_caching = jsonfile, redis, ...) hands them to the next run: read
as they are, a host that failed last time stopped the next run's roll before it was even tried
again. Each result carries its run (plugin_utils/_operation_lock.run_id); only this run's count.
Controller side only."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.filter.host_order import hosts_in
from ansible_collections.llmops.sglang.plugins.plugin_utils._operation_lock import run_id


def failed_now(facts: Any, run: str) -> bool:
    """These facts say the restart failed, in the run `run`."""
    if not isinstance(facts, Mapping) or not facts.get("sglang_restart_failed"):
        return False
    result = facts.get("sglang_restart_result")
    return isinstance(result, Mapping) and result.get("run") == run


def hosts_failed(hosts: Any, hostvars: Any, run: Optional[str] = None) -> List[str]:
    """The hosts of ``hosts`` (in their order, each once) whose restart failed in this run."""
    run = run or run_id()
    names = hosts_in(hosts, hosts)
    return [h for h in names if h in hostvars and failed_now(hostvars[h].get("ansible_facts"), run)]


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"hosts_failed": hosts_failed}
