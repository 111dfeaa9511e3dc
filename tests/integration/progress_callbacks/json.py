# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A machine-format stdout callback named `json` for the progress tests: the whole run as ONE
JSON document on stdout at the end, like ansible.posix.json (not installed here). Anything else
printed to stdout - a progress line - makes the output unparseable."""
from __future__ import annotations

import json

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: json
    type: stdout
    short_description: the run as one JSON document (tests only)
    description: Collects every task result per host and prints one JSON document at the end.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "json"

    def __init__(self) -> None:
        super().__init__()
        self.tasks = []

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.tasks.append({"task": task.get_name(), "hosts": {}})

    def _record(self, result, status):
        data = dict(result._result, _status=status)
        self.tasks[-1]["hosts"][result._host.get_name()] = json.loads(json.dumps(data, default=str))

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        hosts = sorted(stats.processed.keys())
        summary = {h: stats.summarize(h) for h in hosts}
        self._display.display(json.dumps({"tasks": self.tasks, "stats": summary}, indent=2, sort_keys=True))
