"""Which Python runs sglang, and does it have sglang: resolved explicitly, never guessed from PATH.

`resolve()` runs the interpreter once with a tiny script that reads metadata only (no torch,
no `import sglang`), so a wrong interpreter fails here, loudly, with its own stderr - not later
behind a `2>&1 | grep` (docs/incidents.md). `discover()` finds every sglang install on
the host from its dist-info WITHOUT running anything.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import stat
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

# Globs for discover(); each match is an env root (venv, conda env, prefix) or a lib/pythonX.Y dir.
DEFAULT_SEARCH_PATHS = (
    "/root/*/", "/root/.venv*/", "/opt/*/", "/opt/*/*/", "/home/*/*/", "/home/*/.venv*/",
    "/usr/local/lib/python3*/", "/usr/lib/python3*/",
    # conda / mamba / pyenv environments
    "/opt/conda/envs/*/", "/root/*/envs/*/", "/home/*/*/envs/*/", "/root/.conda/envs/*/",
    "/home/*/.conda/envs/*/", "/root/.pyenv/versions/*/", "/home/*/.pyenv/versions/*/",
    "/root/.local/", "/home/*/.local/",
)

_BEGIN = "@@LLMOPS_INTERP_BEGIN@@"
_END = "@@LLMOPS_INTERP_END@@"

# Runs inside the target interpreter. Metadata and file checks only: find_spec("sglang") does
# not execute sglang/__init__.py (which imports torch in 0.5.23). Python-2-parsable on purpose,
# so an ancient interpreter reports its version instead of a SyntaxError. The dist-info is read
# by hand where importlib.metadata would find it first (a directory on sys.path), and its absence
# is said when no entry of sys.path can hold it otherwise: importing importlib.metadata costs more
# than the rest of the answer. Anything else (a zip or an egg on the path, a finder of its own, an
# unusual file) asks importlib.metadata, as before.
_PROBE_SCRIPT = r"""
import errno, sys, os, json
out = {"python_version": sys.version.split()[0], "executable": sys.executable,
       "prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix)}
loc = None
try:
    import importlib.util
    spec = importlib.util.find_spec("sglang")
except Exception as exc:
    spec = None
    out["find_spec_error"] = "%s: %s" % (type(exc).__name__, exc)
if spec is not None:
    locs = list(spec.submodule_search_locations or [])
    loc = locs[0] if locs else (os.path.dirname(spec.origin) if spec.origin else None)
out["location"] = loc
out["launch_server"] = bool(loc and os.path.isfile(os.path.join(loc, "launch_server.py")))
out["cli_main"] = bool(loc and os.path.isfile(os.path.join(loc, "cli", "main.py")))
out["version"] = None
out["dist_path"] = None
out["console_scripts"] = []


class NotRegular(Exception):
    pass


def read_small(path, cap=262144):
    # never blocks, never follows a final symlink: a FIFO planted as METADATA cannot hang the probe
    import stat
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(path)  # a symlink
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(path)
        return os.read(fd, cap).decode("utf-8", "replace")
    finally:
        os.close(fd)


def by_hand():
    import importlib.machinery
    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is not None and finder is not importlib.machinery.PathFinder:
            return None
    for entry in sys.path:
        root = entry or "."
        if not os.path.isdir(root) or root.lower().endswith(".egg"):
            if os.path.exists(root):
                return None
            continue
        for child in os.listdir(root):
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            name = low.rpartition(".")[0].partition("-")[0]
            for sep in "-.":
                name = name.replace(sep, "_")
            while "__" in name:
                name = name.replace("__", "_")
            if name != "sglang":
                continue
            path = os.path.join(entry, child)
            if not low.endswith(".dist-info") or not os.path.isdir(path):
                return None
            head = read_small(os.path.join(path, "METADATA")).split("\n\n", 1)[0]
            version = [line.split(":", 1)[1].strip() for line in head.splitlines()
                       if line.lower().startswith("version:")]
            if not version:
                return None
            scripts, section = [], None
            if os.path.lexists(os.path.join(path, "entry_points.txt")):
                for line in read_small(os.path.join(path, "entry_points.txt")).splitlines():
                    line = line.strip()
                    if not line or line.startswith("#"):
                        continue
                    if line.startswith("[") and line.endswith("]"):
                        section = line.strip("[]")
                    elif "=" not in line:
                        return None
                    elif section == "console_scripts":
                        scripts.append(line.split("=", 1)[0].strip())
            return version[0], path, scripts
    return False


try:
    found = by_hand()
except NotRegular as exc:
    # importlib.metadata would open the same file with a blocking open(): not tried
    found = "not_regular"
    out["metadata_error"] = "NotRegular: sglang metadata %s is not a regular file" % exc
except Exception:
    found = None
if found == "not_regular":
    pass
elif found:
    out["version"], out["dist_path"], out["console_scripts"] = found
elif found is False:
    out["metadata_error"] = "PackageNotFoundError: No package metadata was found for sglang"
else:
    try:
        try:
            import importlib.metadata as md
        except ImportError:
            import importlib_metadata as md
        dist = md.distribution("sglang")
        out["version"] = dist.version
        path = getattr(dist, "_path", None)
        out["dist_path"] = str(path) if path is not None else None
        out["console_scripts"] = [ep.name for ep in dist.entry_points if ep.group == "console_scripts"]
    except Exception as exc:
        out["metadata_error"] = "%s: %s" % (type(exc).__name__, exc)
sys.stdout.write("__BEGIN__" + json.dumps(out) + "__END__\n")
""".replace("__BEGIN__", _BEGIN).replace("__END__", _END)


@dataclass
class Interpreter:
    """A Python interpreter as it answered: its venv, version and sglang install."""

    path: str
    venv: Optional[str] = None
    is_venv: bool = False
    python_version: Optional[str] = None
    sglang_installed: bool = False
    sglang_version: Optional[str] = None
    sglang_location: Optional[str] = None
    entrypoints: Dict[str, bool] = field(default_factory=lambda: {"launch_server": False, "serve": False})
    serve_script: Optional[str] = None
    install_mtime: Optional[float] = None
    error: Optional[str] = None
    # sys.executable as the interpreter reports it: what really runs behind a shim or symlink.
    executable: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _venv_root_of(python: str) -> Optional[str]:
    """<venv>/bin/python -> <venv> when <venv>/pyvenv.cfg exists (also python beside pyvenv.cfg)."""
    bindir = os.path.dirname(python)
    for root in (os.path.dirname(bindir), bindir):
        if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
            return root
    return None


def _python_in_venv(venv: str) -> str:
    root = os.path.abspath(os.path.expanduser(venv))
    if not os.path.exists(root):
        raise SglangError("venv %s does not exist" % root, reason="venv_missing", path=root)
    if not os.path.isdir(root):
        raise SglangError("venv %s is not a directory" % root, reason="venv_not_dir", path=root)
    for name in ("python", "python3"):
        candidate = os.path.join(root, "bin", name)
        if os.path.lexists(candidate):
            if not os.path.exists(candidate):
                raise SglangError("%s is a broken symlink (-> %s): the venv's base Python is gone"
                                  % (candidate, os.readlink(candidate)), reason="python_missing",
                                  path=candidate)
            return candidate
    raise SglangError("venv %s has no bin/python: not a virtualenv, or a broken one" % root,
                      reason="python_missing", path=root)


def _python_path(python: str) -> str:
    if os.sep not in python:
        # A bare name only because the operator asked for it; resolved once, reported absolute.
        found = shutil.which(python)
        if not found:
            raise SglangError("python %r is not on PATH (%s)" % (python, os.environ.get("PATH", "")),
                              reason="python_missing", path=python)
        return os.path.abspath(found)
    path = os.path.abspath(os.path.expanduser(python))
    if not os.path.lexists(path):
        raise SglangError("python %s does not exist" % path, reason="python_missing", path=path)
    if not os.path.exists(path):
        raise SglangError("python %s is a broken symlink (-> %s)" % (path, os.readlink(path)),
                          reason="python_missing", path=path)
    return path


def _check_executable(path: str) -> None:
    if os.path.isdir(path):
        raise SglangError("python %s is a directory, not an interpreter" % path,
                          reason="python_not_executable", path=path)
    if not os.access(path, os.X_OK):
        raise SglangError("python %s is not executable" % path, reason="python_not_executable", path=path)


def _start_probe(path: str) -> "subprocess.Popen[bytes]":
    try:
        return subprocess.Popen([path, "-c", _PROBE_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, cwd="/")
    except OSError as exc:  # ENOEXEC: a text/binary file that is no program
        raise SglangError("%s cannot be executed as a Python interpreter: %s"
                          % (path, exc.strerror or exc), reason="not_python", path=path)


def _finish_probe(path: str, proc: "subprocess.Popen[bytes]", timeout: float, deadline: float) -> Dict[str, Any]:
    """The probe's answer; `deadline` (monotonic) counts from its start, but a probe that has
    answered while the caller did other work is never timed out for that."""
    try:
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.5))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise SglangError("python %s did not answer within %.0f s" % (path, timeout),
                          reason="python_timeout", path=path)
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace").strip()
    start, end = stdout.find(_BEGIN), stdout.find(_END)
    if proc.returncode != 0 or start < 0 or end < start:
        detail = stderr or stdout.strip()
        # A program that is no Python echoes our `-c` script back as a file name or argument.
        echoed = "import sys, os, json" in detail
        if proc.returncode != 0 and not echoed:
            msg = "python %s failed (exit %d)" % (path, proc.returncode)
        else:
            msg = "%s is not a Python interpreter (it ran but did not answer the probe)" % path
            detail = "" if echoed else detail
        if detail:
            msg += ": %s" % _tail(detail)
        raise SglangError(msg, reason="not_python" if (proc.returncode == 0 or echoed) else "python_failed",
                          path=path, rc=proc.returncode, stderr=stderr, stdout=stdout.strip()[-2000:])
    data = json.loads(stdout[start + len(_BEGIN):end])
    data["_stderr"] = stderr
    return data


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def _mtime(*paths: Optional[str]) -> Optional[float]:
    """Newest mtime among the install's dist-info and key files: changes on every (re)install."""
    best: Optional[float] = None
    for path in paths:
        if not path:
            continue
        try:
            value = os.stat(path).st_mtime
        except OSError:
            continue
        best = value if best is None else max(best, value)
    return best


class Resolving:
    """An interpreter probe under way (`start`): `result()` waits for its answer. The probe
    module reads the process table meanwhile instead of waiting for the interpreter to start."""

    def __init__(self, venv: Optional[str], path: str, timeout: float) -> None:
        self.venv, self.path, self.timeout = venv, path, timeout
        self._deadline = time.monotonic() + timeout
        self._proc = _start_probe(path)

    def result(self) -> "Interpreter":
        return _interpreter(self.venv, self.path, _finish_probe(self.path, self._proc, self.timeout, self._deadline))


def start(venv: Optional[str] = None, python: Optional[str] = None, timeout: float = 30) -> Resolving:
    """resolve(), started: a bad venv or python raises here, the probe's answer comes with
    result()."""
    if venv and python:
        raise SglangError("venv and python are mutually exclusive", reason="bad_input")
    if venv:
        path = _python_in_venv(venv)
    elif python:
        path = _python_path(python)
    else:
        import sys
        path = os.path.abspath(sys.executable)
    _check_executable(path)
    return Resolving(venv, path, timeout)


def resolve(venv: Optional[str] = None, python: Optional[str] = None, timeout: float = 30) -> Interpreter:
    """The interpreter to run; default: the python running this module (sys.executable is the
    ansible-chosen one on a managed host). Missing sglang is data, not an error."""
    return start(venv, python, timeout).result()


def _interpreter(venv: Optional[str], path: str, data: Dict[str, Any]) -> Interpreter:
    """The Interpreter from the probe's answer `data` for `path`."""
    root = os.path.abspath(os.path.expanduser(venv)) if venv else _venv_root_of(path)
    if root is None and data.get("prefix") and data.get("prefix") != data.get("base_prefix"):
        root = data["prefix"]
    location = data.get("location")
    installed = bool(location and data.get("launch_server"))
    script = None
    for bindir in ([os.path.join(root, "bin")] if root else []) + [os.path.dirname(path)]:
        if os.path.isfile(os.path.join(bindir, "sglang")):
            script = os.path.join(bindir, "sglang")
            break
    errors = [data[k] for k in ("find_spec_error",) if data.get(k)]
    if location and not data.get("launch_server"):
        errors.append("sglang package at %s has no launch_server.py" % location)
    if data.get("_stderr"):
        errors.append(data["_stderr"])
    return Interpreter(
        path=path, venv=root, is_venv=bool(root), python_version=data.get("python_version"),
        sglang_installed=installed, sglang_version=data.get("version") if location else None,
        sglang_location=location,
        entrypoints={"launch_server": installed,
                     "serve": bool(installed and data.get("cli_main") and script
                                   and "sglang" in (data.get("console_scripts") or ["sglang"]))},
        serve_script=script if location else None,
        install_mtime=_mtime(data.get("dist_path"), location,
                             os.path.join(location, "launch_server.py") if location else None,
                             os.path.join(location, "srt", "server_args.py") if location else None),
        error="; ".join(errors) or None,
        executable=data.get("executable"),
    )


# --- discovery from metadata (nothing is executed) -----------------------------------------

# A dist-info file worth reading is small; one larger is cut here (only its head is read).
METADATA_CAP = 256 * 1024


def read_small(path: str, cap: int = METADATA_CAP) -> Optional[str]:
    """The first `cap` bytes of the regular file `path`, or None: never blocks and never follows a
    final symlink (O_NONBLOCK|O_NOFOLLOW, S_ISREG on the descriptor), so another user's FIFO or
    device planted as METADATA cannot hang a root module."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: List[bytes] = []
        left = cap
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _metadata_version(dist_info: str) -> Optional[str]:
    for name in ("METADATA", "PKG-INFO"):
        text = read_small(os.path.join(dist_info, name))
        if text is None:
            continue
        for line in text.splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                break
    base = os.path.basename(dist_info)
    return base[len("sglang-"):].rsplit(".", 1)[0] or None


def _site_dirs(root: str) -> List[str]:
    root = root.rstrip("/") or "/"
    pats = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib64/python3*/site-packages",
            "site-packages", "dist-packages", "local/lib/python3*/dist-packages")
    out: List[str] = []
    for pat in pats:
        out.extend(p for p in glob.glob(os.path.join(root, pat)) if os.path.isdir(p))
    return out


def _python_for_site(site: str) -> Optional[str]:
    """site-packages -> the interpreter that uses it (<prefix>/bin/pythonX.Y, else python3)."""
    libdir = os.path.dirname(site)  # .../lib/pythonX.Y or .../lib/python3
    pyname = os.path.basename(libdir)  # pythonX.Y
    prefix = os.path.dirname(os.path.dirname(libdir))
    # A venv is named by its bin/python (what operators type); a prefix by its exact version.
    names = ("python", "python3", pyname) if os.path.isfile(os.path.join(prefix, "pyvenv.cfg")) \
        else (pyname, "python3", "python")
    candidates = [os.path.join(prefix, "bin", n) for n in names]
    if os.path.basename(site) == "dist-packages" or prefix.endswith("/.local"):
        # Debian: /usr/local/lib/pythonX.Y/dist-packages belongs to /usr/bin/pythonX.Y;
        # user site ~/.local belongs to the system python.
        candidates += [os.path.join("/usr/bin", n) for n in (pyname, "python3")]
    for cand in candidates:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def discover(search_paths: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """[{python, venv, sglang_version, location, dist_info}] for every sglang install found
    under the search globs, read from its dist-info (no interpreter is started)."""
    seen: set = set()
    found: List[Dict[str, Any]] = []
    for pattern in search_paths or DEFAULT_SEARCH_PATHS:
        for root in sorted(glob.glob(os.path.expanduser(pattern))):
            if not os.path.isdir(root):
                continue
            sites = _site_dirs(root)
            if os.path.basename(root.rstrip("/")) in ("site-packages", "dist-packages"):
                sites.append(root)
            for site in sites:
                for dist_info in sorted(glob.glob(os.path.join(site, "sglang-*.dist-info"))):
                    key = os.path.realpath(dist_info)
                    if key in seen:
                        continue
                    seen.add(key)
                    python = _python_for_site(site)
                    location = os.path.join(site, "sglang")
                    found.append({
                        "python": python,
                        "venv": _venv_root_of(python) if python else None,
                        "sglang_version": _metadata_version(dist_info),
                        "location": location if os.path.isdir(location) else None,
                        "dist_info": dist_info,
                    })
    return found


def running_interpreter_roots() -> List[str]:
    """Install roots of the interpreters that run sglang servers right now: a venv in an
    unusual place is still named when the operator's python lacks sglang."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs  # only needed here

    roots = set()
    for proc in _procs.snapshot().values():
        argv0 = proc.cmdline[0] if proc.cmdline else ""
        if os.path.isabs(argv0) and _procs.sglang_reason(proc) and "python" in os.path.basename(argv0):
            roots.add(os.path.dirname(os.path.dirname(argv0)) + "/")
    return sorted(roots)


def where_is_sglang(interp: Interpreter, search_paths: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """Other installs of sglang, for "the given python lacks sglang but X has version Y": only
    those nobody but root or this user can replace (advice to run another user's python as root
    would hand that user root)."""
    own = {os.path.abspath(interp.path)}
    own_loc = os.path.realpath(interp.sglang_location) if interp.sglang_location else None
    out = []
    patterns = list(search_paths or DEFAULT_SEARCH_PATHS) + running_interpreter_roots()
    for item in discover(patterns):
        if item["python"] and os.path.abspath(item["python"]) in own:
            continue
        if own_loc and item["location"] and os.path.realpath(item["location"]) == own_loc:
            continue
        if untrusted_install(item) is not None:
            continue
        out.append(item)
    return out


def untrusted_install(item: Dict[str, Any]) -> Optional[str]:
    """Why an install found by discover() must not be suggested (see _deps.untrusted_reason),
    judged by its interpreter, else by its package directory; None when it may be."""
    if item.get("python"):
        return _deps.interpreter_reason(item["python"])
    path = item.get("location") or item.get("dist_info")
    return _deps.untrusted_reason(path) if path else "no path"


def _version_of(python: str, venv: Optional[str], installs: List[Dict[str, Any]]) -> Optional[str]:
    """The sglang version of the install behind `venv` (or `python`), however the path is spelled
    (discover() lists an install once, under the first path it was found by)."""
    for item in installs:
        if (venv and item.get("venv") and os.path.realpath(item["venv"]) == os.path.realpath(venv)) or \
                (not venv and item.get("python") and os.path.abspath(item["python"]) == os.path.abspath(python)):
            return item.get("sglang_version")
    return None


def in_use(servers: List[Dict[str, Any]], records: List[Dict[str, Any]], installs: List[Dict[str, Any]],
           exclude: Optional[str] = None, user: Optional[str] = None,
           untrusted: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """The interpreters this host's sglang instances run with, best first: running servers
    (launched instances and those of `user` first), then launch records whose server is gone.
    [{python, venv, sglang_version, source}]; `exclude` (the interpreter being diagnosed) and
    its venv are left out. This, not just any sglang install, is what a broken one should use.

    Only interpreters nobody but root or this module's user can replace are returned (another
    user's venv, run as root on that advice, would hand that user root); the others go to
    `untrusted`, each with `why` (for example "owned by user alice (/home/alice)")."""
    skip = {os.path.abspath(exclude)} if exclude else set()
    skip_venv = _venv_root_of(os.path.abspath(exclude)) if exclude else None
    found: List[Dict[str, Any]] = []

    def add(python: Optional[str], venv: Optional[str], version: Optional[str], source: str) -> None:
        if not python or not os.path.isabs(python) or os.path.abspath(python) in skip:
            return
        if skip_venv and venv and os.path.abspath(venv) == os.path.abspath(skip_venv):
            return
        path = os.path.abspath(python)
        if any(f["python"] == path for f in found + (untrusted if untrusted is not None else [])):
            return
        item = {"python": path, "venv": venv, "sglang_version": version or _version_of(python, venv, installs),
                "source": source}
        why = _deps.interpreter_reason(path)
        if why is None:
            found.append(item)
        elif untrusted is not None:
            untrusted.append(dict(item, why=why))

    def order(server: Dict[str, Any]) -> Any:
        return (server.get("user") != user if user else False, not server.get("instance"), server.get("pid") or 0)

    # A server in another PID namespace (a container) names a path inside the container.
    for server in sorted((s for s in servers if s.get("main") and not s.get("other_namespace")), key=order):
        interp = server.get("interpreter") or {}
        name = "the running instance '%s' (pid %s)" % (server["instance"], server["pid"]) if server.get("instance") \
            else "the running sglang server pid %s (user %s)" % (server.get("pid"), server.get("user"))
        add(interp.get("cmdline"), interp.get("venv"), None, name)
    for rec in records:
        if not rec.get("alive"):
            add(rec.get("interpreter"), rec.get("venv"), rec.get("sglang_version"),
                "the last launch of instance '%s' (launch record %s)" % (rec.get("name"), rec.get("path")))
    return found
