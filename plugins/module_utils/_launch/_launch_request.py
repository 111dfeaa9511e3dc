"""PRIVATE to llmops.sglang. What one sglang_launch call resolved before its instance lock.

`Preflight` (the report and the values it validated) and `Request` (where, what, and the
requested server's identity) are built by _launch_exec.prepare and read by _launch_replace for
the teardown it runs first; they live here so that both import this file and neither imports
the other (_launch_exec -> _launch_replace -> _launch_request, one way).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _outputdirs
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight


@dataclass
class Preflight:
    """The preflight report and the values it validated (None where a check refused them)."""
    report: _preflight.Report
    port: Optional[int] = None
    tp_size: Optional[int] = None
    env: Dict[str, str] = field(default_factory=dict)
    args: Dict[str, Any] = field(default_factory=dict)
    interp: Any = None
    entry: Optional[str] = None
    entry_argv: List[str] = field(default_factory=list)
    flags: Any = None
    model_path: str = ""
    output_dirs: List[_outputdirs.OutputDir] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    """Everything resolved before the lock: where, what, and the server's identity."""
    params: Mapping[str, Any]
    name: str
    state_dir: str
    log_dir: str
    backend: str
    why: str
    pf: Preflight
    argv: List[str]
    fingerprint: Optional[str]
    inputs: Optional[Dict[str, Any]]
    secrets: List[str]
    # restore: last_good - what was restored (no secrets); the params hold its configuration
    restored: Optional[Dict[str, Any]] = None
