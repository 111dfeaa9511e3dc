# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sglang_ready: live progress on the controller while a server starts.

A start takes minutes, and one silent task cannot tell "loading shard 31/64" from "hung". This
plugin runs the module in slices of `slice_seconds`: each slice goes on from the state the
previous one returned (the log byte it reached, what the log said so far, the proofs already
held) and answers `pending` when it ends before a verdict. Between slices it prints one line
per host, `gpu-07 extraction: loading weights 31/64 shards (2m05s, 48% of the last start's
time)`, and at the end `... ready in 4m12s`. The verdict, the timeout (counted from the first
slice) and the result are those of one uninterrupted module call.

Lines go to the display only for a human stdout callback (see plugin_utils/_progress_display).
`slice_seconds: 0` (or async) runs the module in one call, as without this plugin.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.llmops.sglang.plugins.module_utils import _progress
from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P

MODULE = "llmops.sglang.sglang_ready"
SLICE_ENV = "LLMOPS_SGLANG_READY_SLICE_SECONDS"

display = Display()


def instance_label(args: Mapping[str, Any]) -> str:
    record = args.get("record")
    name = args.get("name") or (record.get("name") if isinstance(record, Mapping) else None)
    return str(name or "sglang")


class ActionModule(ActionBase):
    """Runs sglang_ready in slices and shows each host's progress between them."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        try:
            seconds = P.slice_seconds(args, os.environ, SLICE_ENV)
        except ValueError as exc:
            return dict(result, failed=True, msg=str(exc), reason="invalid_argument", ready=False, changed=False)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        if wrap_async or seconds == 0:
            res = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars,
                                       wrap_async=wrap_async)
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return merge_hash(result, res)
        try:
            res = self._sliced(args, seconds, task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return merge_hash(result, res)

    def _sliced(self, args: Dict[str, Any], seconds: float, task_vars: Dict[str, Any]) -> Dict[str, Any]:
        show = P.progress_wanted(P.stdout_callback_name(), os.environ)
        who = P.host_label(task_vars, self._play_context.remote_addr, instance_label(args))
        resume: Dict[str, Any] = {}
        while True:
            res = self._execute_module(module_name=MODULE, task_vars=task_vars,
                                       module_args=dict(args, slice_seconds=seconds, _resume=resume))
            state = res.get("resume_state")
            if res.get("failed") or not res.get("pending") or not isinstance(state, dict):
                break
            resume = state
            if show:
                display.display("%s: %s" % (who, _progress.progress_line(
                    res.get("progress") or {}, res.get("since_launch"), res.get("last_start_seconds"))))
        final = P.as_single_call(res, args)
        if show and final.get("ready"):
            display.display("%s: %s" % (who, _progress.ready_line(
                final.get("start_seconds"), final.get("last_start_seconds"), bool(final.get("slow_start")),
                bool(final.get("already_running")))))
        return final
