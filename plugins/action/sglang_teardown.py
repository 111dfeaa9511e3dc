# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sglang_teardown: what the teardown will wait for, and what each phase did.

A teardown can wait for minutes (the grace period after SIGTERM, the timeout after SIGKILL, GPU
memory being released). Before the module runs, one line per host says when SIGKILL comes to
what ignores SIGTERM; after it, one line per phase says what happened (SIGTERM, SIGKILL,
verification, files). The module runs in ONE call: a teardown is not sliced, because its
guarantees live in one process - the pidfds it signals through (per call: a resumed call would
have to trust pids again), the per-instance lock (released between calls, so a launch could
interleave), the descriptors of the directories it empties. Lines read `gpu-07 extraction
teardown: SIGTERM ended 11 of 12 processes in 3.2s` (the word `teardown` keeps them apart from the
readiness lines of the same instance). Lines are printed only for a human
stdout callback (see plugin_utils/_progress_display); the result is the module's, untouched.
"""
from __future__ import annotations

import os
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P
from ansible_collections.llmops.sglang.plugins.plugin_utils import _settings as S
from ansible_collections.llmops.sglang.plugins.plugin_utils import _teardown_lines as L

MODULE = "llmops.sglang.sglang_teardown"

display = Display()


class ActionModule(ActionBase):
    """Runs sglang_teardown once, with a line before and a line per phase after; says which
    inventory settings it cannot honour when the task names its role (plugin_utils/_settings)."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        S.show(S.notes_for_task(task_vars.get("__sglang_settings_role"), task_vars, self._templar.template), display)
        args = dict(self._task.args)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        show = not self._task.async_val and P.progress_wanted(P.stdout_callback_name(), os.environ)
        who = P.host_label(task_vars, self._play_context.remote_addr, L.what(args) + " teardown")
        check_mode = bool(self._play_context.check_mode)
        if show and not check_mode and L.args_valid(args):
            display.display("%s: %s" % (who, L.before_line(args, time.time())))
        try:
            res = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars,
                                       wrap_async=wrap_async)
        finally:
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
        if show and "killed" in res:  # a failure before any signal (bad input, refusal) says it all
            for line in L.phase_lines(res, check_mode, args.get("ports")):
                display.display("%s: %s" % (who, line))
        return merge_hash(result, res)
