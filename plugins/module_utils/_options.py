"""PRIVATE to llmops.sglang. Argument specs shared by several modules (documented once in
plugins/doc_fragments/common.py): one type per option everywhere."""
from __future__ import annotations

from typing import Any, Dict

GPU_BACKENDS = ["auto", "nvml", "nvidia-smi", "none"]

STATE_DIR: Dict[str, Any] = dict(state_dir=dict(type="path"))
GPU_BACKEND: Dict[str, Any] = dict(gpu_backend=dict(type="str", choices=GPU_BACKENDS, default="auto"))
API_KEY: Dict[str, Any] = dict(api_key=dict(type="str", no_log=True))
PYTHON: Dict[str, Any] = dict(python=dict(type="path"))
INTROSPECT_TIMEOUT: Dict[str, Any] = dict(introspect_timeout=dict(type="float", default=180))


def ports(default: Any = None) -> Dict[str, Any]:
    """`ports` as a list of ints; `default` differs by module (probe: every listener, teardown: [])."""
    spec: Dict[str, Any] = dict(type="list", elements="int")
    if default is not None:
        spec["default"] = default
    return dict(ports=spec)


def merged(*specs: Dict[str, Any], **own: Any) -> Dict[str, Any]:
    """One argument_spec from the shared pieces plus the module's own options."""
    out: Dict[str, Any] = {}
    for spec in specs:
        out.update(spec)
    out.update(own)
    return out
