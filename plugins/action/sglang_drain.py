# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sglang_drain: live progress on the controller while in-flight requests end.

A drain can wait for minutes, and one silent task cannot tell "12 long generations still
running" from "hung". This plugin runs the module in slices of `slice_seconds`: each slice goes
on from the state the previous one returned (the wait's start, the samples, how long the server
has been idle, the load source that answered) and answers `pending` when it ends before a
verdict. Between slices it prints one line per host, `gpu-07 extraction: draining, 12 requests
in flight (35s of 300s)`, and at the end `... drained in 41s`. Draining only reads the server's
load (GET requests), so resuming it repeats nothing that must happen once. The verdict, the
timeout (counted from the first slice) and the result are those of one uninterrupted call.

Lines go to the display only for a human stdout callback (see plugin_utils/_progress_display).
`slice_seconds: 0` (or async) runs the module in one call, as without this plugin.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P
from ansible_collections.llmops.sglang.plugins.plugin_utils._sliced_action import SlicedAction

MODULE = "llmops.sglang.sglang_drain"
SLICE_ENV = "LLMOPS_SGLANG_DRAIN_SLICE_SECONDS"


def what(args: Mapping[str, Any]) -> str:
    """The instance name, else the port."""
    return str(args.get("name") or "port %s" % args.get("port"))


def _requests(n: int) -> str:
    return "%d request%s" % (n, "" if n == 1 else "s")


def _in_flight(load: Mapping[str, Any]) -> int:
    """Running plus waiting requests of a load reading."""
    return int(load.get("running") or 0) + int(load.get("waiting") or 0)


def progress_line(progress: Mapping[str, Any]) -> str:
    """`draining, 12 requests in flight (35s of 300s)`; idle: `idle for 1s of the 2s settle time`."""
    when = "(%s of %s)" % (P.duration(progress.get("elapsed")), P.duration(progress.get("timeout")))
    if progress.get("running") is None:
        return "draining, no load read yet %s" % when
    busy = _in_flight(progress)
    if busy == 0:
        return "draining, idle for %s of the %s settle time %s" % (
            P.duration(progress.get("idle_for")), P.duration(progress.get("settle")), when)
    waiting = int(progress.get("waiting") or 0)
    return "draining, %s in flight%s %s" % (_requests(busy), " (%d waiting)" % waiting if waiting else "", when)


def final_line(result: Mapping[str, Any]) -> str:
    """The outcome of a wait that did not fail."""
    reason = result.get("reason")
    took = P.duration(result.get("elapsed"))
    if reason == "drained":
        peak = int(result.get("peak") or 0)
        return "drained in %s%s" % (took, " (at most %s in flight)" % _requests(peak) if peak else "")
    if reason == "unreachable":
        return "the server does not answer: nothing to drain"
    if reason == "timeout":
        return "drain timeout after %s, %s still in flight: proceeding" % (
            took, _requests(_in_flight(result.get("load") or {})))
    if reason == "check_mode":
        return "check mode: %s in flight" % _requests(_in_flight(result.get("load") or {}))
    return str(result.get("msg") or reason)


class ActionModule(SlicedAction):
    """Runs sglang_drain in slices and shows each host's progress between them."""

    MODULE = MODULE
    SLICE_ENV = SLICE_ENV
    VERDICT_KEY = "drained"

    def label(self, args: Mapping[str, Any]) -> str:
        return what(args)

    def progress_text(self, res: Mapping[str, Any]) -> str:
        return progress_line(res.get("progress") or {})

    def final_text(self, final: Mapping[str, Any]) -> Optional[str]:
        return None if final.get("failed") else final_line(final)
