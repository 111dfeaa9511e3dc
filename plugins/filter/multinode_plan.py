# -*- coding: utf-8 -*-
"""The decisions and messages of playbooks/restart_multinode.yml (one SGLang server over every
host of a group): each rank's place and arguments, which ranks are locked, whether the group is
replaced, which ranks failed, and the lines the play prints. Controller side only; the play
passes its hosts, ``hostvars`` and registered results in, and one table of tests
(tests/unit/test_multinode_plan.py) holds every branch.

    sglang_mn: "{{ sglang_mn_hosts | llmops.sglang.multinode_rank(inventory_hostname, hostvars[sglang_mn_hosts[0]], ...) }}"
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible.utils.vars import merge_hash

from ansible_collections.llmops.sglang.plugins.plugin_utils._hostport import hostport, port_number

# sglang_lock's reasons when this run holds the lock; any other reason means another run holds it
# (or it could not be written).
_OURS = ("taken", "taken_over", "held")
# The failing log lines printed per rank: enough for a traceback's end, short enough to read.
_LINES_SHOWN = 15


def _int(value: Any) -> int:
    """Jinja's ``int`` filter: a number, a numeric string, a float string, else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _vars(hostvars: Mapping[str, Any], host: str) -> Mapping[str, Any]:
    try:
        return _dict(hostvars[host])
    except KeyError:
        return {}


def _combine(*dicts: Any) -> Dict[str, Any]:
    """``a | combine(b) | combine(c)``: later keys win (ansible-core's own merge, not recursive)."""
    out: Any = {}
    for d in dicts:
        out = merge_hash(out, {} if d is None else d, recursive=False)
    return dict(out)


def _failed(result: Any) -> bool:
    return bool(_dict(result).get("failed"))


def _changed(result: Any) -> bool:
    return bool(_dict(result).get("changed"))


def dist_init_addr(host: Any, port: Any) -> str:
    """host:port of the rendezvous; an IPv6 address is bracketed once (also when the inventory
    wrote it bracketed), or its colons would read as the port's."""
    return hostport(host, port)


def multinode_rank(hosts: Sequence[str], host: str, head_vars: Mapping[str, Any], port: Any,
                   args: Optional[Mapping[str, Any]] = None, multinode_args: Optional[Mapping[str, Any]] = None,
                   env: Optional[Mapping[str, Any]] = None, nccl_env: Optional[Mapping[str, Any]] = None,
                   multinode_env: Optional[Mapping[str, Any]] = None, extra_ports: Optional[Sequence[Any]] = None
                   ) -> Dict[str, Any]:
    """This rank's place in the server: rank (inventory order), nnodes, rendezvous, server args, env
    and the ports its teardown frees. The rendezvous comes from rank 0's variables (``head_vars``)
    so that every rank computes the same address."""
    hosts = list(hosts)
    rank = hosts.index(host)
    head = hosts[0]
    head_vars = _dict(head_vars)
    dist_host = head_vars.get("sglang_multinode_dist_init_host", head_vars.get("ansible_host", head))
    dist_port = port_number(head_vars.get("sglang_multinode_dist_init_port", 50000))
    addr = dist_init_addr(dist_host, dist_port)
    # what makes the ranks one server is set last: no inventory args can split them
    server_args = _combine(args, multinode_args, {"nnodes": len(hosts), "node-rank": rank, "dist-init-addr": addr})
    # rank 0 also frees the rendezvous port: an old rank 0's listener there would refuse the new one
    ports = [_int(port)] + ([dist_port] if rank == 0 else []) + [_int(p) for p in (extra_ports or [])]
    return {"host": host, "rank": rank, "nnodes": len(hosts), "head": head, "dist_host": dist_host,
            "dist_port": dist_port, "dist_init_addr": addr, "args": server_args,
            "env": _combine(env, nccl_env, multinode_env), "teardown_ports": ports}


def multinode_locked(hosts: Sequence[str], hostvars: Mapping[str, Any], name: str) -> Dict[str, Any]:
    """The ranks whose lock this run could not take (``sglang_mn_lock``; a skipped lock task is no
    lock) and the message that refuses the group."""
    locked: List[str] = []
    msgs: List[str] = []
    for host in hosts:
        hv = _vars(hostvars, host)
        if "sglang_mn_lock" not in hv:
            continue
        lock = _dict(hv["sglang_mn_lock"])
        if "skipped" in lock or lock.get("reason") in _OURS:
            continue
        locked.append(host)
        msgs.append(str(lock.get("msg", "?")))
    msg = "%s is locked on %s: %s. Nothing was stopped on any rank." % (name, ", ".join(locked), " | ".join(msgs))
    return {"hosts": locked, "msg": msg}


