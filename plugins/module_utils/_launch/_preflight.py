"""Everything that must hold BEFORE a launch (and before a restart stops the old server).

Each check appends one entry to a `Report`; a failed check adds a precise sentence to
`errors`. All checks run even after a failure, so the operator sees every problem at once
instead of fixing them one launch at a time.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _interpreter
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _introspect
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns
from ansible_collections.llmops.sglang.plugins.module_utils._host import _portowner
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

ENTRYPOINTS = ("auto", "launch_server", "serve")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_MARKERS = (_procs.MARKER_INSTANCE, _procs.MARKER_LAUNCH_ID, _procs.MARKER_STATE_DIR)
# Checks whose failure has a reason code of its own (when they are the only failures).
_REASONS = {"space": "no_space", "shm": "no_space", "port_free": "port_busy", "port_holders": "port_busy",
            "dir_safety": "unsafe_dir"}
# /dev/shm a new server needs free by default: a floor that catches a full or tiny /dev/shm (a
# container's 64 MiB default) before anything is stopped, not a sizing guide - SGLang's segments,
# torch's tensors between processes and NCCL's intra-node buffers grow with the ranks and the load.
SHM_BASE_MB = 128.0
SHM_PER_RANK_MB = 16.0


@dataclass
class Report:
    """Every preflight check with its outcome, the errors and the warnings."""
    checks: List[Dict[str, str]] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    def ok(self, name: str, msg: str) -> None:
        self.checks.append({"name": name, "status": "ok", "msg": msg})

    def fail(self, name: str, msg: str) -> None:
        self.checks.append({"name": name, "status": "failed", "msg": msg})
        self.errors.append(msg)

    def warn(self, name: str, msg: str) -> None:
        self.checks.append({"name": name, "status": "warning", "msg": msg})
        self.warnings.append(msg)

    def note(self, name: str, msg: str) -> None:
        self.checks.append({"name": name, "status": "note", "msg": msg})

    def skip(self, name: str, msg: str) -> None:
        self.checks.append({"name": name, "status": "skipped", "msg": msg})

    def reason(self) -> str:
        """The failure's reason code: a check's own code when every failed check shares it
        (`no_space`, `port_busy`), else `preflight_failed`."""
        codes = {_REASONS.get(c["name"], "preflight_failed") for c in self.checks if c["status"] == "failed"}
        return codes.pop() if len(codes) == 1 else "preflight_failed"

    def to_dict(self) -> Dict[str, Any]:
        return {"checks": list(self.checks), "errors": list(self.errors), "warnings": list(self.warnings)}


# --- plain parameters ------------------------------------------------------------------------

def check_port_param(report: Report, port: Any) -> Optional[int]:
    try:
        value = _ports.validate_port(port)
    except ValueError as exc:
        report.fail("port", "port: %s" % exc)
        return None
    report.ok("port", "port %d is a valid TCP port" % value)
    span = _ports.ephemeral_range(value)
    if span is not None:
        report.warn("port_range", "port %d lies in the kernel's ephemeral range %d-%d "
                    "(net.ipv4.ip_local_port_range): an outgoing connection can take it while the "
                    "server is down and the relaunch then fails to bind; use a port below %d or add "
                    "it to net.ipv4.ip_local_reserved_ports" % (value, span[0], span[1], span[0]))
    return value


def check_tp_size(report: Report, tp_size: Any) -> Optional[int]:
    try:
        value = int(str(tp_size))
        if str(value) != str(tp_size).strip():
            raise ValueError
    except (TypeError, ValueError):
        report.fail("tp_size", "tp_size %r is not an integer" % (tp_size,))
        return None
    if value < 1:
        report.fail("tp_size", "tp_size must be at least 1, got %d" % value)
        return None
    report.ok("tp_size", "tp_size %d" % value)
    return value


def check_env(report: Report, env: Optional[Mapping[Any, Any]]) -> Dict[str, str]:
    """POSIX names, string values without NUL (YAML booleans are refused: `true` would reach
    the server as 'True'); the instance markers are identity and cannot be set."""
    out: Dict[str, str] = {}
    bad: List[str] = []
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not _ENV_KEY.match(key):
            bad.append("env key %r is not a valid variable name (letters, digits, '_', not starting with a digit)" % (key,))
            continue
        if key in _MARKERS:
            bad.append("env key %s is an instance marker set by the launch itself and cannot be overridden" % key)
            continue
        if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
            shown = _redact.MASK if _redact.is_secret_env(str(key)) else repr(value)
            bad.append("env %s must be a string, got %s %s (quote it in YAML)" % (key, type(value).__name__, shown))
            continue
        text = str(value)
        if "\0" in text:
            bad.append("env %s contains a NUL byte" % key)
            continue
        out[key] = text
    for msg in bad:
        report.fail("env", msg)
    if not bad:
        report.ok("env", "%d environment variable(s) valid" % len(out))
    return out


def check_args(report: Report, args: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    norm, errors = _cliargs.normalize_args(args)
    errors += _cliargs.dedicated_conflicts(norm)
    for msg in errors:
        report.fail("args", msg)
    if not errors:
        report.ok("args", "%d server flag(s) given" % len(norm))
    return norm


def check_log_level(report: Report, args: Mapping[str, Any], allow: bool) -> None:
    quiet = _logpatterns.quiet_flag(args)  # the one rule: sglang_ready judges the log by it too
    if quiet is None:
        return
    flag, level = quiet
    msg = ("%s %s hides the INFO line 'The server is fired up and ready to roll!' that readiness "
           "is judged from" % (flag, level))
    if allow:
        report.warn("log_level", msg + "; allowed by allow_log_level_warning")
    else:
        report.fail("log_level", msg + "; use info, or set allow_log_level_warning: true")


# --- interpreter and sglang ------------------------------------------------------------------

def check_interpreter(report: Report, venv: Optional[str], python: Optional[str], timeout: float) -> Any:
    """The Interpreter, or None. Never a bare `python3` looked up in PATH: that is how the
    incident ran the system python without sglang."""
    if python is not None and not os.path.isabs(python):
        report.fail("interpreter", "python %r must be an absolute path (a name looked up in PATH is how the "
                                   "system python gets used by mistake); give the venv instead" % python)
        return None
    if venv is not None and not os.path.isabs(venv):
        report.fail("interpreter", "venv %r must be an absolute path" % venv)
        return None
    try:
        interp = _interpreter.resolve(venv=venv, python=python, timeout=timeout)
    except SglangError as exc:
        report.fail("interpreter", exc.msg)
        return None
    if getattr(interp, "error", None):
        report.fail("interpreter", "interpreter %s is unusable: %s" % (interp.path, interp.error))
        return None
    if venv is not None and not os.path.abspath(interp.path).startswith(os.path.abspath(venv).rstrip("/") + "/"):
        report.fail("interpreter", "interpreter %s is not inside venv %s" % (interp.path, venv))
        return None
    if interp.is_venv:
        report.ok("interpreter", "interpreter %s (Python %s, venv %s)" % (interp.path, interp.python_version, interp.venv))
    else:
        report.warn("interpreter", "interpreter %s (Python %s) is not a virtualenv" % (interp.path, interp.python_version))
    return interp


def _elsewhere(interp: Any, search_paths: Optional[List[str]]) -> List[Dict[str, Any]]:
    try:
        return list(_interpreter.where_is_sglang(interp, search_paths=search_paths) or [])
    except SglangError:
        return []


def check_sglang(report: Report, interp: Any, search_paths: Optional[List[str]]) -> bool:
    if interp.sglang_installed:
        report.ok("sglang", "sglang %s importable from %s (%s)" % (
            interp.sglang_version, interp.path, interp.sglang_location))
        return True
    found = [f for f in _elsewhere(interp, search_paths) if f.get("python") != interp.path]
    msg = ("interpreter %s cannot import sglang: `%s -m sglang.launch_server` would fail with "
           "'No module named sglang.launch_server'" % (interp.path, interp.path))
    if found:
        where = "; ".join("sglang %s in venv %s (python %s)" % (f.get("sglang_version"), f.get("venv") or "-", f.get("python"))
                          for f in found)
        best = found[0].get("venv") or found[0].get("python")
        msg += "; sglang is installed in: %s; set venv: %s" % (where, best)
    else:
        msg += "; no other interpreter with sglang was found (searched: %s)" % (
            ", ".join(search_paths) if search_paths else "default locations")
    report.fail("sglang", msg)
    return False


def choose_entrypoint(report: Report, interp: Any, wanted: str) -> Tuple[Optional[str], List[str]]:
    """(entrypoint name, argv prefix). `serve` runs the venv's `sglang` console script (the
    real wheel's entry point sglang.cli.main:main has no `python -m` form)."""
    have = dict(getattr(interp, "entrypoints", {}) or {})
    script = getattr(interp, "serve_script", None)
    order = ["launch_server", "serve"] if wanted == "auto" else [wanted]
    for entry in order:
        if entry == "launch_server" and have.get("launch_server"):
            report.ok("entrypoint", "entry point: %s -m sglang.launch_server" % interp.path)
            return entry, [interp.path, "-m", "sglang.launch_server"]
        if entry == "serve" and have.get("serve") and script:
            report.ok("entrypoint", "entry point: %s serve" % script)
            return entry, [script, "serve"]
    if wanted == "serve" and have.get("serve") and not script:
        report.fail("entrypoint", "entrypoint serve needs the `sglang` console script of %s, which is missing"
                    % (interp.venv or interp.path))
    else:
        report.fail("entrypoint", "sglang %s at %s has no %s entry point" % (
            interp.sglang_version, interp.path, "launch_server or serve" if wanted == "auto" else wanted))
    return None, []


