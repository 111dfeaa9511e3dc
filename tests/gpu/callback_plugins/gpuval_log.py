# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only callback for tests/gpu: appends every task result, as one JSON line, to the file
named by GPUVAL_RESULTS (nothing when unset). The GPU validation reads module results
(pids, timings, gpus_after, failure reasons) from it instead of parsing screen output."""
from __future__ import annotations

DOCUMENTATION = r"""
name: gpuval_log
type: aggregate
short_description: JSON lines of every task result (tests/gpu only)
description: Writes each task result to the file named by the GPUVAL_RESULTS environment variable.
requirements: [enable in callbacks_enabled]
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuval_log"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("GPUVAL_RESULTS")
        self._label = os.environ.get("GPUVAL_LABEL", "")
        self._task_start = {}

    def _write(self, data):
        if not self._path:
            return
        with open(self._path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(data, default=str, sort_keys=True) + "\n")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start[task._uuid] = time.time()

    def _result(self, result, status):
        task = result._task
        try:
            data = json.loads(json.dumps(result._result, default=str))
        except (TypeError, ValueError):
            data = {"unserializable": str(result._result)}
        self._write({
            "label": self._label, "status": status, "time": time.time(),
            "task_start": self._task_start.get(task._uuid), "host": result._host.get_name(),
            "task": task.get_name(), "action": task.action, "result": data,
        })

    def v2_runner_on_ok(self, result, **kwargs):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False, **kwargs):
        self._result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_unreachable(self, result, **kwargs):
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        hosts = sorted(stats.processed.keys())
        self._write({"label": self._label, "status": "stats", "time": time.time(),
                     "stats": {h: stats.summarize(h) for h in hosts}})
