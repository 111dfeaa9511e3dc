# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sglang_lock: the controller half of the operation lock.

Only the controller knows which ansible-playbook process runs the play, and only the
controller can tell whether the process named in a left-over lock is still alive. This plugin
adds that identity to the module's arguments, and when the module refuses because of a
recorded holder, judges the holder here: provably gone (same controller, pid dead or reused,
controller rebooted) -> a second module call takes the lock over (compare-and-swap on its
token); alive -> refused; another controller -> refused with holder and age until `ttl`.
"""
from __future__ import annotations

import multiprocessing
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.module_utils import _lock

MODULE = "llmops.sglang.sglang_lock"


def _controller_pid() -> int:
    """The ansible-playbook process: the parent this worker was forked from (a task runs in
    a forked worker), or this process when there is no worker."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return os.getpid()
    if os.getppid() != parent.pid:
        raise AnsibleActionFail("the ansible-playbook process (pid %d) that started this task is gone" % parent.pid)
    return parent.pid


def _refusal(name: str, host: str, res: dict, verdict: str, why: str, ttl: float, args: dict) -> str:
    who = res.get("holder_text") or _lock.describe_holder(res.get("holder") or {}, res.get("age"))
    head = "instance %r on %s is locked by %s: %s. Nothing was changed." % (name, host, who, why)
    if verdict == "alive":
        return head + " Wait for that run to finish, or stop it."
    if verdict == "self":
        return head + (" Two inventory hosts of this run act on the same instance of one machine;"
                       " give each its own instance name or state_dir.")
    state_dir = args.get("state_dir")
    release = "name=%s%s state=absent force=true" % (name, " state_dir=%s" % state_dir if state_dir else "")
    stale = ("it counts as stale after %d s (ttl)" % ttl) if ttl and ttl > 0 else "no ttl is set"
    return head + (" This controller cannot check whether that run is alive; %s. If it is gone, release"
                   " the lock: ansible %s -m %s -a '%s'" % (stale, host, MODULE, release))


class ActionModule(ActionBase):
    """Adds the controller's identity, judges a refusing holder, takes over a gone one."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False
    _VALID_ARGS = frozenset(("name", "state_dir", "state", "ttl", "force", "token"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        me = _lock.controller_identity(_controller_pid())
        args["holder"] = {"controller": me, "play": task_vars.get("ansible_play_name"),
                          "inventory_host": task_vars.get("inventory_hostname")}
        try:
            res = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
            if res.get("failed") and res.get("reason") == "locked" and isinstance(res.get("holder"), dict):
                res = self._judge(res, args, me, task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(res)
        return result

    def _judge(self, res: dict, args: dict, me: dict, task_vars: dict) -> dict:
        holder = res["holder"]
        verdict, why = _lock.judge_holder(holder, me)
        try:
            ttl = float(args.get("ttl") or 0)
        except (TypeError, ValueError):
            ttl = 0.0
        reason = _lock.takeover_reason(verdict, why, float(res.get("age") or 0.0), ttl)
        if reason is None:
            host = task_vars.get("inventory_hostname", "the host")
            res.update(verdict=verdict, msg=_refusal(args["name"], host, res, verdict, why, ttl, args))
            return res
        retry = dict(args, takeover=_lock.lock_id(holder), takeover_reason=reason)
        return self._execute_module(module_name=MODULE, module_args=retry, task_vars=task_vars)