def check_flags(report: Report, interp: Any, args: Mapping[str, Any], cache_dir: Optional[str],
                timeout: float) -> Optional[Dict[str, Dict[str, Any]]]:
    """Every flag in args against the argparse parser of THAT sglang version."""
    try:
        data = _introspect.introspect(interp, cache_dir=cache_dir, timeout=timeout)
    except SglangError as exc:
        stderr = (exc.details or {}).get("stderr")
        tail = (" (stderr: %s)" % stderr.strip()[-500:]) if stderr else ""
        report.fail("flags", "cannot read the flags of sglang %s at %s: %s%s"
                    % (interp.sglang_version, interp.path, exc.msg, tail))
        return None
    flags = data.get("flags") or {}
    for warning in data.get("warnings") or []:  # e.g. the launcher failed and a fallback parser was read
        report.warn("flags", warning)
    errors = _cliargs.validate_against_flags(args, flags, interp.sglang_version or data.get("sglang_version") or "")
    errors += [e for e in _cliargs.dedicated_conflicts(args, flags)
               if e not in _cliargs.dedicated_conflicts(args)]  # aliases only: the plain ones are reported already
    for msg in errors:
        report.fail("flags", msg)
    if not errors:
        report.ok("flags", "%d flag(s) valid for sglang %s (%d known%s)" % (
            len(args), interp.sglang_version, len(flags), ", cached" if data.get("cached") else ""))
    return flags


