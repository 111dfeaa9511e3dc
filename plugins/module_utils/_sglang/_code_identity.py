"""PRIVATE to llmops.sglang. The code a server imports, as it is on disk: its code identity.

A patch to a file of the sglang package (the incident began with one, in
`srt/models/deepseek_v2.py`) changes no fingerprint input - interpreter, version, entry point,
arguments and environment all stay the same - so the identity is kept beside them in the launch
record, and the plan compares it with what is on disk now (`compare`).

What counts (`build`):
- every file of the sglang package directory the server imports: the one the interpreter
  resolves (`_interpreter`'s `location`), or the first `PYTHONPATH` entry of the server's own
  environment that holds an `sglang` package (it comes before site-packages);
- where that package lives in a source checkout - an editable install or a `PYTHONPATH` entry
  whose directory is inside a git work tree, or a `direct_url.json` of the venv's sglang
  dist-info naming an editable checkout - the work tree's HEAD and the files git reports
  modified under the package (git runs only in a checkout nobody but root or this user can
  change: its config could run programs);
- every file under the paths the operator names (`identity_paths`, e.g. a patch directory on
  `PYTHONPATH`).
Each file by relative path, size and mtime (_file_identity): nothing is read, so the cost is one
stat per file (docs/benchmarks.md).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
from ansible_collections.llmops.sglang.plugins.module_utils._host import _file_identity as _fid

VERSION = 1
GIT_TIMEOUT = 5.0
MAX_NAMED = 50          # modified files (git) and changed files (compare) kept per list
_SITE_DIRS = ("site-packages", "dist-packages")


@dataclass
class Root:
    """One tree of the identity: the package, or a path the operator named."""
    path: str
    kind: str                                   # package | extra
    listing: _fid.Listing = field(default_factory=dict)
    digest: str = ""

    def __post_init__(self) -> None:
        self.digest = self.digest or _fid.digest(self.listing)

    def summary(self) -> Dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "files": len(self.listing), "digest": self.digest}


@dataclass
class CodeIdentity:
    """The code identity read now; `record()` is what the launch record keeps."""
    package: Optional[str]
    source: str                                 # installed | checkout | directory
    roots: List[Root] = field(default_factory=list)
    git: Optional[Dict[str, Any]] = None
    error: Optional[str] = None

    @property
    def digest(self) -> str:
        return _fid.combine(r.digest for r in self.roots)

    def summary(self) -> Dict[str, Any]:
        """For results: no listing."""
        out: Dict[str, Any] = {"package": self.package, "source": self.source,
                               "files": sum(len(r.listing) for r in self.roots), "digest": self.digest,
                               "roots": [r.summary() for r in self.roots], "git": self.git}
        if self.error:
            out["error"] = self.error
        return out

    def record(self) -> Dict[str, Any]:
        out = self.summary()
        out["version"] = VERSION
        for item, root in zip(out["roots"], self.roots):
            item["listing"] = _fid.encode(root.listing)
        return out


# --- where the server's sglang is ----------------------------------------------------------

def _is_package(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "__init__.py")) or os.path.isfile(os.path.join(path, "launch_server.py"))


def package_dir(location: Optional[str], env: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """(the sglang package directory the server imports, how it was found: `pythonpath` or
    `interpreter`). An empty PYTHONPATH entry would be the server's cwd, its private TMPDIR."""
    for entry in (env.get("PYTHONPATH") or "").split(os.pathsep):
        if entry and os.path.isabs(entry) and _is_package(os.path.join(entry, "sglang")):
            return os.path.realpath(os.path.join(entry, "sglang")), "pythonpath"
    return (os.path.realpath(location) if location else None), "interpreter"


def _installed(path: str) -> bool:
    return any(part in _SITE_DIRS for part in path.split(os.sep))


def editable_checkout(venv: Optional[str]) -> Optional[str]:
    """The checkout an editable install of sglang in `venv` points at (PEP 610 direct_url.json)."""
    if not venv:
        return None
    for path in glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "sglang-*.dist-info",
                                       "direct_url.json")):
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        url = data.get("url") if isinstance(data, dict) else None
        editable = isinstance(data.get("dir_info"), dict) and data["dir_info"].get("editable")
        if editable and isinstance(url, str) and url.startswith("file://"):
            return url[len("file://"):] or None
    return None


