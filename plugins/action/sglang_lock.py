# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sglang_lock: the controller half of the operation lock.

Adds the controller's identity to the module's arguments and, when the module refuses because
of a recorded holder, judges the holder here (plugin_utils/_operation_lock): provably gone ->
a second module call takes the lock over; alive or another controller's -> refused.
"""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils import _operation_lock as L

MODULE = L.LOCK_MODULE


class ActionModule(ActionBase):
    """Adds the controller's identity, judges a refusing holder, takes over a gone one."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False
    # gpu_backend, api_key: the action group's shared options (module_defaults), unused by the lock
    _VALID_ARGS = frozenset(("name", "state_dir", "state", "ttl", "force", "token", "gpu_backend", "api_key"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        # (gpu_backend, api_key: the group's options, of no use to the lock: not sent to the host)
        args = {k: v for k, v in self._task.args.items() if k not in ("gpu_backend", "api_key")}
        args["holder"] = L.holder(task_vars)

        def execute(takeover):
            return self._execute_module(module_name=MODULE, module_args=dict(args, **(takeover or {})),
                                        task_vars=task_vars)
        try:
            res = L.run(execute, args["holder"]["controller"], args["name"], args.get("ttl"), args.get("state_dir"),
                        task_vars.get("inventory_hostname", "the host"))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(res)
        return result
