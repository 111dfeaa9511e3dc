# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sglang_router: the module without the servers' api key.

`module_defaults` on the llmops.sglang.sglang action group give every module of the group the
servers' `api_key`, this one included, and a router task usually runs elsewhere than the servers
(`delegate_to` the router's host). The module never uses that key (the router's own is
`router_api_key`); this plugin keeps it out of the module's payload, so it never reaches the
router's host at all.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

from ansible.plugins.action import ActionBase

MODULE = "llmops.sglang.sglang_router"
# the group's options this module has no use for (accepted so that module_defaults never fail it)
UNUSED = ("api_key", "gpu_backend", "state_dir")


def module_args(args: Mapping[str, Any]) -> Dict[str, Any]:
    """The task's arguments as the module gets them: without the group options it ignores."""
    return {k: v for k, v in args.items() if k not in UNUSED}


class ActionModule(ActionBase):
    """Runs sglang_router with its own arguments only."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        try:
            result.update(self._execute_module(module_name=MODULE, module_args=module_args(self._task.args),
                                               task_vars=task_vars or {}))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
