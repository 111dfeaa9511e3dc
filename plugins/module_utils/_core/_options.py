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


def teardown() -> Dict[str, Any]:
    """sglang_teardown's own options (name, state_dir and gpu_backend are the calling module's):
    that module's, and the suboptions of sglang_launch's `teardown`."""
    return merged(
        ports(default=[]),
        gpus=dict(type="list", elements="raw"),
        patterns=dict(type="list", elements="str", default=[]),
        sglang_processes=dict(type="bool", default=True),
        all_users=dict(type="bool", default=False),
        protect=dict(type="list", elements="str", default=[]),
        foreign_gpu_processes=dict(type="str", choices=["fail", "kill", "ignore"], default="fail"),
        grace_period=dict(type="float", default=30.0),
        timeout=dict(type="float", default=60.0),
        shm_cleanup=dict(type="bool", default=True),
        shm_dir=dict(type="path", default="/dev/shm"),
        purge_paths=dict(type="list", elements="path", default=[]),
        clear_cache=dict(type="bool", default=False),
        takeover=dict(type="list", elements="str", default=[]),
    )


def teardown_module() -> Dict[str, Any]:
    """sglang_teardown's whole argument spec: the module's, and what its action plugin (on the
    controller, which never imports a module file) validates a task against."""
    return merged(GROUP, teardown(), name=dict(type="str"))


def merged(*specs: Dict[str, Any], **own: Any) -> Dict[str, Any]:
    """One argument_spec from the shared pieces plus the module's own options."""
    out: Dict[str, Any] = {}
    for spec in specs:
        out.update(spec)
    out.update(own)
    return out


# What every module of the `llmops.sglang.sglang` action group accepts (meta/runtime.yml), so
# that `module_defaults: {group/llmops.sglang.sglang: {...}}` can set them once for a play:
# Ansible gives a group's defaults to each of its modules, and one that did not know an option
# would fail the task. A module with no use for one of them ignores it (its documentation says so).
GROUP: Dict[str, Any] = merged(STATE_DIR, GPU_BACKEND, API_KEY)