# --- the host --------------------------------------------------------------------------------

def check_model_path(report: Report, model_path: str) -> str:
    """A local directory with config.json (or a .gguf file), or a hub id `org/name`.
    Local paths come back absolute: the server's cwd is not the task's."""
    if not isinstance(model_path, str) or not model_path.strip():
        report.fail("model_path", "model_path is empty")
        return model_path
    path = os.path.expanduser(model_path)
    if os.path.exists(path):
        path = os.path.abspath(path)
        if os.path.isdir(path):
            if not os.path.isfile(os.path.join(path, "config.json")):
                report.fail("model_path", "model_path %s is a directory without config.json" % path)
            elif not os.access(path, os.R_OK | os.X_OK):
                report.fail("model_path", "model_path %s is not readable by uid %d" % (path, os.geteuid()))
            else:
                report.ok("model_path", "model_path %s has config.json" % path)
        elif path.endswith(".gguf"):
            report.ok("model_path", "model_path %s is a GGUF file" % path)
        else:
            report.fail("model_path", "model_path %s is a file, not a model directory" % path)
        return path
    if not model_path.startswith(("/", ".", "~")) and _HUB_ID.match(model_path):
        report.note("model_path", "model_path %s is not a local path: treated as a hub id (not checked)" % model_path)
        return model_path
    report.fail("model_path", "model_path %s does not exist" % path)
    return path


