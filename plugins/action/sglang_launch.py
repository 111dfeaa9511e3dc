# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sglang_launch: the controller half of its `operation_lock`.

Without `operation_lock` the module runs as it would without this plugin. With it, the
controller's identity goes into the lock's arguments and a refusal because of a recorded holder
is judged here, as for sglang_lock (plugin_utils/_operation_lock): provably gone -> the module
runs again, taking the lock over; alive or another controller's -> the refusal stands.

With `teardown` (the old server stopped first, in the same call), the teardown's own lines: when
SIGKILL comes before the module runs, one line per phase after (plugin_utils/_teardown_lines),
for a human stdout callback only.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.llmops.sglang.plugins.plugin_utils import _operation_lock as L
from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P
from ansible_collections.llmops.sglang.plugins.plugin_utils import _settings as S
from ansible_collections.llmops.sglang.plugins.plugin_utils import _teardown_lines as T

MODULE = "llmops.sglang.sglang_launch"

display = Display()


def _teardown_spec() -> Dict[str, Any]:
    from ansible_collections.llmops.sglang.plugins.module_utils._core._options import teardown
    return teardown()


class ActionModule(ActionBase):
    """Adds the lock holder's identity when the launch takes the operation lock; shows the
    teardown's lines when it stops the old server first."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        S.show(S.notes_for_task(task_vars.get("__sglang_settings_role"), task_vars, self._templar.template), display)
        args = dict(self._task.args)
        spec = args.get("operation_lock")

        def execute(takeover):
            if isinstance(spec, dict):
                args["operation_lock"] = dict(spec, **(takeover or {}))
            return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        stop = args.get("teardown")
        show = isinstance(stop, Mapping) and P.progress_wanted(P.stdout_callback_name(), os.environ)
        who = P.host_label(task_vars, self._play_context.remote_addr, str(args.get("name") or "sglang") + " teardown")
        check_mode = bool(self._play_context.check_mode)
        # the rollback's stop of a failed launch: its lines only when it stopped something
        quiet = bool(task_vars.get("__sglang_launch_teardown_quiet"))
        if show and not quiet and not check_mode and T.args_valid(stop, _teardown_spec()):
            display.display("%s: %s" % (who, T.deferred_line(stop)))
        try:
            if isinstance(spec, dict):
                spec = dict(spec, holder=L.holder(task_vars))  # what `execute` sends from here on
                res = L.run(execute, spec["holder"]["controller"], str(args.get("name") or "sglang"), spec.get("ttl"),
                            args.get("state_dir"), task_vars.get("inventory_hostname", "the host"))
            else:
                res = execute(None)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        done = res.get("teardown")
        if show and isinstance(done, Mapping) and "killed" in done and (done.get("killed") or not quiet):
            # (a refusal before any signal says it all)
            for line in T.phase_lines(done, check_mode, stop.get("ports")):
                display.display("%s: %s" % (who, line))
        return merge_hash(result, res)