def multinode_decide(hosts: Sequence[str], hostvars: Mapping[str, Any], force: Any, name: str,
                     addr: str) -> Dict[str, Any]:
    """One server: when any rank's plan (``sglang_launch_result``, registered by the restart role's
    entry point ``plan``) changes, or ``force``, every rank is replaced. ``reasons`` is each rank's
    plan reason, ``msg`` the plan line."""
    plans = [_vars(hostvars, h).get("sglang_launch_result") for h in hosts]
    changing = any(_changed(p) for p in plans if p is not None) or bool(force)
    reasons = {h: _dict(p).get("reason", "?") for h, p in zip(hosts, plans)}
    msg = "%s: %s (%d nodes, dist-init-addr %s; per rank: %s)" % (
        name, "replace every rank" if changing else "unchanged", len(hosts), addr, reasons)
    return {"changing": changing, "reasons": reasons, "msg": msg}


def multinode_all_ok(hosts: Sequence[str], hostvars: Mapping[str, Any], key: str) -> bool:
    """Every host has the result ``key`` (a skipped one counts) and none failed: the next wait
    can succeed. A rank that never got there would leave the others waiting for the rendezvous
    until the startup timeout."""
    return all(key in _vars(hostvars, h) and not _failed(_vars(hostvars, h)[key]) for h in hosts)


def failure_lines(result: Mapping[str, Any]) -> List[Any]:
    """The decisive log lines of a failed step, else its log tail (a list, or one string)."""
    decisive = result.get("decisive_lines")
    if decisive:
        return list(decisive)
    tail = result.get("log_tail")
    if isinstance(tail, str):
        return tail.splitlines()
    # a step without a log (a teardown, a refused launch) has no lines
    return list(tail or [])


def multinode_failure(result: Mapping[str, Any], rank: Any, task: Any) -> Dict[str, Any]:
    """What the rescue remembers of this rank's failed step (``ansible_failed_result``)."""
    result = _dict(result)
    return {"rank": _int(rank), "task": task, "msg": result.get("msg", "?"), "reason": result.get("reason", ""),
            "lines": failure_lines(result)}


def failure_message(hosts: Sequence[str], hostvars: Mapping[str, Any], failed_hosts: Sequence[str],
                    name: str, group: str) -> str:
    text = "multi-node server %s on '%s' failed; every rank was torn down.\n" % (name, group)
    for host in failed_hosts:
        f = _dict(_vars(hostvars, host).get("sglang_mn_failure"))
        what = "failed at %s: %s" % (f.get("task", ""), f.get("msg", "")) if f else "unreachable or stopped by an earlier error"
        text += "%s (rank %d): %s\n" % (host, list(hosts).index(host), what)
        text += "".join("    | %s\n" % (line,) for line in list(f.get("lines") or [])[-_LINES_SHOWN:])
    if not failed_hosts:
        text += "rank 0 was never checked: a rank >= 1 did not come up."
    return text


def multinode_verdict(hosts: Sequence[str], hostvars: Mapping[str, Any], play_hosts: Sequence[str],
                      name: str, group: str) -> Dict[str, Any]:
    """All or nothing. ``failed_hosts``: ranks that failed (``sglang_mn_failure``) or left the play
    (unreachable, or an error outside the block), in inventory order. ``failed`` (meaningful
    outside check mode, where nothing waited): a rank failed, or rank 0's readiness was never
    checked - the group is torn down and ``msg`` says why."""
    active = set(play_hosts)
    failed_hosts = [h for h in hosts if "sglang_mn_failure" in _vars(hostvars, h) or h not in active]
    head_ready = _vars(hostvars, hosts[0]).get("sglang_ready_result") if hosts else None
    rank0_waited = head_ready is not None and not _dict(head_ready).get("skipped")
    failed = bool(failed_hosts) or not rank0_waited
    msg = failure_message(hosts, hostvars, failed_hosts, name, group) if failed else ""
    return {"failed_hosts": failed_hosts, "rank0_waited": rank0_waited, "failed": failed, "msg": msg}


def multinode_summary(mn: Mapping[str, Any], name: str, own: Mapping[str, Any]) -> str:
    """The rank's last line: its pid, its readiness reason and the rendezvous. ``own`` is the
    rank's hostvars: the launch (``sglang_launch_result``, the plan's where nothing was launched),
    the plan kept as ``sglang_mn_plan``, rank 0's wait (``sglang_ready_result``) and the others'
    (kept as ``sglang_mn_ready_peer``)."""
    own = _dict(own)
    launch = own.get("sglang_launch_result")
    if _changed(launch):
        pid = "launched pid %s" % (_dict(launch).get("pid", "?"),)
    else:
        pid = "running pid %s" % (_dict(_dict(own.get("sglang_mn_plan")).get("record")).get("pid", "?"),)
    ready = own.get("sglang_ready_result" if mn["rank"] == 0 else "sglang_mn_ready_peer")
    return "%s rank %s/%s on %s: %s, ready (%s), dist-init-addr %s" % (
        name, mn["rank"], mn["nnodes"], mn["host"], pid, _dict(ready).get("reason", "?"), mn["dist_init_addr"])


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"multinode_rank": multinode_rank, "multinode_locked": multinode_locked,
                "multinode_decide": multinode_decide, "multinode_all_ok": multinode_all_ok,
                "multinode_failure": multinode_failure, "multinode_verdict": multinode_verdict,
                "multinode_summary": multinode_summary}
