"""PRIVATE to llmops.sglang. Which interpreter on this host has psutil and requests, for the
message of a module whose own python lacks them (the missing_library failure, the probe's
warning).

An sglang venv has both (SGLang depends on them), so the interpreters worth naming are found the
way discovery finds sglang: the module's own `venv`/`python` parameters, the interpreters of this
host's launch records, those of running sglang servers in this module's mount namespace, then the
sglang installs under the search globs. Each is checked with `python -c "import psutil, requests"`,
but only one that _deps.trusted allows is ever run, or named.
"""
from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps

MAX_CHECKED = 8


def _record_interpreters(state_dirs: Iterable[str]) -> List[str]:
    """The interpreters this host's launch records name (the venv each instance runs from)."""
    out = []
    for state_dir in state_dirs:
        for path in sorted(glob.glob(os.path.join(state_dir, "*.json"))):
            if path.endswith(".exit.json"):
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    rec = json.load(fh)
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict) and isinstance(rec.get("interpreter"), str):
                out.append(rec["interpreter"])
    return out


def _is_sglang_main(argv: List[str]) -> bool:
    if "sglang.launch_server" in argv:
        return True
    return len(argv) > 2 and os.path.basename(argv[1]) == "sglang" and argv[2] == "serve"


def sglang_command_lines(proc_root: str = "/proc") -> List[Tuple[int, int, List[str]]]:
    """(pid, uid, argv) of every process whose command line starts an sglang server
    (`<python> -m sglang.launch_server`, `<python> <venv>/bin/sglang serve`). /proc is read by
    hand on purpose: this runs exactly when psutil is what is missing."""
    out: List[Tuple[int, int, List[str]]] = []
    try:
        entries = sorted((e for e in os.listdir(proc_root) if e.isdigit()), key=int)
    except OSError:
        return out
    for entry in entries:
        try:
            with open(os.path.join(proc_root, entry, "cmdline"), "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
            uid = os.stat(os.path.join(proc_root, entry)).st_uid
        except OSError:
            continue
        if argv and _is_sglang_main(argv):
            out.append((int(entry), uid, argv))
    return out


def _mount_namespace(proc_root: str, pid: str) -> Optional[str]:
    try:
        return os.readlink(os.path.join(proc_root, pid, "ns", "mnt"))
    except OSError:
        return None


def running_interpreters(proc_root: str = "/proc") -> List[str]:
    """Interpreters of running sglang servers (absolute python paths only: they can be named).
    Only of processes proven to share this module's mount namespace: a container's
    `/opt/venv/bin/python` is a path in the container's filesystem, not this host's."""
    own = _mount_namespace(proc_root, "self")
    out = []
    for pid, _uid, argv in sglang_command_lines(proc_root):
        if own is None or _mount_namespace(proc_root, str(pid)) != own:
            continue
        if os.path.isabs(argv[0]) and "python" in os.path.basename(argv[0]):
            out.append(argv[0])
    return out


def _installed_interpreters(search_paths: Optional[Sequence[str]]) -> List[str]:
    # imported here: only a module whose python lacks a library gets this far
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import DEFAULT_SEARCH_PATHS, discover

    return [i["python"] for i in discover(list(search_paths or DEFAULT_SEARCH_PATHS)) if i.get("python")]


def candidates(hints: Sequence[str] = (), state_dirs: Sequence[str] = (),
               search_paths: Optional[Sequence[str]] = None) -> List[str]:
    """Interpreters worth checking, best first, each once; never the one running this module."""
    own = os.path.abspath(sys.executable)
    ordered = list(hints) + _record_interpreters(state_dirs) + running_interpreters()
    ordered += _installed_interpreters(search_paths)
    out: List[str] = []
    for python in ordered:
        path = os.path.abspath(python) if os.path.isabs(python) else None
        if path and path != own and path not in out:
            out.append(path)
    return out


def interpreter_with(libs: Sequence[str] = _deps.REQUIRED, hints: Sequence[str] = (), state_dirs: Sequence[str] = (),
                     search_paths: Optional[Sequence[str]] = None, limit: int = MAX_CHECKED) -> Optional[str]:
    """The first trusted interpreter on this host that imports `libs`, or None."""
    checked = 0
    for python in candidates(hints, state_dirs, search_paths):
        if checked >= limit:
            break
        if not _deps.trusted(python):
            continue
        checked += 1
        if _deps.has_libs(python, libs):
            return python
    return None


def hints_from(params: Mapping[str, Any]) -> Dict[str, Any]:
    """Where a module's own parameters say sglang (and so psutil and requests) should be."""
    hints = []
    venv = params.get("venv")
    if venv:
        hints += [os.path.join(os.path.expanduser(venv), "bin", n) for n in ("python", "python3")]
        hints = [h for h in hints if os.path.exists(h)][:1]
    if params.get("python") and os.path.isabs(os.path.expanduser(params["python"])):
        hints.append(os.path.expanduser(params["python"]))
    from ansible_collections.llmops.sglang.plugins.module_utils._host._record import default_state_dir

    state_dirs = [params.get("state_dir") or default_state_dir()]
    return {"hints": hints, "state_dirs": state_dirs, "search_paths": params.get("search_paths")}


def report(libs: Sequence[str] = _deps.REQUIRED, params: Optional[Mapping[str, Any]] = None,
           import_them: bool = True) -> Optional[Dict[str, Any]]:
    """None when every library imports; else {msg, missing_libraries, interpreter_with_libraries}
    naming an interpreter that has them, when one exists."""
    lacking = _deps.missing(libs, import_them)
    if not lacking:
        return None
    found = interpreter_with(libs, **hints_from(params or {}))
    return {"msg": _deps.message(lacking, found), "missing_libraries": lacking, "interpreter_with_libraries": found}


def require(module: Any, libs: Sequence[str] = _deps.REQUIRED, import_them: bool = False) -> None:
    """Call first in main(): fail with reason `missing_library` when `libs` are not installed.
    Looked up, not imported (requests alone costs ~0.1 s of every start; it is imported where
    used, and a broken install is reported there); `import_them` for a library the module has
    imported already (free to ask again): one that is installed but does not import is named too."""
    found = report(libs, module.params, import_them=import_them)
    if found is not None:
        module.fail_json(reason="missing_library", **found)
