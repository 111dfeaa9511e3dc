"""PRIVATE to llmops.sglang. What sglang_launch does, decided from facts read beforehand.

`decide(facts)` is pure: it reads no process, file or socket, so every branch is table-tested
in-process (tests/unit/test_launch_plan.py). _launch_exec gathers the facts - the preflight, the
launch record, the port's holders and, only where `wants_probe` / `wants_containment_check` say
the decision depends on them, the HTTP probe and the instance cgroup - and carries the decision
out: a spawn, or a failure raised with the decision's reason.

Actions: `noop` (the requested server runs and answers), `launch` (start one; in check mode
only reported), `relaunch` (check mode: something holds the instance's place - another
configuration, a hung server, a busy port or cgroup - and a restart's teardown must clear it
first), `refuse` (the same outside check mode, or a failed preflight: the task fails, nothing
is stopped).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight

NOOP = "noop"
LAUNCH = "launch"
RELAUNCH = "relaunch"
REFUSE = "refuse"

_STOP_FIRST = ("; stop it first with sglang_teardown, or give sglang_launch `teardown` - without it sglang_launch "
               "never stops a server")

Holder = Mapping[str, Any]


@dataclass(frozen=True)
class Facts:
    """Everything the decision depends on; nothing here is read by the plan itself."""
    name: str
    host: str
    port: Optional[int]                          # the validated port (None: the preflight refused it)
    check_mode: bool
    fingerprint: Optional[str] = None            # of the requested server
    inputs: Optional[Mapping[str, Any]] = None   # its fingerprint inputs, secrets masked
    record: Optional[Mapping[str, Any]] = None   # the instance's launch record, if any
    running: bool = False                        # the recorded server is alive (pid and start time)
    port_state: str = "free"                     # free | instance | busy (_preflight.check_port)
    holders: Tuple[Holder, ...] = ()             # every listener on the port, labelled
    preflight_errors: Tuple[str, ...] = ()
    preflight_reason: str = "preflight_failed"   # _preflight.Report.reason()
    probe: Optional[Mapping[str, Any]] = None    # the running server's HTTP probe when it did not answer
    cgroup_problem: Optional[str] = None         # why the instance cgroup/unit refuses a launch


@dataclass(frozen=True)
class Decision:
    """What launch does, why, and what the result reports about it."""
    action: str                                  # noop | launch | relaunch | refuse
    reason: str                                  # the module's RV(reason)
    message: str                                 # the module's RV(decision)
    failure: Optional[str] = None                # refuse: the task's failure message
    blockers: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()               # added to the preflight warnings
    changes: Optional[Tuple[Mapping[str, Any], ...]] = None   # config_changed: what differs
    probe: Optional[Mapping[str, Any]] = None    # unresponsive: the probe that got no answer
    current: Optional[Mapping[str, Any]] = None  # the running server's record, reported as is
    port_holder: Tuple[Holder, ...] = ()         # listeners on the port that are not this instance
    diff: Mapping[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.action in (LAUNCH, RELAUNCH)


def wants_probe(f: Facts) -> bool:
    """Does the decision depend on whether the running server answers HTTP? Only for the same
    configuration, listening on its port (one that does not listen yet is still starting)."""
    return bool(not f.preflight_errors and f.running and f.record
                and f.record.get("fingerprint") == f.fingerprint and f.port_state == "instance"
                and isinstance(f.record.get("port"), int))


def wants_containment_check(f: Facts) -> bool:
    """Does the decision depend on the instance cgroup (or unit)? Only for a launch that nothing
    else refuses first."""
    return not f.preflight_errors and not f.running and f.port_state != "busy"


def decide(f: Facts) -> Decision:
    """A failed preflight refuses; a running instance is kept, or must be replaced; otherwise a
    free port and cgroup mean a launch."""
    others = tuple(h for h in f.holders if not h.get("instance"))
    common: Dict[str, Any] = {"port_holder": others, "diff": diff_of(f, others)}
    if f.preflight_errors:
        msg = "preflight failed: " + "; ".join(f.preflight_errors)
        return Decision(REFUSE, f.preflight_reason, msg, failure=msg, **common)
    if f.running and f.record:
        return _running(f, f.record, others, common)
    return _not_running(f, others, common)


def _running(f: Facts, record: Mapping[str, Any], others: Tuple[Holder, ...], common: Dict[str, Any]) -> Decision:
    pid = record.get("pid")
    blockers: Tuple[str, ...] = ()
    if others:
        blockers = ("port %s is also held by %s" % (f.port, _preflight.describe_holders(list(others))),)
    if record.get("fingerprint") == f.fingerprint:
        if f.probe is None:
            warnings: Tuple[str, ...] = ()
            if others:
                warnings = ("instance %r is running but port %s is also held by %s" % (
                    f.name, record.get("port"), _preflight.describe_holders(list(others))),)
            return Decision(NOOP, "running", "instance %r is running (pid %s) with the requested configuration: "
                            "nothing to do" % (f.name, pid), blockers=blockers, warnings=warnings, current=record,
                            **common)
        stopped = ", stopped (state T)" if f.probe.get("state") == "T" else ""
        tries = f.probe.get("attempts") or 1
        within = "within %s s" % _num(f.probe.get("timeout"))
        if tries > 1:  # retried: a stall of one request is no unresponsive server
            within = "in %d attempts of %s s each (%s s in all)" % (
                tries, _num(f.probe.get("timeout")), _num(round(float(f.probe.get("seconds") or 0), 1)))
        msg = ("instance %r (pid %s%s) runs the requested configuration but did not answer %s %s: "
               "it must be replaced" % (f.name, pid, stopped, f.probe.get("endpoint"), within))
        return _replace(f, "unresponsive", msg, msg + _STOP_FIRST, blockers, current=record, probe=f.probe, **common)
    changes = tuple(_cliargs.diff_inputs(record.get("fingerprint_inputs"), f.inputs or {}))
    summary = ", ".join("%s: %r -> %r" % (c["key"], c["before"], c["after"]) for c in changes)
    msg = "instance %r is running (pid %s) with another configuration (%s)" % (f.name, pid, summary)
    return _replace(f, "config_changed", msg, msg + _STOP_FIRST, blockers, current=record, changes=changes, **common)


def _not_running(f: Facts, others: Tuple[Holder, ...], common: Dict[str, Any]) -> Decision:
    if f.port_state == "busy":
        msg = "port %s on %s is held by %s" % (f.port, f.host, _preflight.describe_holders(list(others)))
        failure = "%s; sglang_launch stops nothing without `teardown` - run sglang_teardown with ports: [%s] or choose " \
                  "another port" % (msg, f.port)
        return _replace(f, "port_busy", msg, failure, (msg,), **common)
    if f.cgroup_problem:
        return _replace(f, "cgroup_busy", f.cgroup_problem, f.cgroup_problem + "; stop it first with sglang_teardown",
                        (f.cgroup_problem,), **common)
    msg = "%s: a server %s started" % ("no launch record" if not f.record else "the recorded server is gone",
                                       "would be" if f.check_mode else "was")
    return Decision(LAUNCH, "not_running" if f.record else "new", msg, **common)


def _replace(f: Facts, reason: str, msg: str, failure: str, blockers: Tuple[str, ...], **rest: Any) -> Decision:
    """Something holds the instance's place: check mode plans its replacement (a restart's
    teardown clears it); a real launch fails, since it stops nothing itself (`teardown`, when given,
    ran before these facts were read)."""
    if f.check_mode:
        return Decision(RELAUNCH, reason, msg, blockers=blockers, **rest)
    return Decision(REFUSE, reason, msg, failure=failure, blockers=blockers, **rest)


def diff_of(f: Facts, others: Tuple[Holder, ...]) -> Dict[str, str]:
    """Fingerprint inputs of the running server (if any) and of the requested one; the other
    holders of the port head the 'before' side - what a restart would stop."""
    before = f.record.get("fingerprint_inputs") if (f.record and f.running) else None
    holders = "".join("# port holder: %s\n" % _preflight.describe_holder(h) for h in others)
    return {"before": holders + _cliargs.inputs_text(before), "after": _cliargs.inputs_text(f.inputs),
            "before_header": "running server", "after_header": "requested server"}


def record_containment(record: Mapping[str, Any]) -> Dict[str, Any]:
    """The containment a record says its launch has (a record from before containment: none)."""
    backend = record.get("containment") or "none"
    why = record.get("containment_why")
    if "containment" not in record:
        why = "the launch record predates containment (record version %s): its server is found by the " \
              "launch record, session, marker and titles" % record.get("record_version", 1)
    return {"backend": backend, "why": why, "cgroup": record.get("cgroup"), "unit": record.get("unit")}


def _num(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return ("%d" % number) if number.is_integer() else ("%g" % number)
