"""PRIVATE to llmops.sglang. What sglang_probe gathers: interpreter, installs, flags, servers,
ports, GPUs, /dev/shm, launch records, and the diagnosis built from them.

The probe is what an operator runs on a broken host, so it reads what it can: each part that
needs a library the host lacks (psutil for processes, requests for HTTP) is imported when it is
used, and an ImportError there becomes a line in `unavailable` instead of a failed probe.
"""
from __future__ import annotations

import os
import pwd
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar

from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch
from ansible_collections.llmops.sglang.plugins.module_utils._host import _compile_cache
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _diagnosis
from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe_report
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import (
    DEFAULT_SEARCH_PATHS, Resolving, discover, in_use, untrusted_install)
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import start as start_resolve
from ansible_collections.llmops.sglang.plugins.module_utils._host._record import default_state_dir, read_json, record_files
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import mask_cmdline, masked_argv, redact_deep

T = TypeVar("T")
Warn = Callable[[str], None]
GPUS_DISABLED = "GPU backend disabled"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def readable(unavailable: List[str], what: str, fn: Callable[[], T], default: T) -> T:
    """fn(), or `default` and a line in `unavailable` when a library it needs is missing (an
    ImportError, or the library's own guard: SglangError with reason missing_library)."""
    try:
        return fn()
    except ImportError as exc:
        unavailable.append("%s: not read, python %s cannot import %s" % (what, sys.executable, exc.name or exc))
    except SglangError as exc:
        if exc.details.get("reason") != "missing_library":
            raise
        unavailable.append("%s: not read, %s (python %s)" % (what, exc.msg, sys.executable))
    return default


# --- processes, ports, GPUs (psutil / requests territory: imported where used) -------------------

def _holder(pid: int, procs: Dict[int, Any]) -> Dict[str, Any]:
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

    proc = procs.get(pid) or _procs.read_proc(pid)
    if proc is None:
        return {"pid": pid, "user": None, "cmdline": []}
    return {"pid": pid, "user": proc.user, "cmdline": masked_argv(proc.cmdline, proc.comm)}


