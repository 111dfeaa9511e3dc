# -*- coding: utf-8 -*-
"""Options shared by several llmops.sglang modules: one description, one type, everywhere."""
from __future__ import annotations


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
    UNUSED_STATE_DIR = r"""
options:
  state_dir:
    description:
      - Accepted so that C(module_defaults) on the C(llmops.sglang.sglang) action group can set it
        once for every module; this module keeps no state and ignores it.
    type: path
"""

    UNUSED_GPU_BACKEND = r"""
options:
  gpu_backend:
    description:
      - Accepted so that C(module_defaults) on the C(llmops.sglang.sglang) action group can set it
        once for every module; this module reads no GPU and ignores it.
    type: str
    choices: [auto, nvml, nvidia-smi, none]
    default: auto
"""

    UNUSED_API_KEY = r"""
options:
  api_key:
    description:
      - The servers' C(--api-key), accepted so that C(module_defaults) on the C(llmops.sglang.sglang)
        action group can set it once for every module; this module sends it nowhere.
    type: str
"""

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
