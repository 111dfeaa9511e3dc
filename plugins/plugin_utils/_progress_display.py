# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PRIVATE to llmops.sglang (controller side). What the progress-printing action plugins share:
whether progress lines may be printed at all, the slice length of a sliced wait, the host label
of a line, and the last slice's result turned back into the result of one module call.

Lines go to the display only for a human stdout callback: a machine format (json, yaml,
ansible-runner's awx_display, anything not known to be for humans) gets nothing extra in its
stream. LLMOPS_SGLANG_PROGRESS=always|never overrides that.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core import _progress

PROGRESS_ENV = "LLMOPS_SGLANG_PROGRESS"
SLICE_DEFAULT_S = 10.0
SLICE_MAX_S = 600.0
# stdout callbacks written for people; any other one may be parsed by a program.
HUMAN_CALLBACKS = frozenset(("default", "minimal", "oneline", "dense", "debug", "unixy",
                             "counter_enabled", "selective"))
_HUMAN_PREFIXES = ("ansible.builtin.", "ansible.legacy.", "community.general.")
_YES = ("always", "1", "true", "yes", "on")
_NO = ("never", "0", "false", "no", "off")
PRIVATE_KEYS = ("pending", "resume_state", "progress")


def stdout_callback_name() -> str:
    """The configured stdout callback (ansible.cfg, ANSIBLE_STDOUT_CALLBACK), as configured."""
    try:
        from ansible import constants as C
        name = C.config.get_config_value("DEFAULT_STDOUT_CALLBACK")
    except Exception:  # an unreadable config: the environment says the same in most cases
        name = None
    return str(name or os.environ.get("ANSIBLE_STDOUT_CALLBACK") or "default")


def progress_wanted(callback: str, env: Mapping[str, str]) -> bool:
    """Print progress lines? Only into a stream that people read."""
    forced = (env.get(PROGRESS_ENV) or "").strip().lower()
    if forced in _YES:
        return True
    if forced in _NO:
        return False
    name = callback.strip()
    for prefix in _HUMAN_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name in HUMAN_CALLBACKS


def slice_seconds(args: Mapping[str, Any], env: Mapping[str, str], env_name: str) -> float:
    """The task's `slice_seconds`, else the controller's environment `env_name`, else 10 s."""
    value = args.get("slice_seconds")
    if value is None or value == "":
        value = env.get(env_name) or SLICE_DEFAULT_S
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError("slice_seconds must be a number of seconds (got %r)" % (value,))
    if not 0 <= seconds <= SLICE_MAX_S:
        raise ValueError("slice_seconds must be between 0 and %.0f (got %s)" % (SLICE_MAX_S, value))
    return seconds


def host_label(task_vars: Mapping[str, Any], remote_addr: Optional[str], what: str) -> str:
    """`gpu-07 extraction`: the inventory host and what the task works on."""
    return "%s %s" % (task_vars.get("inventory_hostname") or remote_addr, what)


def as_single_call(result: Dict[str, Any], args: Mapping[str, Any]) -> Dict[str, Any]:
    """The last slice's result as one module call returns it: the private argument as a call
    without it shows it (null), the task's own slice_seconds, no private result key."""
    final = dict(result)
    invocation = final.get("invocation")
    if isinstance(invocation, dict) and isinstance(invocation.get("module_args"), dict):
        module_args = dict(invocation["module_args"])
        module_args["_resume"] = None
        module_args["slice_seconds"] = args.get("slice_seconds")
        final["invocation"] = dict(invocation, module_args=module_args)
    for key in PRIVATE_KEYS:
        final.pop(key, None)
    return final


def duration(seconds: Optional[float]) -> str:
    """`45s`, `2m05s`, `1h02m` as the readiness lines write them; under 10 s with a tenth
    (`0.4s`, `3.2s`): a teardown's phases are often that short."""
    if seconds is not None and 0 <= float(seconds) < 9.95 and float(seconds) != int(float(seconds)):
        return "%.1fs" % float(seconds)
    return _progress.duration(seconds)
