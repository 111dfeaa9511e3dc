# -*- coding: utf-8 -*-
"""Options shared by several llmops.sglang modules: one description, one type, everywhere."""
from __future__ import annotations


def _unused(option: str, why: str, spec: str) -> str:
    """The fragment of a group option that a module accepts and ignores."""
    return ("\noptions:\n  %s:\n    description:\n      - Accepted so that C(module_defaults) on the"
            " C(llmops.sglang.sglang) action group can set it\n        once for every module; %s\n%s" % (option, why, spec))


class ModuleDocFragment:
    # Where launch records, locks and per-instance TMPDIRs live.
    STATE_DIR = r"""
options:
  state_dir:
    description:
      - State directory (launch records, locks, per-instance TMPDIRs, the introspection cache).
      - Default C(/var/lib/llmops-sglang) as root, else C(~/.local/state/llmops-sglang).
      - Created mode 0700; refused when it exists owned by another user or writable by group/others.
    type: path
"""

    GPU_BACKEND = r"""
options:
  gpu_backend:
    description:
      - How GPU compute processes and memory are read. V(auto) tries NVML (nvidia-ml-py), then
        C(nvidia-smi), then reports GPUs as not checked.
    type: str
    choices: [auto, nvml, nvidia-smi, none]
    default: auto
"""

    API_KEY = r"""
options:
  api_key:
    description:
      - The server's C(--api-key). Sent as a bearer token only to a listener proven to be this
        instance's SGLang server; never returned, logged or shown in a diff.
    type: str
"""

    # The action group's shared options, for a module that has no use for them: accepted so
    # that module_defaults on the group reach every module (one that did not know an option would fail).
    UNUSED_STATE_DIR = _unused("state_dir", "this module keeps no state and ignores it.", "    type: path\n")
    UNUSED_GPU_BACKEND = _unused("gpu_backend", "this module reads no GPU and ignores it.",
                                 "    type: str\n    choices: [auto, nvml, nvidia-smi, none]\n    default: auto\n")
    UNUSED_API_KEY = _unused("api_key", "this module sends the servers' key nowhere.", "    type: str\n")

    PORTS = r"""
options:
  ports:
    description:
      - Managed TCP ports (integers 1-65535).
    type: list
    elements: int
"""

    PYTHON = r"""
options:
  python:
    description:
      - Path of the Python interpreter that has (or runs) sglang, e.g. a venv's C(bin/python).
        M(llmops.sglang.sglang_launch) refuses a bare name (it must know exactly what it runs).
    type: path
"""

    INTROSPECT_TIMEOUT = r"""
options:
  introspect_timeout:
    description:
      - Seconds allowed for reading the sglang CLI (it imports sglang; the result is cached per
        install), after which the introspection is reported as failed.
    type: float
    default: 180
"""
