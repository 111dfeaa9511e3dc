# -*- coding: utf-8 -*-
"""Filters for the sglang_rolling role's decisions and words: whether a restart rolled back,
which hosts the roll leaves untouched, whether a failed host goes back into the router, why the
roll stopped (the rescue's message) and the per-host summary. Controller side only.

The role hands in the registered results and facts as they are (dicts); nothing here reads
hostvars. The words are the ones the role printed when they were Jinja, byte for byte: the
integration tests and operators' log searches match them.

    {{ {'host': inventory_hostname, ...} | llmops.sglang.rolling_summary }}
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.filter.host_order import hosts_without

_TRUE = {"yes", "on", "true", "1"}


def _bool(value: Any) -> bool:
    """Ansible's `bool` filter: a fact holds a bool, an inventory setting may hold 'yes' or 1."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)):
        return str(value).lower() in _TRUE
    return bool(value == 1)


def _d(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _changed(result: Any) -> bool:
    """Ansible's `is changed` test on a registered result (a loop's result: any item changed)."""
    result = _d(result)
    if "changed" in result:
        return bool(result.get("changed"))
    items = result.get("results")
    return isinstance(items, list) and any(isinstance(i, Mapping) and i.get("changed") for i in items)


def _or(data: Mapping[str, Any], key: str, fallback: Any) -> Any:
    """Jinja's `default()`: the key's value when the key is there (None included)."""
    return data[key] if key in data else fallback


def _int(value: Any) -> int:
    """Jinja's `int` filter: '42.23' is 42, what is no number is 0."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def _truncate(text: str, length: int) -> str:
    """Jinja's `truncate(length)` under Ansible: 5 characters of leeway, cut at a word, '...'."""
    if len(text) <= length + 5:
        return text
    return text[:length - 3].rsplit(" ", 1)[0] + "..."


def _mib(read_bytes: Any) -> str:
    return str(round(_int(read_bytes) / 1048576, 1))


def _s(value: Any) -> str:
    """Jinja's `~`: None reads 'None', a number as Python writes it."""
    return str(value)


def rolling_rolled_back(restart_result: Any, entered: Any) -> bool:
    """The restart role's verdict counts only where this roll entered the restart: its rollback
    relaunched the previous launch record and waited until it was ready (identity, not health)."""
    return _bool(entered) and _bool(_d(restart_result).get("rolled_back", False))


def rolling_untouched(hosts_all: Any, host: str, batch: Any) -> List[str]:
    """The hosts of later batches, which a roll stopped at `host` does not touch, in inventory order."""
    hosts = [str(h) for h in hosts_all or []]
    return hosts_without(hosts[hosts.index(str(host)) + 1:], batch)


def rolling_put_back(removed: Any, entered: Any, restart_result: Any, teardown_fact: Any = None) -> bool:
    """A host this run took out goes back when its server was never stopped: the restart was not
    entered, or entered but its teardown never listed targets (it failed before stopping)."""
    if not _changed(removed):
        return False
    teardown = _or(_d(restart_result), "teardown", _d(teardown_fact))
    return not _bool(entered) or not isinstance(teardown, Mapping) or "targets" not in teardown


def _rollback_where(data: Mapping[str, Any]) -> str:
    if _bool(data.get("rollback_back")):
        added = _d(data.get("added"))
        return "It answered a generation and is back in the router, healthy (%s of %s workers healthy)." % (
            _s(added.get("healthy_workers", "?")), _s(added.get("total_workers", "?")))
    if data.get("rollback_out_msg") is not None:
        return "It is left out of the router: " + _s(data["rollback_out_msg"])
    return "It is left out of the router (this run had not taken it out)."


def _failure_where(data: Mapping[str, Any]) -> str:
    url = _s(data.get("worker_url"))
    if _changed(data.get("readded")):
        return "The worker " + url + " was put back into the router (its server was not stopped)."
    if _changed(data.get("removed")) or not _bool(data.get("listed")):
        return "The worker " + url + " is left out of the router."
    return ""


def rolling_failure(data: Mapping[str, Any]) -> str:
    """The rescue's message: what failed, where the worker stands in the router, where the roll
    stops. A rolled-back host says its previous configuration serves again and what to fix."""
    data = _d(data)
    host, untouched = _s(data.get("host")), list(data.get("untouched") or [])
    after = "The roll stops here: " + (", ".join(_s(h) for h in untouched) + " not touched."
                                       if untouched else "no host after it.")
    if _bool(data.get("rolled_back")):
        restart = _d(data.get("restart"))
        what = ("the new configuration failed at '%s', and the host rolled back to its previous configuration "
                "(pid %s, the arguments and environment it ran with before)." % (
                    _s(restart.get("failed_task", "?")), _s(_d(restart.get("rollback")).get("pid", "?"))))
        parts = ["rolling restart of %s (%s) stopped:" % (host, _s(data.get("worker_url"))), what,
                 _rollback_where(data), after, "Fix the new configuration and run again."]
    else:
        msg = _s(data.get("failed_msg", "see above"))
        # the roll's own assert already names the host and the rollback: said as it is
        what = msg if msg.startswith("restart of ") else "'%s' failed: %s" % (_s(data.get("failed_task", "?")), msg)
        parts = ["rolling restart of %s stopped:" % host, what, _failure_where(data), after]
    return " ".join(p.strip() for p in parts if p.strip())


def _head(data: Mapping[str, Any]) -> str:
    check = _bool(data.get("check_mode"))
    if _bool(data.get("entered")) and not check:
        return "restarted"
    if _bool(data.get("needed")):
        return "check mode: would restart"
    if _bool(data.get("listed")):
        return "unchanged, router untouched"
    return "check mode: would add to the router" if check else "added to the router"


def _router(data: Mapping[str, Any]) -> str:
    removed, added, before = _d(data.get("removed")), _d(data.get("added")), _d(data.get("router_before"))
    out = "out in %s s" % _s(removed.get("elapsed")) if _changed(removed) else "not taken out"
    back = "back healthy in %s s" % _s(added.get("elapsed")) if _changed(added) else "no change"
    return "router: %s, %s; %s of %s workers healthy" % (
        out, back, _s(_or(added, "healthy_workers", before.get("healthy_workers"))),
        _s(_or(added, "total_workers", before.get("total_workers"))))


def _drain(drain: Mapping[str, Any]) -> str:
    if "reason" not in drain:
        return "drain: not needed"
    return "drain: %s after %s s, peak %s requests" % (
        _s(drain.get("msg")), _s(drain.get("elapsed")), _s(drain.get("peak")))


def _prewarm_ahead(job: Mapping[str, Any], waited: Mapping[str, Any]) -> str:
    """The background prewarm the previous batch started on this host, as its wait found it."""
    if "finished" not in waited or waited.get("skipped"):
        return ""
    by = "warmed ahead by " + _s(job.get("by"))
    if "resident_after_pct" not in waited:
        return by + ": not done (%s: %s)" % (_s(waited.get("reason", "?")), _s(waited.get("msg", "?")))
    stopped = " (stopped: %s)" % _s(waited.get("stopped")) if waited.get("stopped") else ""
    return by + ": resident %s%% -> %s%%, read %s MiB%s" % (
        _s(waited.get("resident_before_pct")), _s(waited["resident_after_pct"]), _mib(waited.get("read_bytes")), stopped)


def _prewarm_own(own: Mapping[str, Any]) -> str:
    """The restart role's own prewarm, right before its teardown."""
    if "resident_before_pct" in own:
        read = ("read %s MiB" % _mib(own.get("read_bytes"))
                if _int(own.get("read_bytes", 0)) > 0 else "nothing read")
        stopped = " (stopped: %s)" % _s(own.get("stopped")) if own.get("stopped") else ""
        return "before the teardown: resident %s%%, %s%s" % (_s(own["resident_before_pct"]), read, stopped)
    if "reason" in own:
        return "before the teardown: not done (%s)" % _s(own["reason"])
    return ""


def _prewarm_next(next_host: Any, started: Optional[Mapping[str, Any]]) -> str:
    """The job this host started on the next one; one that could not start is said too (the roll
    went on without it). `started` is None where the roll never reached that task."""
    if started is None:
        return ""
    if "ansible_job_id" in started:
        return "next host %s: started in the background" % _s(next_host)
    if started.get("skipped"):
        return ""
    why = started.get("module_stderr") or started.get("msg", "?")
    return "next host %s: could not start in the background (%s)" % (_s(next_host), _truncate(_s(why).strip(), 160))


def rolling_summary(data: Mapping[str, Any]) -> List[str]:
    """The lines the role prints at the end of a host's roll; the first says what happened to it."""
    data = _d(data)
    # the restart's result only when this run entered it: a persistent fact cache keeps the last
    # run's, which must not be told as this run's prewarm
    restart = _d(data.get("restart")) if data.get("entered") else {}
    own = _or(restart, "prewarm", _d(data.get("own_prewarm")))
    started = data.get("prewarm_started")
    prewarm = [p.strip() for p in (
        _prewarm_ahead(_d(data.get("prewarm_job")), _d(data.get("prewarmed"))),
        _prewarm_own(_d(own)),
        _prewarm_next(data.get("next_host"), _d(started) if started is not None else None))]
    plan = _d(data.get("plan"))
    generated = data.get("generated")
    return [
        "%s (%s): %s" % (_s(data.get("host")), _s(data.get("worker_url")), _head(data)),
        "plan: %s%s" % (_s(plan.get("reason", "-")), " (forced)" if _bool(data.get("force", False)) else ""),
        _router(data),
        _drain(_d(data.get("drain"))),
        "generate: " + ("not run" if generated is None else _s(generated)),
        "prewarm: " + ("; ".join(p for p in prewarm if p) or "none"),
    ]


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"rolling_rolled_back": rolling_rolled_back, "rolling_untouched": rolling_untouched,
                "rolling_put_back": rolling_put_back, "rolling_failure": rolling_failure,
                "rolling_summary": rolling_summary}