# --- git, read without trusting what a checkout's owner could change ------------------------

def work_tree(start: str) -> Optional[str]:
    """The git work tree holding `start` (a `.git` directory or file in it or above)."""
    probe = os.path.abspath(start)
    while True:
        if os.path.lexists(os.path.join(probe, ".git")):
            return probe
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def git_dir(root: str) -> Optional[str]:
    dot = os.path.join(root, ".git")
    if os.path.isdir(dot):
        return dot
    text = _read(dot) or ""  # a worktree's or submodule's `.git` file: "gitdir: <path>"
    if text.startswith("gitdir:"):
        path = text[len("gitdir:"):].strip()
        return os.path.normpath(os.path.join(root, path))
    return None


def head(gdir: str) -> Tuple[Optional[str], Optional[str]]:
    """(commit, branch) from HEAD, its ref file or packed-refs: read by hand, git is not run."""
    text = _read(os.path.join(gdir, "HEAD"))
    if not text:
        return None, None
    if not text.startswith("ref:"):
        return text, None
    ref = text[len("ref:"):].strip()
    branch = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref
    common = _read(os.path.join(gdir, "commondir"))
    dirs = [gdir] + ([os.path.normpath(os.path.join(gdir, common))] if common else [])
    for base in dirs:
        sha = _read(os.path.join(base, ref))
        if sha:
            return sha, branch
    for base in dirs:
        for line in (_read(os.path.join(base, "packed-refs")) or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref:
                return parts[0], branch
    return None, branch


def _git_program() -> Tuple[Optional[str], Optional[str]]:
    path = shutil.which("git", path="/usr/bin:/bin:/usr/local/bin")
    if not path:
        return None, "git is not installed"
    why = _deps.untrusted_reason(path)
    return (None, "git %s is not trusted: %s" % (path, why)) if why else (path, None)


def modified(root: str, gdir: str, under: str, timeout: float = GIT_TIMEOUT) -> Tuple[Optional[List[str]], Optional[str]]:
    """(paths git reports modified or untracked under `under`, relative to the work tree;
    or None and why not). git runs only when nobody but root or this user can change the work
    tree and its git directory (a repository's config can name programs git then runs), without
    writing anything (no optional locks) and without an fsmonitor."""
    for path in (root, gdir):
        why = _deps.untrusted_reason(path)
        if why:
            return None, "not asked of git: the checkout is not trusted (%s)" % why
    git, why = _git_program()
    if git is None:
        return None, why
    rel = os.path.relpath(under, root)
    argv = [git, "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false", "-C", root, "status",
            "--porcelain=v1", "-z", "--untracked-files=normal", "--ignore-submodules=all", "--", rel]
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0", "HOME": os.environ.get("HOME", "/"),
           "GIT_TERMINAL_PROMPT": "0"}
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              env=env, timeout=timeout, cwd="/", check=False)
    except subprocess.TimeoutExpired:
        return None, "git status took more than %.0f s" % timeout
    except OSError as exc:
        return None, "git could not run: %s" % (exc.strerror or exc)
    if proc.returncode != 0:
        return None, "git status failed: %s" % proc.stderr.decode("utf-8", "replace").strip()[-300:]
    out: List[str] = []
    fields = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(fields):
        item = fields[i]
        i += 1
        if len(item) < 4:
            continue
        out.append(item[3:])
        if item[0] in "RC":  # a rename or copy is followed by its source path
            i += 1
    return sorted(out), None


def git_state(package: str, checkout: Optional[str], run_git: bool = True) -> Optional[Dict[str, Any]]:
    """{root, head, branch, modified, modified_error} of the work tree holding the package (or
    the editable checkout); None when it is not in one."""
    root = work_tree(checkout or package)
    gdir = git_dir(root) if root else None
    if root is None or gdir is None:
        return None
    sha, branch = head(gdir)
    state: Dict[str, Any] = {"root": root, "head": sha, "branch": branch, "modified": None, "modified_error": None}
    if run_git:
        under = package if (package == root or package.startswith(root.rstrip(os.sep) + os.sep)) else root
        files, why = modified(root, gdir, under)
        state["modified"] = files[:MAX_NAMED] if files is not None else None
        if files is not None and len(files) > MAX_NAMED:
            state["modified_more"] = len(files) - MAX_NAMED
        state["modified_error"] = why
    return state


