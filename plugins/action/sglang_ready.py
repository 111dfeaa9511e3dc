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

from typing import Any, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core import _progress
from ansible_collections.llmops.sglang.plugins.plugin_utils._sliced_action import SlicedAction

MODULE = "llmops.sglang.sglang_ready"
SLICE_ENV = "LLMOPS_SGLANG_READY_SLICE_SECONDS"


def instance_label(args: Mapping[str, Any]) -> str:
    record = args.get("record")
    name = args.get("name") or (record.get("name") if isinstance(record, Mapping) else None)
    return str(name or "sglang")


class ActionModule(SlicedAction):
    """Runs sglang_ready in slices and shows each host's progress between them."""

    MODULE = MODULE
    SLICE_ENV = SLICE_ENV
    VERDICT_KEY = "ready"

    def label(self, args: Mapping[str, Any]) -> str:
        return instance_label(args)

    def progress_text(self, res: Mapping[str, Any]) -> str:
        return _progress.progress_line(res.get("progress") or {}, res.get("since_launch"),
                                       res.get("last_start_seconds"))

    def final_text(self, final: Mapping[str, Any]) -> Optional[str]:
        if not final.get("ready"):
            return None
        return _progress.ready_line(final.get("start_seconds"), final.get("last_start_seconds"),
                                    bool(final.get("slow_start")), bool(final.get("already_running")))
