# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin sglang_restart_outcome: where the host stands at the end of a restart, checked
right before it is said.

The restart role's last step. On the host it runs sglang_ready against the instance's launch
record as it is now (a re-check: process, port owner, /server_info, health), holding the server
until `hold` seconds have passed since its ready line (a server that dies 2.5 s after it said
it was ready is not reported serving) and, once held, making it the host's last proven-good
launch (sglang_ready's promote), then gives the operation lock back when the readiness wait did
not. On the controller it feeds that check and the steps' results to the restart's
state machine (plugins/module_utils/_restart/_restart_outcome.py) and returns sglang_restart_result as a fact.
The summary is printed here, right after the check, unless a rollback is due (then the second
call, after the rollback, prints it). It never fails: the role's last task does, with a short
message, so the cause is printed once, in the summary.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Mapping, Optional

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.sglang.plugins.module_utils._readiness._ready_call import ready_line_age
from ansible_collections.llmops.sglang.plugins.module_utils._restart._restart_outcome import (
    restart_decide, restart_outcome, restart_rollback)
from ansible_collections.llmops.sglang.plugins.plugin_utils import _operation_lock as L
from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P

READY_MODULE = "llmops.sglang.sglang_ready"
HOLD_CALLS = 3  # a re-check, at most two top-ups of the hold

display = Display()


def ready_age(res: Mapping[str, Any]) -> Optional[float]:
    """Seconds since the server's ready line, from a readiness result (None when unknown): the
    module's own reading, so the hold and the lock's release_lock_after count alike."""
    return ready_line_age(res)


def hold_left(hold: float, age: Optional[float]) -> float:
    """What is left of `hold` for a server whose ready line is `age` seconds old."""
    if hold <= 0 or age is None:
        return 0.0
    return max(0.0, hold - age)


def check(execute: Callable[[Dict[str, Any]], Dict[str, Any]], args: Mapping[str, Any], hold: float,
          ready: Mapping[str, Any], promote: bool = False, release: Optional[str] = None) -> Dict[str, Any]:
    """The instance re-checked now, held until `hold` s after its ready line. `ready` (the
    readiness wait's result) estimates what is left of the hold before the first call.

    With `promote`, the server becomes the host's last proven-good launch (sglang_ready's
    `promote`) only in a call that holds it to the end of the hold: one whose settle window was
    counted from a known age of its ready line (a call returns ready only when the server
    lived through its window). A server that dies inside the hold is never promoted.

    With `release` (the operation lock's token), a call that finds the server ready and its ready
    line at least `hold` s old gives the lock back (sglang_ready's release_lock and
    release_lock_after): asked until one did. The lock is never given back inside the hold, and the
    result says it was given back whichever call did."""
    age = ready_age(ready) if ready.get("ready") else None
    settle = hold_left(hold, age)
    res: Dict[str, Any] = {}
    promoted = False
    gave_back: Optional[Mapping[str, Any]] = None
    for _call in range(HOLD_CALLS):
        ask = promote and age is not None
        # where the server is to be promoted, the lock goes back only in a call that promotes it
        # too: one that gave it back but could not promote would leave the rollback of a server
        # that a later call finds dead without the lock
        give = bool(release) and (ask or not promote)
        more = dict({"promote": True} if ask else {},
                    **({"release_lock": release, "release_lock_after": hold} if give else {}))
        res = execute(dict(args, settle=round(settle, 2), **more))
        if release and _released(res, release):
            release, gave_back = None, res["operation_lock_released"]
        promoted = promoted or (ask and bool(res.get("ready")))
        age = ready_age(res)
        if age is not None:
            res["held_since_ready"] = round(age, 1)
        settle = hold_left(hold, age)
        if not res.get("ready") or settle < 0.2:
            break
    if promote and res.get("ready") and not promoted and age is not None:
        # held, but no call could be asked to promote it (its age was unknown before): once more
        again = execute(dict(args, settle=0.0, promote=True,
                             **({"release_lock": release, "release_lock_after": hold} if release else {})))
        if release and _released(again, release):
            release, gave_back = None, again["operation_lock_released"]
        res = dict(again, held_since_ready=res.get("held_since_ready")) if again.get("ready") else again
    if gave_back is not None:
        res["operation_lock_released"] = gave_back
    return res


def lock_gone(res: Mapping[str, Any]) -> bool:
    """sglang_lock state=absent left this run's lock gone: it removed it, or there was none to
    remove (`not_held`: an earlier call of this run, one that raised after giving it back, did) -
    never "still held" for a lock that no longer exists. Another holder's lock (`kept`) is not."""
    return not res.get("failed") and (bool(res.get("changed")) or res.get("reason") == "not_held")


def _released(res: Mapping[str, Any], token: Optional[str]) -> bool:
    """The call gave back the lock of `token`."""
    done = res.get("operation_lock_released")
    return bool(token) and isinstance(done, Mapping) and bool(done.get("changed")) and done.get("token") == token


class ActionModule(ActionBase):
    """Re-checks the instance, releases the lock, tells where the host stands."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False
    _VALID_ARGS = frozenset(("data", "check", "hold", "release_lock", "final", "previous", "wait_timeout"))

    def _run_module(self, name: str, args: Dict[str, Any], task_vars: Dict[str, Any]) -> Dict[str, Any]:
        return self._execute_module(module_name=name, module_args=args, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self._task.args
        data = dict(args.get("data") or {})
        previous = args.get("previous")
        if args.get("final") and isinstance(previous, Mapping) and isinstance(previous.get("steps"), Mapping):
            data.update(previous["steps"])  # the rollback's tasks registered under the steps' names since
        try:
            spec = args.get("check")
            if isinstance(spec, Mapping) and spec.get("name"):
                dec = restart_decide(data)
                # the restart's server becomes the last proven-good launch (what a later rollback
                # restores) only here, once it held past the hold; never the rollback's (final)
                promote = dec["promote_due"] and not args.get("final")
                # the lock this run still holds goes back in the check's own call once the server
                # held past the hold; a server that dies inside it keeps the lock for its rollback
                # (given back by the final call, after the rollback)
                token = dec["release_token"] if dec["release_at_end"] and not args.get("final") else None
                spec = {k: v for k, v in spec.items() if v is not None}
                if dec["proven"] and args.get("wait_timeout") is not None:
                    # the check stands in for the readiness wait: a busy or briefly stalled server
                    # gets the wait's time, not the short re-check's, before it is called not ready
                    spec["timeout"] = args["wait_timeout"]
                live = check(lambda a: self._run_module(READY_MODULE, a, task_vars),
                             spec, float(args.get("hold") or 0), data.get("ready") or {}, promote, token)
                data["live"] = {k: v for k, v in live.items() if k not in ("log_tail", "log_events")}
                data["lock_released"] = _released(live, token)
            due = restart_rollback(data)["due"] and not args.get("final")
            lock = args.get("release_lock")
            # only a lock this run still holds (not a --check run, not given back by the readiness
            # wait or the check): decided here, from the same data, instead of the role's Jinja
            if isinstance(lock, Mapping) and lock.get("name") and not due and not data.get("lock_released") \
                    and restart_decide(data)["release_at_end"]:
                released = self._run_module(L.LOCK_MODULE, {
                    "name": lock["name"], "state_dir": lock.get("state_dir"), "state": "absent",
                    "holder": L.holder(task_vars)}, task_vars)
                data["lock_released"] = lock_gone(released)
                if released.get("failed"):
                    display.warning("the operation lock was not released: %s" % released.get("msg"))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        out = restart_outcome(data)
        out["rollback_due"] = due
        out["at"] = time.strftime("%Y-%m-%d %H:%M:%S")  # when it was checked (the controller's clock)
        out["run"] = L.run_id()  # which run: a persistent fact cache keeps this result for the next
        self._verbose_always = False
        if not due:
            self._show(out["summary"])
        if self._verbose_always:
            result["_ansible_verbose_always"] = True
        result.update(changed=False, msg=out["summary"],
                      ansible_facts={"sglang_restart_result": out, "sglang_restart_failed": bool(out["failed"]),
                                     "sglang_restart_teardown": out["teardown"]})
        return result

    def _show(self, lines) -> None:
        """The summary, one plain line each, for people; a machine callback reads `msg`."""
        if P.progress_wanted(P.stdout_callback_name(), os.environ):
            for line in lines:
                display.display(line)
            return
        self._verbose_always = True
