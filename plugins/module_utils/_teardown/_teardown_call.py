"""PRIVATE to llmops.sglang. One teardown as a module call runs it, for sglang_teardown and for
sglang_launch's `teardown` (a restart's replacement: the old server stopped and proven gone, then
the new one started, in one call under one instance lock).

`prepare` reads the options into a scope and teardown options and validates them (bad input
fails before anything is looked at); `run` plans, refuses or acts on the plan and proves the
result. The caller holds the instance lock (outside check mode).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import Scope, build_scope


@dataclass(frozen=True)
class Request:
    """A validated teardown: what it selects and how it signals, waits and cleans up."""
    scope: Scope
    opts: _teardown.Options

    @property
    def lock_timeout(self) -> float:
        """How long the instance lock is waited for: a concurrent teardown may need its timeout."""
        return max(30.0, self.opts.timeout)


def own_cmdlines() -> List[str]:
    """This module's command line as /proc shows it (what a pattern must not match)."""
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        argv = list(sys.argv)
    return [" ".join(argv), "\0".join(argv)]


def prepare(p: Mapping[str, Any], name: Optional[str], state_dir: str, gpu_backend: str) -> Request:
    """The options of _options.teardown() (with their defaults) as a validated request."""
    scope = build_scope(name, state_dir, p["ports"], p["gpus"], p["patterns"], p["sglang_processes"],
                        p["all_users"], p["protect"], p["foreign_gpu_processes"], own_cmdlines())
    opts = _teardown.Options(grace_period=p["grace_period"], timeout=p["timeout"], shm_cleanup=p["shm_cleanup"],
                             shm_dir=p["shm_dir"], purge_paths=[os.path.normpath(x) for x in p["purge_paths"]],
                             gpu_backend=gpu_backend, takeover=list(p.get("takeover") or []))
    _teardown.validate_options(opts, state_dir)
    return Request(scope=scope, opts=opts)


def run(req: Request, check_mode: bool, diff: bool, warn: Callable[[str], None]) -> Dict[str, Any]:
    """Plan, refuse or act on the plan, prove the result. What the operator must see goes to
    `warn` before anything is done; a failure is raised with its reason and the whole result
    (and the diff) as details."""
    start = time.monotonic()
    plan = _teardown.make_plan(req.scope, req.opts, check_mode=check_mode)
    try:
        _teardown.check_preconditions(plan, req.opts.takeover)
        plan_s = round(time.monotonic() - start, 3)
        for text in _teardown.purge_warnings(plan, check_mode):
            warn(text)
        if check_mode:
            result = _teardown.check_mode_result(plan)
            result["timings"] = {"plan": plan_s}
        else:
            try:
                result = _teardown.execute(plan, req.opts)
            except SglangError as exc:
                if "killed" in exc.details:
                    exc.details["timings"] = dict(plan=plan_s, **exc.details["timings"])
                    if diff:
                        exc.details["diff"] = _teardown.diff_of(plan, exc.details)
                raise
            result["timings"] = dict(plan=plan_s, **result["timings"])
        if diff:
            result["diff"] = _teardown.diff_of(plan, result)
        return result
    finally:
        plan.close()
