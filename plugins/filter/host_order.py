# -*- coding: utf-8 -*-
"""Filters hosts_in and hosts_without: set arithmetic on host lists that keeps the first list's
order. ansible-core's difference/union/intersect filters go through a Python set, so a roll's
"w2, w3 not touched" came out as "w3, w2" under some hash seeds; the order of a roll's hosts is
the order the operator wrote in the inventory, and every message names them that way.
Controller side only."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List


def _names(value: Any, what: str) -> List[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError("%s needs a list of host names, got %s" % (what, type(value).__name__))
    return [str(h) for h in value]


def _pick(hosts: Any, others: Any, keep: bool, what: str) -> List[str]:
    wanted = set(_names(others, what))
    out: List[str] = []
    for host in _names(hosts, what):
        if (host in wanted) == keep and host not in out:
            out.append(host)
    return out


def hosts_in(hosts: Any, others: Any) -> List[str]:
    """The hosts of ``hosts`` that are also in ``others``, in the order of ``hosts``, each once."""
    return _pick(hosts, others, True, "hosts_in")


def hosts_without(hosts: Any, others: Any) -> List[str]:
    """The hosts of ``hosts`` that are not in ``others``, in the order of ``hosts``, each once."""
    return _pick(hosts, others, False, "hosts_without")


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"hosts_in": hosts_in, "hosts_without": hosts_without}