def check_identity_paths(report: Report, paths: Optional[List[str]]) -> None:
    """Each path the operator names as part of the server's code (identity_paths) exists: a
    misspelt one would count nothing, silently."""
    bad = []
    for path in paths or []:
        if not isinstance(path, str) or not os.path.isabs(path):
            bad.append("identity_paths: %r must be an absolute path" % (path,))
        elif not os.path.exists(path):
            bad.append("identity_paths: %s does not exist" % path)
    for msg in bad:
        report.fail("identity_paths", msg)
    if paths and not bad:
        report.ok("identity_paths", "%d path(s) count as the server's code" % len(paths))


def _visible(gpus: List[_gpus.Gpu], env: Mapping[str, str]) -> Tuple[int, List[str]]:
    """(GPUs CUDA will show the server, entries of CUDA_VISIBLE_DEVICES naming no GPU here).
    CUDA stops at the first entry that names no device, so only the entries before it count."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return len(gpus), []
    known = {str(g.index) for g in gpus} | {g.uuid for g in gpus}
    visible, unknown = 0, []
    for entry in (e.strip() for e in cvd.split(",")):
        if not entry:
            continue
        if entry in known or any(g.uuid.startswith(entry) for g in gpus if entry.startswith("GPU-")):
            if not unknown:
                visible += 1
        else:
            unknown.append(entry)
    return visible, unknown


def check_gpus(report: Report, tp_size: int, backend: str, env: Mapping[str, str],
               args: Mapping[str, Any], enabled: bool = True) -> None:
    if not enabled:
        report.note("gpus", "GPU check disabled (gpu_check: false)")
        return
    gpu_report = _gpus.query_gpus(backend)
    if gpu_report.backend == "none":
        if _gpu_backend(backend) == "none":  # the operator turned the reading off
            report.note("gpus", "GPUs not checked: %s" % (gpu_report.note or "no GPU backend"))
            return
        # The check is on but nothing can answer it: refused here, before a restart stops the old
        # server for a tp_size this host may not have.
        devices = "" if glob.glob("/dev/nvidia[0-9]*") else "; no /dev/nvidia* device files"
        report.fail("gpus", "GPUs cannot be checked (%s%s): tp_size %d needs GPUs that nothing on this host can "
                    "count (gpu_backend %s); install nvidia-ml-py or nvidia-smi, or set gpu_check: false (emulators, "
                    "CPU servers) or gpu_backend: none to launch without the check"
                    % (gpu_report.note or "no GPU backend", devices, tp_size, backend))
        return
    nnodes = _int_or(args.get("--nnodes"), 1)
    base = _int_or(args.get("--base-gpu-id"), 0)
    need = max(1, -(-tp_size // max(nnodes, 1))) + base
    visible, unknown = _visible(gpu_report.gpus, env)
    if unknown:
        report.fail("gpus", "CUDA_VISIBLE_DEVICES names %s, which %s no GPU on this host (GPUs: %s)"
                    % (", ".join(unknown), "is" if len(unknown) == 1 else "are",
                       ", ".join(str(g.index) for g in gpu_report.gpus) or "none"))
    if visible < need:
        report.fail("gpus", "tp_size %d needs %d GPU(s) on this node (nnodes %d, base-gpu-id %d) but %d %s visible (%s)"
                    % (tp_size, need, nnodes, base, visible, "is" if visible == 1 else "are", gpu_report.backend))
    elif not unknown:
        report.ok("gpus", "%d GPU(s) visible via %s, %d needed" % (visible, gpu_report.backend, need))


def _gpu_backend(backend: str) -> str:
    """The backend a query really uses (`auto` defers to LLMOPS_SGLANG_GPU_BACKEND, as _gpus does)."""
    return os.environ.get(_gpus.ENV_BACKEND, backend) if backend == "auto" else backend


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


FOREIGN_POLICIES = ("fail", "kill")


other_pid_namespace = _portowner.other_pid_namespace


def _holder_kind(pid: int, ident: Optional[_portowner.LaunchIdentity]) -> Tuple[bool, Optional[str]]:
    """(this instance?, why it is an sglang server process of the module's user, or None).
    The instance is judged by the one ownership rule that sglang_ready uses (_portowner).
    Another user's process, or one in another PID namespace (a container), never counts as
    sglang here: a restart's teardown would not (and must not) stop it, and its command line
    proves nothing."""
    if ident is not None and _portowner.ownership(pid, ident) is not None:
        return True, "this instance"
    proc = _procs.read_proc(pid)
    if proc is None or proc.uid != os.geteuid() or other_pid_namespace(pid):
        return False, None
    why = _procs.sglang_reason(proc)
    if why is None:
        marker = _procs.marker_of(pid) or {}
        if marker.get(_procs.MARKER_INSTANCE):
            why = "llmops instance %s" % marker[_procs.MARKER_INSTANCE]
    return False, why


def port_holders(port: int, record: Optional[Mapping[str, Any]] = None) -> List[Dict[str, Any]]:
    """Every process listening on `port` (any address), described with secrets masked and
    labelled: `instance` (the recorded launch), `sglang` (why it is an sglang server of this
    user) and `foreign` (neither: a restart must not stop it unless told to)."""
    ident = _portowner.LaunchIdentity.from_record(record) if record else None
    holders = []
    for listener in _ports.listeners([port]):
        if not listener.pids:
            holders.append({"pid": None, "user": None, "cmdline": [], "address": listener.address,
                            "instance": False, "sglang": None, "foreign": True,
                            "note": "owner not visible (another user's process)"})
        for pid in listener.pids:
            proc = _procs.read_proc(pid)
            ours, why = _holder_kind(pid, ident)
            holder = {"pid": pid, "user": proc.user if proc else None,
                      "cmdline": _redact.mask_cmdline(proc.cmdline) if proc else [],
                      "address": listener.address, "instance": ours, "sglang": why, "foreign": why is None}
            if not ours and other_pid_namespace(pid):
                holder["note"] = "in another PID namespace (a container)"
            holders.append(holder)
    return holders


def check_port(report: Report, host: str, port: int, record: Optional[Mapping[str, Any]],
               running: bool) -> Tuple[str, List[Dict[str, Any]]]:
    """('free' | 'instance' | 'busy', holders). The port may be held by this same instance
    (the recorded, still-alive launch); anything else holding it is another holder."""
    reason = _ports.can_bind(host, port)
    own = record if (running and record and record.get("port") == port) else None
    holders = port_holders(port, own)
    if reason is None and not holders:
        report.ok("port_free", "port %d is free on %s" % (port, host))
        return "free", []
    if own is not None and holders and all(h["instance"] for h in holders):
        report.ok("port_free", "port %d is held by instance %r itself (pid %s)" % (
            port, own.get("name"), ", ".join(str(p) for p in sorted({h["pid"] for h in holders}))))
        return "instance", holders
    if reason is None:
        # Bindable on `host` but someone listens on another address of the same port.
        report.warn("port_free", "port %d is bindable on %s but also listened on by %s" % (
            port, host, describe_holders(holders)))
        return "free", holders
    report.fail("port_free", "port %d on %s is not available (%s): held by %s" % (
        port, host, reason, describe_holders(holders) or "an unknown process"))
    return "busy", holders


def check_foreign_holders(report: Report, port: int, holders: List[Dict[str, Any]], policy: str) -> bool:
    """A listener on the port that is neither this instance nor an sglang server of this user
    (any address: a restart's teardown stops every listener of its ports) is refused unless
    the operator opted in with foreign_port_holders: kill. True when refused."""
    foreign = [h for h in holders if h.get("foreign")]
    if not foreign:
        return False
    text = "port %d is held by %s, which is not an sglang server of user %s" % (
        port, describe_holders(foreign), _procs.username(os.geteuid()))
    if policy == "kill":
        report.warn("port_holders", text + "; a restart's teardown will stop it (foreign_port_holders: kill)")
        return False
    report.fail("port_holders", text + ": nothing was stopped; stop it yourself, choose another port, or set "
                "foreign_port_holders: kill to let a restart stop it")
    return True


def describe_holder(h: Mapping[str, Any]) -> str:
    if h.get("pid") is None:
        return "a process not visible to uid %d on %s" % (os.geteuid(), h.get("address"))
    label = " [foreign]" if h.get("foreign") else ""
    note = ", %s" % h["note"] if h.get("note") else ""
    return "pid %s (user %s%s: %s)%s" % (h["pid"], h.get("user"), note,
                                         _redact.describe_cmdline(h.get("cmdline") or [], limit=200), label)


def describe_holders(holders: List[Dict[str, Any]]) -> str:
    return "; ".join(describe_holder(h) for h in holders)


# --- free space ------------------------------------------------------------------------------

def nearest_existing(path: str) -> str:
    """`path` or its nearest existing ancestor (what a directory not created yet would use)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def _free(path: str) -> Tuple[float, Optional[int]]:
    """(MiB available to this user, inodes available or None when the filesystem has no
    inode limit, e.g. btrfs reports 0 inodes)."""
    st = os.statvfs(path)
    inodes = st.f_favail if st.f_files else None
    return st.f_bavail * st.f_frsize / 1048576.0, inodes


def check_space(report: Report, dirs: Mapping[str, str], min_free_mb: float, min_free_inodes: int) -> List[str]:
    """Free space and inodes where the launch writes (log, state, TMPDIR), before anything is
    stopped: a full disk would otherwise kill the new server after the old one is gone.
    Returns the labels of the directories that are short."""
    short_dirs: List[str] = []
    for label, path in dirs.items():
        if not os.path.isabs(path):
            continue  # check_dirs reports it
        at = nearest_existing(path)
        where = "%s %s" % (label, path) if at == os.path.abspath(path) else \
            "%s %s (measured at %s)" % (label, path, at)
        try:
            mib, inodes = _free(at)
        except OSError as exc:
            report.fail("space", "%s: cannot read free space: %s" % (where, exc.strerror or exc))
            short_dirs.append(label)
            continue
        short = []
        if mib < min_free_mb:
            short.append("%.1f MiB free, below min_free_mb %s" % (mib, _num(min_free_mb)))
        if inodes is not None and inodes < min_free_inodes:
            short.append("%d inodes free, below min_free_inodes %d" % (inodes, min_free_inodes))
        if short:
            report.fail("space", "%s: %s" % (where, ", ".join(short)))
            short_dirs.append(label)
        else:
            report.ok("space", "%s: %.0f MiB and %s inodes free" % (
                where, mib, "unlimited" if inodes is None else inodes))
    return short_dirs


def _num(value: float) -> str:
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


def shm_floor(tp_size: Optional[int], asked: Optional[float]) -> float:
    """MiB of /dev/shm a launch needs free: `asked`, else 128 + 16 per tensor-parallel rank."""
    if asked is not None:
        return float(asked)
    return SHM_BASE_MB + SHM_PER_RANK_MB * (tp_size or 1)


def _mib(count: float) -> str:
    return "%.1f GiB" % (count / 1024.0) if count >= 1024 else "%.1f MiB" % count


def _in_tree(path: str, roots: List[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def check_shm(report: Report, tp_size: Optional[int], asked: Optional[float], reclaimable: List[str],
              shm_dir: str = "/dev/shm") -> None:
    """Free room in /dev/shm for the new server, before anything is stopped: SGLang and NCCL
    create their segments there, and a full /dev/shm kills the new server (and then the
    rollback) with `No space left on device` after the old one is gone. The files of a
    `reclaimable` output directory there count as free (the teardown empties it first). On a
    refusal the largest entries are named with their owners and the processes holding them (no
    content is read)."""
    floor = shm_floor(tp_size, asked)
    if floor <= 0 or not os.path.isdir(shm_dir):
        report.note("shm", "%s not checked (%s)" % (shm_dir, "shm_min_free_mb 0" if floor <= 0 else "no such directory"))
        return
    try:
        mib, _inodes = _free(shm_dir)
    except OSError as exc:
        report.fail("shm", "%s: cannot read free space: %s" % (shm_dir, exc.strerror or exc))
        return
    if mib >= floor:
        report.ok("shm", "%s: %s free, %s needed" % (shm_dir, _mib(mib), _mib(floor)))
        return
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _shm  # only when short: a listing

    top = _shm.largest(shm_dir, count=50)
    freed = sum(int(e["bytes"]) for e in top if _in_tree(str(e["path"]), reclaimable)) / 1048576.0
    if mib + freed >= floor:
        report.ok("shm", "%s: %s free, %s more once the teardown empties %s; %s needed"
                  % (shm_dir, _mib(mib), _mib(freed), ", ".join(reclaimable), _mib(floor)))
        return
    shown = [e for e in top if not _in_tree(str(e["path"]), reclaimable)][:5]
    held = _shm.open_or_mapped([shm_dir]) if shown else {}
    names = []
    for e in shown:
        pids = _shm.holders(str(e["path"]), held)
        who = ", held open by pid %s" % ", ".join(str(p) for p in pids[:5]) if pids else ", held by no process"
        size = _mib(int(e["bytes"]) / 1048576.0)
        names.append("%s%s (%s, user %s%s)" % (e["path"], "/" if e["is_dir"] else "", size, e["user"], who))
    report.fail("shm", "%s: %s free, below the %s a server of tp_size %s needs (shm_min_free_mb%s): SGLang and NCCL "
                "would fail with `No space left on device` after the old server is stopped; nothing was stopped. "
                "Largest: %s. Remove what no server needs (sglang_teardown removes sglang's own leftovers that no "
                "live process holds), or lower shm_min_free_mb"
                % (shm_dir, _mib(mib), _mib(floor), tp_size, "" if asked is not None else ", default 128 + 16 per rank",
                   "; ".join(names) or "nothing to name (the room is taken by files this user cannot see)"))


def _creatable(path: str) -> Optional[str]:
    """None when `path` is (or can be created as) a writable directory, else why not."""
    probe = nearest_existing(path)
    if not os.path.isdir(probe):
        return "%s is not a directory" % probe
    if not os.access(probe, os.W_OK | os.X_OK):
        return "%s is not writable by uid %d" % (probe, os.geteuid())
    return None


def check_dirs(report: Report, dirs: Mapping[str, str]) -> None:
    for label, path in dirs.items():
        if not os.path.isabs(path):
            report.fail(label, "%s %r must be an absolute path" % (label, path))
            continue
        problem = _creatable(path)
        if problem:
            report.fail(label, "%s %s cannot be used: %s" % (label, path, problem))
            continue
        # Another user's (or a group/other-writable) directory would hand that user root's hands:
        # refused here, in the plan, before anything is stopped. The TMPDIR lives inside state_dir.
        unsafe = _record.dir_problem(path, label)
        if unsafe:
            report.fail("dir_safety", unsafe)
        else:
            report.ok(label, "%s %s is writable" % (label, path))
