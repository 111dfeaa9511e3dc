"""PRIVATE to llmops.sglang. sglang_launch's `teardown`: a replacement in one call.

_launch_exec runs it after the launch's preflight passed and under the instance lock: the
options validated here (with the launch's own paths kept out of the purge), the port's holders
read with the old server still running (a holder the launch would refuse refuses before
anything is stopped), then the teardown engine (_teardown_call), whose failure starts nothing.
Imported only by a call that has `teardown` (a plan's call does not import the engine).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_restore
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._launch._launch_request import Request


def _launch_paths(req: Request) -> List[str]:
    """What the launch needs after the teardown: model, venv, interpreter, log and state dirs."""
    paths = [req.state_dir, req.log_dir]
    if os.path.isabs(req.pf.model_path or ""):
        paths.append(req.pf.model_path)
    interp = req.pf.interp
    if interp is not None:
        paths.append(interp.path)
        if interp.venv:
            paths.append(interp.venv)
    return [os.path.realpath(p) for p in paths]


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def request(req: Request) -> _teardown_call.Request:
    """The validated teardown; a purge path that holds (or lies in) what the launch needs is
    refused, before any lock is taken or anything is stopped."""
    stop = _teardown_call.prepare(req.params["teardown"], req.name, req.state_dir, req.params["gpu_backend"])
    needed = _launch_paths(req)
    for purge in stop.opts.purge_paths:
        clash = [p for p in needed if _overlaps(os.path.realpath(purge), p)]
        if clash:
            raise SglangError("purge path %s overlaps %s, which the launch needs after the teardown"
                              % (purge, ", ".join(clash)), reason="bad_purge_path", path=purge)
    return stop


def foreign_on_teardown_ports(req: "Request", stop: _teardown_call.Request,
                              facts: _launch_plan.Facts) -> _launch_plan.Facts:
    """The teardown stops every listener of its ports: a foreign one (neither this instance nor
    an sglang server of this user) on a port other than the launch's own - which `gather`
    judged already - obeys the same foreign_port_holders policy, before anything is stopped.
    The facts with the refusal in their preflight errors, or as they were."""
    report = _preflight.Report()
    own = facts.record if facts.running else None
    for port in sorted(set(stop.scope.ports) - {req.pf.port}):
        _preflight.check_foreign_holders(report, port, _preflight.port_holders(port, own),
                                         req.params["foreign_port_holders"])
    if not report.checks:
        return facts
    kept = req.pf.report
    kept.checks.extend(report.checks)
    kept.warnings.extend(report.warnings)
    if not report.errors:
        return facts
    kept.errors.extend(report.errors)
    return dataclasses.replace(facts, preflight_errors=tuple(kept.errors), preflight_reason=kept.reason())


def restore_runs(req: "Request", record: Optional[Mapping[str, Any]]) -> bool:
    """A restore whose last-good launch is the recorded, live one: nothing to stop."""
    return req.restored is not None and _launch_restore.still_running(req.restored, record)


def run_first(stop: _teardown_call.Request, check_mode: bool, diff: bool,
              warn: Callable[[str], None]) -> Dict[str, Any]:
    """The teardown's result; its failure fails the launch with the teardown's reason and its
    result under `teardown` (failed; changed when it signalled anything), nothing started."""
    try:
        return _teardown_call.run(stop, check_mode, diff, warn)
    except SglangError as exc:
        reason = exc.details.get("reason") or "teardown_failed"
        details = dict(exc.details, failed=True, msg=exc.msg, reason=reason)
        acted = bool(details.get("killed") or details.get("survivors") or details.get("signals"))
        raise SglangError("teardown before the launch failed: %s; nothing was started" % exc.msg, reason=reason,
                          teardown=details, changed=acted and not check_mode) from None


def merge(result: Dict[str, Any], diff: bool) -> None:
    """The call's `changed` and `diff` with the teardown's: changed when either changes something
    (check mode decides on what runs now, which the teardown would stop); the teardown's diff
    first (Ansible shows a list of diffs in order)."""
    done = result.get("teardown")
    if not isinstance(done, dict):
        return
    if done.get("changed"):
        result["changed"] = True
    own = done.pop("diff", None)
    if diff and own:
        result["diff"] = [own] + ([result["diff"]] if result.get("diff") else [])
