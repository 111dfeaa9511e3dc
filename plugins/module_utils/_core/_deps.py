"""PRIVATE to llmops.sglang. The Python libraries the modules need on a managed host (psutil,
requests), and the rule for which interpreter may be run, or named, when the one running the
module lacks them.

The search itself (the module's own `venv`/`python`, launch records, running sglang servers,
sglang installs) lives in _sglang/_depsearch: it is sglang discovery, and this package is below
it. Only an interpreter that nobody but root or this user can replace is ever run (or named):
advice to run modules as root under another user's python would hand that user root. Nor one
reached through /proc or resolving to another file than its path names here: `/proc/<pid>/root/`
opens a container's filesystem (another mount namespace), which this host's trust rules never saw.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pwd
import stat
import subprocess
import sys
from typing import List, Optional, Sequence

REQUIRED = ("psutil", "requests")
# What to install for the interpreter a module runs with (Debian/Ubuntu package names).
SYSTEM_PACKAGES = {"psutil": "python3-psutil", "requests": "python3-requests"}
CHECK_TIMEOUT = 10.0


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


def _under_proc(path: str) -> bool:
    return path == "/proc" or path.startswith("/proc/")


def other_view(path: str) -> Optional[str]:
    """None when `path` is a file of this module's own mount namespace, as the trust walk sees
    it; else why not. A path through /proc (`/proc/<pid>/root/usr/bin/python3`, `/proc/<pid>/exe`)
    is another process's view: its magic links lead into a container's filesystem while the
    resolved string names a host file. Any other way there (a link into /proc) shows as the path
    opening another file than its resolved string."""
    full, real = os.path.abspath(path), os.path.realpath(path)
    if _under_proc(full) or _under_proc(real):
        return "a path through /proc (%s): another process's view of the filesystem, perhaps another " \
               "mount namespace (a container)" % path
    try:
        opened, named = os.stat(full), os.stat(real)
    except OSError:
        return None  # the trust walk names what cannot be read
    if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
        return "%s opens another file than %s names in this mount namespace" % (path, real)
    return None


def untrusted_reason(path: str, euid: Optional[int] = None) -> Optional[str]:
    """None when nobody but root or this user (`euid`) can replace `path`: the path as given
    and its real target, and every directory above both, are theirs and closed to others.
    Else why not, e.g. "owned by user alice (/home/alice)"."""
    euid = os.geteuid() if euid is None else euid
    if not os.path.isabs(path):
        return "not an absolute path (%s)" % path
    elsewhere = other_view(path)
    if elsewhere is not None:
        return elsewhere
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