def processes() -> Tuple[Dict[int, Any], List[Any]]:
    """(process table, sglang servers grouped from it)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._discovery import find_servers

    procs = _procs.snapshot()
    return procs, find_servers(procs)


def servers_by_command_line(now: float) -> List[Dict[str, Any]]:
    """Without the process layer (no psutil): the sglang main processes from their command lines
    alone (_depsearch reads /proc for that) - no members, ports or environment, `state: unknown`,
    `partial: true`. Enough to say what runs, with which interpreter and arguments."""
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._discovery import DEFAULT_PORT, parse_args
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import _venv_root_of

    out = []
    for pid, uid, argv in _depsearch.sglang_command_lines():
        args = parse_args(mask_cmdline(argv))
        try:
            port: Optional[int] = int(args.get("port", DEFAULT_PORT))
        except (TypeError, ValueError):
            port = None
        python = argv[0] if os.path.isabs(argv[0]) else None
        out.append({"id": str(pid), "pid": pid, "main": True, "partial": True, "instance": None, "user": _user(uid),
                    "age_seconds": None, "port": port, "listening_ports": [],
                    "interpreter": {"cmdline": argv[0], "exe": None, "venv": _venv_root_of(python) if python else None},
                    "argv": mask_cmdline(argv), "args": args, "pids": [pid], "members": [], "orphaned": [],
                    "env": None, "env_hidden": True})
    return out


def probe_port(port: int, servers: List[Any], procs: Dict[int, Any], api_key: Optional[str], timeout: float,
               server_user: str, unavailable: List[str], launch_ids: Iterable[str] = ()) -> Dict[str, Any]:
    """Who holds `port`, and what it says about itself. The api key goes only to a recognised
    sglang server of `server_user` (`launch_ids`: this state dir's launch records); to anything
    else with a key given, nothing is sent."""
    from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._discovery import credential_refusal, server_of_pid
    from ansible_collections.llmops.sglang.plugins.module_utils._host._ports import listeners

    socks = listeners([port])
    rep: Dict[str, Any] = {
        "port": port, "listening": bool(socks), "listeners": [s.to_dict() for s in socks], "server": None,
        "holders": [], "reachable": False, "version": None, "server_info": None, "model_info": None,
        "endpoint": None, "error": None, "api_key_sent": False}
    if not socks:
        rep["error"] = "nothing listens on port %d (IPv4 or IPv6)" % port
        return rep
    for pid in sorted({p for s in socks for p in s.pids}):
        server = server_of_pid(servers, pid)
        if server is not None:
            rep["server"] = server.id
        else:
            rep["holders"].append(_holder(pid, procs))
    if not _http.HAS_REQUESTS:
        rep["error"] = "port %d was not asked: python %s cannot import requests" % (port, sys.executable)
        unavailable.append("port %d: /server_info and /model_info not read, python %s cannot import requests"
                           % (port, sys.executable))
        return rep
    if api_key:
        refusal = credential_refusal(servers, socks, server_user, launch_ids)
        if refusal is not None:
            rep["error"] = ("the api_key was not sent and nothing was asked: %s (the key goes only to an "
                            "sglang server of user %s)" % (refusal, server_user))
            return rep
        rep["api_key_sent"] = True
    info, error, endpoint = _http.server_info(socks[0].address, port, api_key, timeout)
    rep["endpoint"] = endpoint
    if info is None:
        rep["error"] = "port %d does not answer %s: %s" % (port, endpoint, error)
        return rep
    secrets = [api_key]
    rep["reachable"] = True
    rep["server_info"] = redact_deep(info, secrets)
    rep["version"] = info.get("version")
    model, model_error = _http.model_info(socks[0].address, port, api_key, timeout)
    rep["model_info"] = redact_deep(model, secrets) if model is not None else None
    if model_error:
        rep["model_info_error"] = model_error
    return rep


def gpus(backend: str, servers: List[Any], procs: Dict[int, Any]) -> Dict[str, Any]:
    """The GPU report, each compute process tagged `sglang` (with its server) or `foreign`."""
    if backend == "none":  # query_gpus("none")'s answer, without compiling the GPU readers
        return {"backend": "none", "note": GPUS_DISABLED, "gpus": []}
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._discovery import server_of_pid
    from ansible_collections.llmops.sglang.plugins.module_utils._host._gpus import query_gpus

    data = query_gpus(backend).to_dict()
    for gpu in data["gpus"]:
        for proc in gpu["processes"]:
            server = server_of_pid(servers, proc["pid"])
            if server is not None:
                proc.update(owner="sglang", server=server.id)
            else:
                proc.update(owner="foreign", **{k: v for k, v in _holder(proc["pid"], procs).items() if k != "pid"})
    return data


def shm(shm_dir: str) -> List[Dict[str, Any]]:
    from ansible_collections.llmops.sglang.plugins.module_utils._host._shm import scan

    return [e.to_dict() for e in scan(shm_dir)]


def read_records(state_dir: str, unavailable: List[str],
                 full: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Launch records with whether their server is alive (unknown, None, without the process
    layer); `full`, when given, receives each readable record as written."""
    out: List[Dict[str, Any]] = []
    for path in record_files(state_dir):  # <name>.json only: not the exit, timeline or other files
        try:
            rec = read_json(path) or {}
        except SglangError as exc:
            out.append({"path": path, "error": exc.msg, "reason": exc.details.get("reason")})
            continue
        if full is not None:
            full.append(rec)
        out.append({"path": path, "name": rec.get("name"), "launch_id": rec.get("launch_id"),
                    "pid": rec.get("pid"), "port": rec.get("port"), "log_path": rec.get("log_path"),
                    "interpreter": rec.get("interpreter"), "venv": rec.get("venv"),
                    "sglang_version": rec.get("sglang_version"), "start_time": rec.get("start_time"),
                    "containment": rec.get("containment") or "none", "cgroup": rec.get("cgroup"),
                    "alive": None})
    if out:
        readable(unavailable, "launch records' liveness", lambda: _alive(out), None)
    return out


def patched_after_start(records: List[Dict[str, Any]], full: List[Dict[str, Any]]) -> List[str]:
    """Live servers whose code or model files on disk differ from what they loaded (_patched):
    imported only when a live record is there to compare."""
    if not any(r.get("alive") for r in records):
        return []
    from ansible_collections.llmops.sglang.plugins.module_utils._probe import _patched

    return _patched.mark(records, full)


def _alive(records: List[Dict[str, Any]]) -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

    for rec in records:
        if "error" not in rec:
            pid = rec.get("pid")
            rec["alive"] = bool(isinstance(pid, int) and _procs.is_alive(pid, _procs.record_start(rec)))


# --- containment -------------------------------------------------------------------------------

def host_containment() -> Dict[str, Any]:
    """What `containment: auto` would choose for a launch on this host, and why."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment

    backend, why = _containment.choose("auto")
    return {"backend": backend, "why": why}


def _record_start(rec: Mapping[str, Any]) -> Optional[float]:
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
    return _procs.record_start(rec)


def _record_of(server: Dict[str, Any], records: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The launch record of a server: same launch id (from its marker), else same main pid."""
    for rec in records:
        if server.get("launch_id") and rec.get("launch_id") == server["launch_id"]:
            return rec
    for rec in records:
        if server.get("pid") is not None and rec.get("pid") == server["pid"] and \
                (server.get("start_time") is None or _record_start(rec) is None
                 or abs(_record_start(rec) - float(server["start_time"])) < 0.05):
            return rec
    return None


def with_containment(servers: List[Dict[str, Any]], records: List[Dict[str, Any]]) -> None:
    """Each server (in place): containment, containment_why, cgroup, unit, cgroup_members (the
    cgroup's pids now), outside_cgroup (pids the process heuristics give the server that are not
    in its cgroup) and containment_notes. A server without a launch record has containment null."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment

    for server in servers:
        rec = _record_of(server, records)
        view = _containment.probe_view(rec, server.get("pids") or []) if rec is not None else {}
        server.update(containment=view.get("containment"), containment_why=view.get("containment_why"),
                      cgroup=view.get("cgroup"), unit=view.get("unit"), cgroup_members=view.get("members") or [],
                      outside_cgroup=view.get("outside_members") or [], containment_notes=view.get("notes") or [])


# --- flags ---------------------------------------------------------------------------------------

# Imported where used: only a probe asked about flags compiles the CLI reader (modules are
# compiled from source on every run).

def select_flags(all_flags: Dict[str, Dict[str, Any]], names: List[str]) -> Tuple[Dict[str, Any], List[str]]:
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _flagcheck
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._introspect import flag_lookup

    picked, absent = {}, []
    for name in names:
        entry = flag_lookup(all_flags, name)
        if entry is None:
            absent.append(name)
        else:
            picked[_flagcheck.long_name(entry)] = entry
    return picked, absent


def _flags(p: Dict[str, Any], interp: Any, state_dir: str, result: Dict[str, Any]) -> None:
    """Introspect THAT sglang; with `flags`, answer each question yes or no."""
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _flagcheck
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._introspect import introspect

    intro = introspect(interp, cache_dir=os.path.join(state_dir, "introspect-cache"), timeout=p["introspect_timeout"])
    flags = intro.pop("flags")
    if p["flags"]:
        asked = _flagcheck.questions(p["flags"])
        answers = _flagcheck.answers(flags, p["flags"], intro["sglang_version"])
        flags, absent = select_flags(flags, [name for name, _value, _asked in asked])
        result["flags_absent"] = absent
        result["flag_answers"] = answers
        result["accepted"] = all(a["accepted"] for a in answers.values())
        result["diagnosis"] += _diagnosis.flags(absent, intro["sglang_version"], answers)
    result["flags"] = flags
    result["introspection"] = intro


# --- the probe -----------------------------------------------------------------------------------

def _dependencies(p: Dict[str, Any], result: Dict[str, Any], warn: Warn) -> None:
    """psutil/requests missing for this module's python: a warning naming one that has them."""
    deps = _depsearch.report(_deps.REQUIRED, p, import_them=False)
    if deps is None:
        return
    warn(deps["msg"])
    result["missing_libraries"] = deps["missing_libraries"]
    result["interpreter_with_libraries"] = deps["interpreter_with_libraries"]
    result["diagnosis"] += _diagnosis.dependencies(deps["missing_libraries"], sys.executable,
                                                   deps["interpreter_with_libraries"])


def _install_roots(servers: List[Dict[str, Any]], records: List[Dict[str, Any]]) -> List[str]:
    """Where running servers and launch records say sglang is: a venv in an unusual place."""
    roots = set()
    for server in servers:
        argv0 = (server.get("interpreter") or {}).get("cmdline") or ""
        if os.path.isabs(argv0) and "python" in os.path.basename(argv0):
            roots.add(os.path.dirname(os.path.dirname(argv0)) + "/")
    for rec in records:
        if rec.get("venv"):
            roots.add(rec["venv"].rstrip("/") + "/")
    return sorted(roots)


def _add_untrusted(into: List[Dict[str, Any]], installs: List[Dict[str, Any]]) -> None:
    """Installs left out of the advice, in the `not_suggested` form (once per interpreter)."""
    for item in installs:
        python = item.get("python") or item.get("location")
        if python and not any(n["python"] == python for n in into):
            into.append({"python": python, "venv": item.get("venv"), "sglang_version": item.get("sglang_version"),
                         "source": "an sglang install at %s" % (item.get("location") or item.get("dist_info")),
                         "why": item.get("untrusted_why")})


def check_params(p: Dict[str, Any]) -> None:
    """Bad input fails before anything is read (reason bad_input)."""
    for port in p["ports"] or []:
        if not 1 <= port <= 65535:
            raise SglangError("port %d is not in 1..65535" % port, reason="bad_input")
    if p["flags"] is not None:
        from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _flagcheck

        _flagcheck.questions(p["flags"])


def _asked_python(p: Dict[str, Any]) -> str:
    """The interpreter the operator pointed at (whether or not it resolves)."""
    if p["venv"]:
        return os.path.join(os.path.abspath(os.path.expanduser(p["venv"])), "bin", "python")
    if p["python"] and os.sep in p["python"]:
        return os.path.abspath(os.path.expanduser(p["python"]))
    return os.path.abspath(sys.executable)


def _host_view(p: Dict[str, Any], result: Dict[str, Any], table: Optional[Tuple[Dict[int, Any], List[Any]]],
               state_dir: str, server_user: str, now: float, warn: Warn) -> Dict[str, Any]:
    """What the probe reads of the host apart from the interpreter (servers' containment,
    interpreters installed, ports, GPUs, /dev/shm), in `result` in place, with the diagnosis
    lines of each part returned under its name: the interpreter answers from a process of its
    own meanwhile, and its lines come first in the diagnosis."""
    unavailable: List[str] = result["unavailable"]
    diagnosis: Dict[str, List[str]] = {}
    procs, servers = table if table is not None else ({}, [])
    full_records: List[Dict[str, Any]] = []
    result["records"] = read_records(state_dir, unavailable, full_records) if os.path.isdir(state_dir) else []
    # where each compile/JIT cache of the instances lives and how big it is (a bounded walk)
    result["compile_caches"] = _compile_cache.for_records(full_records)
    diagnosis["patched"] = readable(unavailable, "launch records' code and model files",
                                    lambda: patched_after_start(result["records"], full_records), [])
    result["containment"] = host_containment()
    diagnosis["containment"] = []
    if table is not None and result["servers"]:
        readable(unavailable, "containment of the servers", lambda: with_containment(result["servers"], full_records),
                 None)
        diagnosis["containment"] = _diagnosis.containment(result["servers"])
    search = list(p["search_paths"] or DEFAULT_SEARCH_PATHS)
    result["interpreters"] = discover(search + _install_roots(result["servers"], result["records"]))
    diagnosis["ports"] = []
    if p["ports"]:
        unread = [{"port": port, "listening": None, "server": None, "holders": [], "reachable": False,
                   "version": None, "error": "not read (see unavailable)", "api_key_sent": False}
                  for port in p["ports"]]
        result["ports"] = readable(unavailable, "ports %s" % ", ".join(str(q) for q in p["ports"]), lambda: [
            probe_port(port, servers, procs, p["api_key"], p["http_timeout"], server_user, unavailable,
                       [r["launch_id"] for r in full_records if isinstance(r.get("launch_id"), str)])
            for port in p["ports"]], unread)
        diagnosis["ports"] = _diagnosis.ports(result["ports"], {s["id"]: s for s in result["servers"]}, now)
    _probe_report.with_states(result["servers"], result.get("ports"))
    result["gpus"] = readable(unavailable, "GPUs", lambda: gpus(p["gpu_backend"], servers, procs),
                              {"backend": "none", "note": "not read", "gpus": []})
    if p["gpu_backend"] != "none" and result["gpus"].get("backend") == "none":
        warn("GPUs not checked: %s" % (result["gpus"].get("note") or "no GPU backend"))
    diagnosis["gpus"] = _diagnosis.gpus(result["gpus"])
    result["shm"] = readable(unavailable, "shared memory files", lambda: shm(p["shm_dir"]), [])
    diagnosis["shm"] = _diagnosis.shm(result["shm"])
    return diagnosis


def run(p: Dict[str, Any], warn: Warn) -> Tuple[Dict[str, Any], Optional[SglangError]]:
    """(the full result, the failure if the asked interpreter or introspection failed)."""
    result: Dict[str, Any] = {"changed": False, "interpreter": None, "diagnosis": [], "unavailable": []}
    unavailable: List[str] = result["unavailable"]
    failure: Optional[SglangError] = None
    state_dir = p["state_dir"] or default_state_dir()
    user = _user(os.geteuid())
    server_user = p["server_user"] or user
    _dependencies(p, result, warn)
    # The interpreter answers from a process of its own: the host is read while it starts.
    try:
        resolving: Optional[Resolving] = start_resolve(venv=p["venv"], python=p["python"])
    except SglangError as exc:
        resolving, failure = None, exc
    now = time.time()
    table = readable(unavailable, "servers (the process table)", processes, None)
    # Environments only of this user's servers: root can read anyone's, and must not hand them out.
    result["servers"] = [s.to_dict(now, [user]) for s in table[1]] if table is not None else []
    if table is None:
        result["servers"] = servers_by_command_line(now)
        result["diagnosis"] += _diagnosis.partial_servers(result["servers"])
    host = _host_view(p, result, table, state_dir, server_user, now, warn)
    result["diagnosis"] += host["containment"] + host["patched"]
    interp: Any = None
    if resolving is not None:
        try:
            interp = resolving.result()
            result["interpreter"] = interp.to_dict()
        except SglangError as exc:
            failure = exc

    # A broken or sglang-less interpreter: what to use instead is what this host's instances run with.
    asked = interp.path if interp is not None else _asked_python(p)
    # Only interpreters nobody but root or this user can replace are ever suggested.
    not_suggested: List[Dict[str, Any]] = []
    using = in_use(result["servers"], result["records"], result["interpreters"], exclude=asked, user=user,
                   untrusted=not_suggested)
    for item in result["interpreters"]:
        why = untrusted_install(item)
        item["trusted"] = why is None
        item["untrusted_why"] = why
    result["not_suggested"] = not_suggested
    lacking: List[str] = []
    if interp is not None and not interp.sglang_installed:
        own = os.path.abspath(interp.path)
        elsewhere = [i for i in result["interpreters"] if not i["python"] or os.path.abspath(i["python"]) != own]
        _add_untrusted(not_suggested, [i for i in elsewhere if not i["trusted"]])
        lacking = _diagnosis.interpreter(result["interpreter"], elsewhere, using)
        result["diagnosis"] += lacking
    if (failure is not None or lacking) and using:
        result["suggested_interpreter"] = using[0]
        if failure is not None:
            failure = SglangError("%s; %s" % (failure.msg, _diagnosis.suggestion(using[0])), **failure.details)
    if failure is not None or lacking:
        result["diagnosis"] += _diagnosis.not_suggested(not_suggested, user)

    if failure is None and interp is not None and (p["introspect"] or p["flags"]):
        if not interp.sglang_installed:
            failure = SglangError(lacking[0] if lacking else "python %s has no sglang" % interp.path,
                                  reason="sglang_missing")
        else:
            try:
                _flags(p, interp, state_dir, result)
            except SglangError as exc:
                failure = exc

    result["diagnosis"] += _diagnosis.servers(result["servers"], now)
    result["diagnosis"] += host["ports"] + host["gpus"] + host["shm"]
    result["diagnosis"] += ["launch record %s names pid %s, which is gone" % (r["path"], r["pid"])
                            for r in result["records"] if r.get("pid") and r.get("alive") is False]
    return result, failure


def report(result: Dict[str, Any], detail: bool) -> Dict[str, Any]:
    """The short report, or with `detail` everything gathered."""
    return result if detail else _probe_report.shorten(result)
