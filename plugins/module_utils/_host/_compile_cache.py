"""PRIVATE to llmops.sglang. The compile and JIT caches a launched server keeps across restarts.

A restart's downtime is mostly the new server's start, and on a large model much of that is
compiling (torch.compile, DeepGEMM's JIT warm-up, FlashInfer, Triton, TileLang). SGLang 0.5.23
points those caches under SGLANG_CACHE_DIR (default `~/.cache/sglang`) at import; 0.5.6 does not,
and its torch.compile then writes into inductor's default, `tempfile.gettempdir()/
torchinductor_<user>` - the launch's private TMPDIR, which the teardown removes: every restart
recompiled from nothing. So every launch gets the variables 0.5.23 sets, under one directory per
host and user, wherever the operator's `env` does not set them itself; the directory is checked
like the state dir (it holds code the server loads), created privately, never removed by a
teardown, emptied only when asked (`clear`).
"""
from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _purge
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record

BASE_VARIABLE = "SGLANG_CACHE_DIR"
# SGLang 0.5.23: srt/environ.py third_party_cache_defaults() and SGLANG_DG_CACHE_DIR's default
# (`_default_cache_subdir("deep_gemm")`), variable for variable; "" is the base itself
# (FlashInfer appends `.cache/flashinfer` to its workspace base).
SUBDIRS: Tuple[Tuple[str, str], ...] = (
    ("TRITON_CACHE_DIR", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("CUDA_CACHE_PATH", "nv"),
    ("TILELANG_CACHE_DIR", "tilelang"),
    ("FLASHINFER_WORKSPACE_BASE", ""),
    ("SGLANG_DG_CACHE_DIR", "deep_gemm"),
)
VARIABLES: Tuple[str, ...] = (BASE_VARIABLE,) + tuple(name for name, _sub in SUBDIRS)
LABEL = "cache_dir"
# The probe's walk: at most this many entries per directory tree (a cache can hold millions).
WALK_LIMIT = 20000


def default_dir(uid: Optional[int] = None) -> str:
    """SGLang's own default, `~/.cache/sglang`, of the server's user (the module's: the launch
    starts the server as itself) from the password database, not from an inherited $HOME."""
    uid = os.geteuid() if uid is None else uid
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = os.path.expanduser("~")
    return os.path.join(home or "/", ".cache", "sglang")


@dataclass(frozen=True)
class Plan:
    """Where each cache of one launch lives. `dir` is the directory the collection checks,
    creates and may clear: None when the operator's env sets SGLANG_CACHE_DIR (theirs to keep)."""
    dir: Optional[str]
    source: str                                   # default | option | env
    variables: Dict[str, str] = field(default_factory=dict)   # every variable -> its path
    by_env: Tuple[str, ...] = ()                  # the variables the operator's env sets (they win)

    @property
    def added(self) -> Dict[str, str]:
        """What the collection puts into the server's environment (never an operator's value)."""
        return {k: v for k, v in self.variables.items() if k not in self.by_env}

    def to_record(self) -> Dict[str, Any]:
        return {"dir": self.dir, "source": self.source, "variables": dict(self.variables),
                "set_by_env": list(self.by_env)}


def plan(cache_dir: Optional[str], user_env: Mapping[str, Any]) -> Plan:
    """The variables the server gets: the operator's own (env) win one by one; the rest derive
    from SGLANG_CACHE_DIR as 0.5.23 derives them - from the operator's SGLANG_CACHE_DIR when env
    sets it, else from `cache_dir` (the option), else from the user's ~/.cache/sglang."""
    env = {k: str(v) for k, v in user_env.items()}
    by_env = tuple(k for k in VARIABLES if k in env)
    if BASE_VARIABLE in env:
        base, managed, source = os.path.expanduser(env[BASE_VARIABLE]), None, "env"
    elif cache_dir:
        base = managed = os.path.normpath(cache_dir)
        source = "option"
    else:
        base = managed = default_dir()
        source = "default"
    variables = {BASE_VARIABLE: env.get(BASE_VARIABLE, base)}
    for name, sub in SUBDIRS:
        variables[name] = env[name] if name in env else (os.path.join(base, sub) if sub else base)
    return Plan(dir=managed, source=source, variables=variables, by_env=by_env)


# --- the directory's safety ------------------------------------------------------------------

def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _inside(path: str, root: str) -> bool:
    root = os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _describe(st: os.stat_result) -> str:
    return "owner %s, mode %04o" % (_record._owner(st.st_uid), stat.S_IMODE(st.st_mode))


def problem(path: str, forbidden: Sequence[str] = ()) -> Optional[str]:
    """Why `path` must not hold the caches (None: safe to use or to create). Stricter than the
    state dir, since the server loads code from it: no symlink anywhere on the path as written
    (name the directory itself), every directory on it and the directory itself root's or this
    user's and not writable by group or others - a sticky shared directory such as /tmp or
    /dev/shm included (anyone can create the name first there, and tmp cleaners empty it) -
    and never inside `forbidden` (the launch's TMPDIR, which the teardown removes)."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return "%s %r must be an absolute path" % (LABEL, path)
    path = os.path.normpath(path)
    if path == "/":
        return "%s must not be the root directory" % LABEL
    for root in forbidden:
        if _inside(path, root):
            return ("%s %s lies inside %s, which the teardown removes: the compiled kernels would go with it"
                    % (LABEL, path, root))
    here = "/"
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate([""] + parts):
        above, here = here, os.path.join(here, part) if part else "/"
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            if not os.access(above, os.W_OK | os.X_OK):  # the launch would fail after the teardown
                return "%s %s cannot be created: %s is not writable by uid %d" % (LABEL, path, above, os.geteuid())
            return None  # created below it, 0700
        except OSError as exc:
            return "%s %s cannot be checked at %s: %s" % (LABEL, path, here, exc.strerror or exc)
        last = i == len(parts)
        what = "is" if last else "lies under %s, which is" % here
        if stat.S_ISLNK(st.st_mode):
            return ("%s %s %s a symlink (%s): name the directory itself (%s)"
                    % (LABEL, path, what, _describe(st), os.path.realpath(path)))
        if not stat.S_ISDIR(st.st_mode):
            return "%s %s %s not a directory" % (LABEL, path, what)
        if not _trusted(st.st_uid):
            return "%s %s %s owned by another user (%s)" % (LABEL, path, what, _describe(st))
        if st.st_mode & 0o022:
            return ("%s %s %s writable by group or others (%s): a cache of code the server loads must lie where "
                    "only root and %s can write" % (LABEL, path, what, _describe(st), _record._owner(os.geteuid())))
    return None


def ensure(path: str, forbidden: Sequence[str] = ()) -> None:
    """The directory, created 0700 (missing parents too) when absent, after `problem` found
    nothing (raises SglangError reason unsafe_dir otherwise, or no_space / io_error)."""
    why = problem(path, forbidden)
    if why:
        raise SglangError(why, reason="unsafe_dir", path=path)
    _record.ensure_dir(path, mode=0o700, label=LABEL)
    why = problem(path, forbidden)  # the new directories judged as the old ones
    if why:
        raise SglangError(why, reason="unsafe_dir", path=path)


# --- what is in it (the probe) ---------------------------------------------------------------

def measure(path: str, limit: int = WALK_LIMIT) -> Dict[str, Any]:
    """Bytes and files under `path`: never following a symlink, never leaving its filesystem,
    at most `limit` entries (`truncated` then, and the figures are a lower bound)."""
    out: Dict[str, Any] = {"path": path, "exists": False, "bytes": 0, "files": 0, "truncated": False}
    try:
        top = os.lstat(path)
    except OSError:
        return out
    if not stat.S_ISDIR(top.st_mode):
        out["error"] = "not a directory"
        return out
    out["exists"] = True
    seen, stack = 0, [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    seen += 1
                    if seen > limit:
                        out["truncated"] = True
                        return out
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if st.st_dev == top.st_dev:
                            stack.append(entry.path)
                    elif stat.S_ISREG(st.st_mode):
                        out["files"] += 1
                        out["bytes"] += st.st_size
        except OSError:
            continue
    return out


def report(cache: Mapping[str, Any], limit: int = WALK_LIMIT,
           walked: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Any]:
    """One launch's caches (its record's `compile_cache`), each variable with its path and size;
    a directory shared by several variables (or launches: `walked`) is walked once."""
    variables = cache.get("variables") or {}
    walked = {} if walked is None else walked
    rows: List[Dict[str, Any]] = []
    for name in VARIABLES:
        path = variables.get(name)
        if not isinstance(path, str) or not path:
            continue
        if path not in walked:
            walked[path] = measure(path, limit)
        row = dict(walked[path], variable=name,
                   set_by="env" if name in (cache.get("set_by_env") or []) else "collection")
        rows.append(row)
    return {"dir": cache.get("dir"), "source": cache.get("source"), "caches": rows}


def for_records(records: Sequence[Mapping[str, Any]], limit: int = WALK_LIMIT) -> List[Dict[str, Any]]:
    """The probe's `compile_caches`: each launch record's caches (`instance` its name); without
    any record that names them, where a launch by this user would put them."""
    walked: Dict[str, Dict[str, Any]] = {}
    out = [dict(report(rec["compile_cache"], limit, walked), instance=rec.get("name"))
           for rec in records if isinstance(rec.get("compile_cache"), Mapping)]
    if not out:
        out.append(dict(report(plan(None, {}).to_record(), limit, walked), instance=None))
    return out


# --- clearing it (an explicit option) --------------------------------------------------------

def clear(path: str, check_mode: bool = False) -> Dict[str, Any]:
    """Empty the cache directory (it stays), through descriptors opened component by component
    without following a symlink (_purge). Check mode only measures. The result names what went
    and what could not."""
    if not os.path.lexists(path):
        return {"dir": path, "existed": False, "entries": 0, "bytes": 0, "cleared": False, "errors": []}
    why = problem(path)
    if why:
        raise SglangError("the compile cache is not cleared: %s" % why, reason="unsafe_dir", path=path)
    checked = _purge.open_checked(path, os.geteuid())
    try:
        names = _purge.listdir(checked)
        size = _purge.tree_size(checked)
        errors: List[str] = []
        if not check_mode and checked.fd is not None:
            for name in names:
                errors.extend(_purge.remove_at(checked.fd, name, checked.dev))
        return {"dir": path, "existed": checked.fd is not None, "entries": len(names), "bytes": size,
                "cleared": not check_mode and checked.fd is not None and not errors, "errors": errors}
    finally:
        checked.close()


# --- the launch's preflight ------------------------------------------------------------------

def check(report: Any, cache: Plan, tmpdir: str) -> None:
    """The preflight's view (`report`: _preflight.Report - ok/fail/warn/note): the collection's
    directory refused (check `dir_safety`: reason unsafe_dir) before anything is stopped; an
    operator's own value that lies where it would not survive, or where others can write, is
    kept (theirs wins) with a warning."""
    if cache.dir is not None:
        why = problem(cache.dir, [tmpdir])
        if why:
            report.fail("dir_safety", why)
            return
        report.ok(LABEL, "compile caches in %s (%s; %s set by the collection)"
                  % (cache.dir, cache.source, ", ".join(sorted(cache.added)) or "no variable"))
    else:
        report.note(LABEL, "compile caches under the env's %s=%s (the operator's own value)"
                    % (BASE_VARIABLE, cache.variables[BASE_VARIABLE]))
    for name in cache.by_env:
        path = os.path.expanduser(cache.variables[name])
        why = problem(path, [tmpdir]) if os.path.isabs(path) else "%s is not an absolute path" % path
        if why:
            report.warn(LABEL, "env %s=%s is used as given, but: %s" % (name, cache.variables[name], why))
