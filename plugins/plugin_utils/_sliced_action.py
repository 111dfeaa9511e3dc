# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PRIVATE to llmops.sglang (controller side). The action plugin of a module whose wait only
observes (sglang_ready, sglang_drain): it runs the module in slices of `slice_seconds`, each one
resuming the state the previous one returned, and prints one line per host between slices and
one at the end. The verdict, the timeout and the result are those of one uninterrupted call.
`slice_seconds: 0` (or async) runs the module in one call. A subclass names its module and
says what its lines read.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P

display = Display()


class SlicedAction(ActionBase):
    """Runs MODULE in slices and shows each host's progress between them."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    MODULE = ""
    SLICE_ENV = ""
    VERDICT_KEY = ""  # the module's boolean verdict: false on a refused slice_seconds

    def label(self, args: Mapping[str, Any]) -> str:
        """What the task works on (`extraction`): the line reads `<host> <label>: ...`."""
        raise NotImplementedError

    def progress_text(self, res: Mapping[str, Any]) -> str:
        """The line for a slice that ended before a verdict."""
        raise NotImplementedError

    def final_text(self, final: Mapping[str, Any]) -> Optional[str]:
        """The closing line, or None for none."""
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        try:
            seconds = P.slice_seconds(args, os.environ, self.SLICE_ENV)
        except ValueError as exc:
            return dict(result, failed=True, msg=str(exc), reason="invalid_argument", changed=False,
                        **{self.VERDICT_KEY: False})
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        if wrap_async or seconds == 0:
            res = self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars,
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
        who = P.host_label(task_vars, self._play_context.remote_addr, self.label(args))
        resume: Dict[str, Any] = {}
        while True:
            res = self._execute_module(module_name=self.MODULE, task_vars=task_vars,
                                       module_args=dict(args, slice_seconds=seconds, _resume=resume))
            state = res.get("resume_state")
            if res.get("failed") or not res.get("pending") or not isinstance(state, dict):
                break
            resume = state
            if show:
                display.display("%s: %s" % (who, self.progress_text(res)))
        final = P.as_single_call(res, args)
        line = self.final_text(final) if show else None
        if line:
            display.display("%s: %s" % (who, line))
        return final