# --- the identity -----------------------------------------------------------------------------

def build(location: Optional[str], env: Mapping[str, str], venv: Optional[str] = None,
          extra_paths: Sequence[str] = (), run_git: bool = True) -> CodeIdentity:
    """The code identity of a server launched from the interpreter whose sglang is at
    `location`, with environment `env` and the operator's `extra_paths`."""
    package, how = package_dir(location, env)
    if package is None:
        return CodeIdentity(package=None, source="unknown", error="the interpreter resolves no sglang package")
    checkout = editable_checkout(venv) if how == "interpreter" else None
    installed = _installed(package)
    git = None if (installed and not checkout) else git_state(package, checkout, run_git)
    source = "checkout" if git else ("installed" if installed else "directory")
    roots = [Root(package, "package", _fid.walk(package))]
    roots += [Root(os.path.abspath(p), "extra", _fid.walk(p)) for p in extra_paths]
    return CodeIdentity(package=package, source=source, roots=roots, git=git)


def from_record(recorded: Mapping[str, Any], run_git: bool = True) -> CodeIdentity:
    """The identity on disk now of the trees a record names (the probe: no interpreter is asked)."""
    roots = [Root(str(r.get("path")), str(r.get("kind") or "extra"), _fid.walk(str(r.get("path"))))
             for r in recorded.get("roots") or [] if isinstance(r, dict) and r.get("path")]
    package = recorded.get("package")
    git = None
    if isinstance(recorded.get("git"), dict) and package:
        git = git_state(str(package), str(recorded["git"].get("root") or package), run_git)
    return CodeIdentity(package=package, source=str(recorded.get("source") or "unknown"), roots=roots, git=git)


def _short(sha: Any) -> str:
    return str(sha)[:12] if sha else "?"


def compare(recorded: Any, now: CodeIdentity) -> Dict[str, Any]:
    """What differs between the identity a record keeps and the one on disk now:
    {state: same | changed | unknown, why (unknown), files: {modified, added, removed},
    summary (`srt/models/deepseek_v2.py (+1 file)`), git (a HEAD that moved)}. Paths are
    relative to the package; a named path's own files are given under it."""
    if not isinstance(recorded, Mapping) or recorded.get("version") != VERSION:
        return {"state": "unknown", "why": "the launch record keeps no code identity"}
    if recorded.get("error") or now.error:
        return {"state": "unknown", "why": str(recorded.get("error") or now.error)}
    if recorded.get("digest") == now.digest:
        return {"state": "same"}
    kept = {(r.get("kind"), r.get("path") if r.get("kind") == "extra" else None): r
            for r in recorded.get("roots") or [] if isinstance(r, dict)}
    diff: Dict[str, List[str]] = {"modified": [], "added": [], "removed": []}
    for root in now.roots:
        item = kept.get((root.kind, root.path if root.kind == "extra" else None))
        if item is None:
            continue  # a path named since that launch: not known then, so no change by itself
        if item.get("digest") == root.digest:
            continue
        before = _fid.decode(str(item.get("listing") or ""))
        if before is None:
            return {"state": "unknown", "why": "the launch record's code listing cannot be read"}
        for kind, paths in _fid.changes(before, root.listing).items():
            diff[kind].extend(p if root.kind == "package" else (os.path.join(root.path, p) if p else root.path)
                              for p in paths)
    named = _fid.names(diff)
    if not named:
        return {"state": "same"}
    out: Dict[str, Any] = {"state": "changed", "summary": _fid.describe(named),
                           "files": {k: v[:MAX_NAMED] for k, v in diff.items()}, "count": len(named)}
    before_git = recorded.get("git") if isinstance(recorded.get("git"), Mapping) else None
    if before_git and now.git and before_git.get("head") != now.git.get("head"):
        out["git"] = "git HEAD %s -> %s" % (_short(before_git.get("head")), _short(now.git.get("head")))
    return out
