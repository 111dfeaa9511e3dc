# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PRIVATE to llmops.sglang (controller side). The controller half of the operation lock,
shared by the action plugins of sglang_lock and sglang_launch (whose plan can take the lock in
the same module call).

Only the controller knows which ansible-playbook process runs the play, and only the
controller can tell whether the process named in a left-over lock is still alive. `holder`
is that identity for the module's arguments; `run` calls the module and, when it refuses
because of a recorded holder, judges the holder here: provably gone (same controller, pid dead
or reused, controller rebooted) -> a second module call takes the lock over (compare-and-swap
on its token); alive -> refused; another controller -> refused with holder and age until `ttl`.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
from typing import Any, Callable, Dict, Mapping, Optional

from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

LOCK_MODULE = "llmops.sglang.sglang_lock"

# (None, or the takeover arguments of a holder judged gone) -> the module's result
Execute = Callable[[Optional[Dict[str, str]]], Dict[str, Any]]


def _controller_pid() -> int:
    """The ansible-playbook process: the parent this worker was forked from (a task runs in
    a forked worker), or this process when there is no worker."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return os.getpid()
    if os.getppid() != parent.pid:
        raise AnsibleActionFail("the ansible-playbook process (pid %d) that started this task is gone" % parent.pid)
    return parent.pid


def run_id() -> str:
    """This ansible-playbook run: the controller, the process's pid and its start time, and a
    nonce of the run (a digest of multiprocessing's authentication key: random per
    ansible-playbook process, inherited by the workers it forks), so that a reused pid differs
    also where there is no /proc to read a start time from. What a run's results carry, so that
    one kept by a persistent fact cache is never taken for this run's."""
    pid = _controller_pid()
    nonce = hashlib.sha256(bytes(multiprocessing.current_process().authkey)).hexdigest()[:12]
    return "%s:%d:%s:%s" % (os.uname().nodename, pid, _lock.process_start(pid), nonce)


def holder(task_vars: Mapping[str, Any]) -> Dict[str, Any]:
    """Who takes the lock: this controller's ansible-playbook, the play and the inventory host."""
    return {"controller": _lock.controller_identity(_controller_pid()), "play": task_vars.get("ansible_play_name"),
            "inventory_host": task_vars.get("inventory_hostname")}


def _refusal(name: str, host: str, res: Mapping[str, Any], verdict: str, why: str, ttl: float,
             state_dir: Optional[str]) -> str:
    who = res.get("holder_text") or _lock.describe_holder(res.get("holder") or {}, res.get("age"))
    head = "instance %r on %s is locked by %s: %s. Nothing was changed." % (name, host, who, why)
    if verdict == "alive":
        return head + " Wait for that run to finish, or stop it."
    if verdict == "self":
        return head + (" Two inventory hosts of this run act on the same instance of one machine;"
                       " give each its own instance name or state_dir.")
    release = "name=%s%s state=absent force=true" % (name, " state_dir=%s" % state_dir if state_dir else "")
    stale = "no ttl is set"
    if ttl and ttl > 0:
        after = _lock.stale_after(res.get("holder") or {}, ttl)
        stale = "it counts as stale after %d s without a refresh (%s)" % (
            after, "ttl" if after == ttl else "the lifetime its holder recorded")
    return head + (" This controller cannot check whether that run is alive; %s. If it is gone, release"
                   " the lock: ansible %s -m %s -a '%s'" % (stale, host, LOCK_MODULE, release))


def _ttl(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def refused(res: Mapping[str, Any]) -> bool:
    """The module refused because someone holds the lock (a holder it could read)."""
    return bool(res.get("failed")) and res.get("reason") == "locked" and isinstance(res.get("holder"), dict)


def judge(res: Dict[str, Any], me: Mapping[str, Any], name: str, ttl: Any, state_dir: Optional[str],
          host: str) -> Optional[Dict[str, str]]:
    """A refusal judged on the controller: the takeover arguments (`takeover`, `takeover_reason`)
    when the holder is provably gone or older than `ttl`; else None, and `res` says why."""
    current = res["holder"]
    verdict, why = _lock.judge_holder(current, dict(me))
    seconds = _ttl(ttl)
    reason = _lock.takeover_reason(verdict, why, float(res.get("age") or 0.0), seconds,
                                   lifetime=_ttl(current.get("lifetime")))  # the holder's own, when longer
    if reason is None:
        res.update(verdict=verdict, msg=_refusal(name, host, res, verdict, why, seconds, state_dir))
        return None
    return {"takeover": _lock.lock_id(current), "takeover_reason": reason}


def run(execute: Execute, me: Mapping[str, Any], name: str, ttl: Any, state_dir: Optional[str],
        host: str) -> Dict[str, Any]:
    """The module's call (`execute(None)`); when it refuses because of a holder this controller
    judges gone, once more with the takeover (`execute(takeover)`)."""
    res = execute(None)
    if refused(res):
        takeover = judge(res, me, name, ttl, state_dir, host)
        if takeover is not None:
            res = execute(takeover)
    return res
