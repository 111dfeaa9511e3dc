"""PRIVATE to llmops.sglang. The Python libraries the modules need on a managed host (psutil,
requests), and which interpreter on the host has them when the one running the module does not.

An sglang venv has both (SGLang depends on them), so the interpreters worth naming are found the
way discovery finds sglang: the module's own `venv`/`python` parameters, the interpreters of this
host's launch records, those of running sglang servers, then the sglang installs under the
search globs. Each is checked with `python -c "import psutil, requests"`, but only an interpreter
that nobody but root or this user can replace is ever run (or named): advice to run modules as
root under another user's python would hand that user root.
"""
from __future__ import annotations

import glob
import importlib
import importlib.util
import json
import os
import pwd
import stat
import subprocess
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

REQUIRED = ("psutil", "requests")
# What to install for the interpreter a module runs with (Debian/Ubuntu package names).
SYSTEM_PACKAGES = {"psutil": "python3-psutil", "requests": "python3-requests"}
CHECK_TIMEOUT = 10.0
MAX_CHECKED = 8


def missing(libs: Sequence[str] = REQUIRED, import_them: bool = True) -> List[str]:
    """The libraries this interpreter cannot import. `import_them=False` only looks them up
    (no import cost, for the probe's speed); a broken install then shows up where it is used."""
    out = []
    for name in libs:
        try:
            if import_them:
                importlib.import_module(name)
            elif importlib.util.find_spec(name) is None:
                out.append(name)
        except ImportError:
            out.append(name)
        except Exception:  # a broken install raises anything at import time
            out.append(name)
    return out


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _entry_problem(path: str, euid: int) -> Optional[str]:
    """None when `path` is owned by root or this user and not writable by group or others (a
    root-owned sticky directory such as /tmp is fine: nobody else can replace what is in it);
    else why not."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return "unreadable (%s: %s)" % (path, exc.strerror or exc)
    if st.st_uid not in (0, euid):
        return "owned by user %s (%s)" % (_owner(st.st_uid), path)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not stat.S_ISLNK(st.st_mode):
        if not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid == 0):
            return "writable by group or others (%s)" % path
    return None


def untrusted_reason(path: str, euid: Optional[int] = None) -> Optional[str]:
    """None when nobody but root or this user (`euid`) can replace `path`: the path as given
    and its real target, and every directory above both, are theirs and closed to others.
    Else why not, e.g. "owned by user alice (/home/alice)"."""
    euid = os.geteuid() if euid is None else euid
    if not os.path.isabs(path):
        return "not an absolute path (%s)" % path
    for full in (os.path.abspath(path), os.path.realpath(path)):
        probe = full
        while True:
            problem = _entry_problem(probe, euid)
            if problem is not None:
                return problem
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
    return None


def trusted(python: str, euid: Optional[int] = None) -> bool:
    """May this interpreter be run (and named) by this module? Nobody but root or this user can
    replace it (untrusted_reason), and it is an executable file."""
    if untrusted_reason(python, euid) is not None:
        return False
    real = os.path.realpath(python)
    return os.path.isfile(real) and os.access(real, os.X_OK)


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


def running_interpreters(proc_root: str = "/proc") -> List[str]:
    """Interpreters of running sglang servers (absolute python paths only: they can be named)."""
    return [argv[0] for _pid, _uid, argv in sglang_command_lines(proc_root)
            if os.path.isabs(argv[0]) and "python" in os.path.basename(argv[0])]


def _installed_interpreters(search_paths: Optional[Sequence[str]]) -> List[str]:
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


def has_libs(python: str, libs: Sequence[str] = REQUIRED, timeout: float = CHECK_TIMEOUT) -> bool:
    """Does `python` import `libs` by itself (no PYTHONPATH from this module's environment)?"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    try:
        proc = subprocess.run([python, "-c", "import %s" % ", ".join(libs)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", env=env,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def interpreter_with(libs: Sequence[str] = REQUIRED, hints: Sequence[str] = (), state_dirs: Sequence[str] = (),
                     search_paths: Optional[Sequence[str]] = None, limit: int = MAX_CHECKED) -> Optional[str]:
    """The first trusted interpreter on this host that imports `libs`, or None."""
    checked = 0
    for python in candidates(hints, state_dirs, search_paths):
        if checked >= limit:
            break
        if not trusted(python):
            continue
        checked += 1
        if has_libs(python, libs):
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


def message(lacking: Sequence[str], found: Optional[str]) -> str:
    """Ansible's missing_required_lib sentence, then what to do on this host."""
    from ansible.module_utils.basic import missing_required_lib

    names = " and ".join(lacking)
    text = missing_required_lib(names)
    if found:
        return text + ". %s has %s: rerun with `-e ansible_python_interpreter=%s`" % (
            found, " and ".join(REQUIRED), found)
    packages = " ".join(SYSTEM_PACKAGES.get(n, n) for n in lacking)
    return text + (". No interpreter on this host that has %s was found (sglang venvs, launch records, "
                   "running servers): install %s for %s (Debian/Ubuntu: apt-get install %s), or point "
                   "ansible_python_interpreter at the sglang venv's python"
                   % (" and ".join(REQUIRED), names, sys.executable, packages))


def report(libs: Sequence[str] = REQUIRED, params: Optional[Mapping[str, Any]] = None,
           import_them: bool = True) -> Optional[Dict[str, Any]]:
    """None when every library imports; else {msg, missing_libraries, interpreter_with_libraries}
    naming an interpreter that has them, when one exists."""
    lacking = missing(libs, import_them)
    if not lacking:
        return None
    found = interpreter_with(libs, **hints_from(params or {}))
    return {"msg": message(lacking, found), "missing_libraries": lacking, "interpreter_with_libraries": found}


def require(module: Any, libs: Sequence[str] = REQUIRED, import_them: bool = False) -> None:
    """Call first in main(): fail with reason `missing_library` when `libs` are not installed.
    Looked up, not imported (requests alone costs ~0.1 s of every start; it is imported where
    used, and a broken install is reported there); `import_them` for a library the module has
    imported already (free to ask again): one that is installed but does not import is named too."""
    found = report(libs, module.params, import_them=import_them)
    if found is not None:
        module.fail_json(reason="missing_library", **found)
