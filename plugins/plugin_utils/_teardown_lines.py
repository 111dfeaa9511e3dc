# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lines a teardown prints on the controller: when SIGKILL comes, before it runs, and one per
phase after (SIGTERM, SIGKILL, verification, files), from its result. Used by the action plugins
of sglang_teardown and of sglang_launch (whose `teardown` option stops the old server first)."""
from __future__ import annotations

import time
from typing import Any, List, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P

GRACE_DEFAULT_S = 30.0
TIMEOUT_DEFAULT_S = 60.0


def what(args: Mapping[str, Any]) -> str:
    """The instance name, else the ports, else `teardown`."""
    if args.get("name"):
        return str(args["name"])
    ports = args.get("ports")
    if isinstance(ports, (list, tuple)) and ports:
        return "ports %s" % ",".join(str(p) for p in ports)
    return "teardown"


def _seconds(value: Any, default: float) -> float:
    try:
        return float(default if value is None or value == "" else value)
    except (TypeError, ValueError):
        return default


def _grace_and_timeout(args: Mapping[str, Any]) -> Tuple[float, float]:
    return (_seconds(args.get("grace_period"), GRACE_DEFAULT_S), _seconds(args.get("timeout"), TIMEOUT_DEFAULT_S))


def before_line(args: Mapping[str, Any], now: float) -> str:
    """`SIGTERM now, SIGKILL after the 30s grace period (about 10:42:31) to what is left; ...`."""
    grace, timeout = _grace_and_timeout(args)
    return ("SIGTERM now, SIGKILL after the %s grace period (about %s) to what is left; "
            "done by about %s at the latest" % (P.duration(grace), time.strftime("%H:%M:%S", time.localtime(now + grace)),
                                                time.strftime("%H:%M:%S", time.localtime(now + grace + timeout))))


def deferred_line(args: Mapping[str, Any]) -> str:
    """Before a launch whose call stops the old server first: the teardown starts only after the
    launch's preflight (which can take minutes, and can refuse), so no clock times."""
    grace, timeout = _grace_and_timeout(args)
    return ("once the preflight passes: SIGTERM, SIGKILL after the %s grace period to what is left, "
            "then at most %s more; the launch follows" % (P.duration(grace), P.duration(timeout)))


def args_valid(args: Mapping[str, Any], spec: Optional[Mapping[str, Any]] = None) -> bool:
    """Do the arguments pass the argument spec (default: sglang_teardown's own)? A task the
    module will refuse at once gets no line that announces signals (the module's failure says it
    all)."""
    try:
        from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
        if spec is None:
            from ansible_collections.llmops.sglang.plugins.module_utils._core._options import teardown_module
            spec = teardown_module()
    except ImportError:  # an older core: the module judges alone
        return True
    return not ArgumentSpecValidator(dict(spec)).validate(dict(args)).error_messages


def _count(n: int, word: str) -> str:
    return "%d %s%s" % (n, word, "" if n == 1 else "es" if word.endswith("s") else "s")


def _ended_by(result: Mapping[str, Any], signal: str) -> List[Mapping[str, Any]]:
    return [k for k in result.get("killed") or [] if k.get("signal") == signal]


def phase_lines(result: Mapping[str, Any], check_mode: bool, ports: Any = None) -> List[str]:
    """One line per phase of the teardown, from its result."""
    if check_mode:
        term = [s for s in result.get("signals") or [] if s.get("signal") == "SIGTERM"]
        pids = {p for s in term for p in s.get("pids") or []}
        return ["check mode: would stop %s and remove %s" % (
            _count(len(pids), "process"), _count(len(result.get("shm_removed") or []), "file"))]
    timings = result.get("timings") or {}
    lines: List[str] = []
    containment = result.get("containment")
    if isinstance(containment, Mapping) and containment.get("cgroup"):
        members = containment.get("members") or []
        lines.append("cgroup %s: %s stopped%s (%s)" % (
            containment["cgroup"], _count(len(members), "member"),
            ", SIGKILL via %s" % containment["killed_with"] if containment.get("killed_with") else "",
            P.duration(timings.get("cgroup"))))
    termed = _ended_by(result, "SIGTERM")
    killed = _ended_by(result, "SIGKILL")
    gone = _ended_by(result, "already-gone")
    survivors = result.get("survivors") or []
    total = len(termed) + len(killed) + len(survivors)
    if not total and not lines:
        lines.append("nothing was running%s" % (" (%s already gone)" % _count(len(gone), "process") if gone else ""))
    elif total:
        lines.append("SIGTERM ended %d of %s in %s"
                     % (len(termed), _count(total, "process"), P.duration(timings.get("term"))))
    if killed or survivors:
        text = "SIGKILL ended %s in %s" % (_count(len(killed), "process"), P.duration(timings.get("kill")))
        if survivors:
            text += "; still alive: %s" % ", ".join("pid %s (%s)" % (s.get("pid"), s.get("name")) for s in survivors)
        lines.append(text)
    lines.append(_verify_line(result, timings, ports))
    lines.append(_cleanup_line(result))
    return [line for line in lines if line]


def _verify_line(result: Mapping[str, Any], timings: Mapping[str, Any], ports: Any) -> str:
    """Ports and GPUs as verified after the processes ended (only what the task manages)."""
    held = result.get("ports_after") or []
    gpus = result.get("gpu_processes_left") or {}
    parts = []
    if held:
        parts.append("port(s) %s still held" % ", ".join(str(p.get("port")) for p in held))
    elif isinstance(ports, (list, tuple)) and ports:
        parts.append("port(s) %s free" % ", ".join(str(p) for p in ports))
    if gpus:
        parts.append("GPUs still list pid(s) %s" % ", ".join(str(p) for p in gpus))
    elif result.get("gpus_after"):
        parts.append("GPUs list no target")
    if not parts:
        return ""
    return "verified %s (%s)" % (", ".join(parts), P.duration(timings.get("verify")))


def _cleanup_line(result: Mapping[str, Any]) -> str:
    parts = []
    removed = result.get("shm_removed") or []
    if removed:
        parts.append(_count(len(removed), "file"))
    if result.get("tmpdir_removed"):
        parts.append("the instance TMPDIR")
    if result.get("record_removed"):
        parts.append("the launch record")
    kept = result.get("shm_kept") or []
    text = "removed %s" % ", ".join(parts) if parts else ""
    if kept:
        text += ("; " if text else "") + "%s kept (held open)" % _count(len(kept), "file")
    return text
