"""PRIVATE to llmops.sglang. sglang_launch's work around its pure plan (_launch_plan).

`run()` is the whole module body: the preflight pass (every check at once), the fingerprint,
then under the instance lock the `teardown` when asked (a restart's replacement: the old server
stopped and proven gone by the teardown engine, only once the preflight passed), the facts
(record, port holders, the probe or the cgroup where the plan needs them), the decision, and
carrying it out - a spawn, or a failure. Failures travel as
SglangError with the reason set where they were found and the result built so far as details;
_exit.run turns them into fail_json.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _compile_cache
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _code_identity
from ansible_collections.llmops.sglang.plugins.module_utils._host import _model_identity
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._host import _last_good
from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_plan
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _outputdirs
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
# the request's shape lives apart so that _launch_replace needs nothing of this file (one way)
from ansible_collections.llmops.sglang.plugins.module_utils._launch._launch_request import Preflight, Request

if TYPE_CHECKING:  # imported where used: only a replacement stops anything (a plan's call does not)
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call


def preflight(p: Mapping[str, Any], dirs: Mapping[str, str], check_mode: bool) -> Preflight:
    """Every check, in one pass (all problems reported at once)."""
    report = _preflight.Report()
    state_dir = dirs["state_dir"]
    pf = Preflight(report=report, port=_preflight.check_port_param(report, p["port"]),
                   tp_size=_preflight.check_tp_size(report, p["tp_size"]))
    if p["keep_logs"] < 1:
        report.fail("keep_logs", "keep_logs must be at least 1 (the new log), got %d" % p["keep_logs"])
    pf.env = _preflight.check_env(report, p["env"])
    pf.args = _preflight.check_args(report, p["args"])
    _preflight.check_log_level(report, pf.args, p["allow_log_level_warning"])
    _preflight.check_dirs(report, {"state_dir": state_dir, "log_dir": dirs["log_dir"]})
    pf.compile_cache = _compile_cache.plan(p.get("cache_dir"), pf.env)
    _compile_cache.check(report, pf.compile_cache, dirs["tmpdir"])
    full = _preflight.check_space(report, dirs, p["min_free_mb"], p["min_free_inodes"])
    try:
        pf.output_dirs = _outputdirs.parse(p.get("output_dirs"))
        _outputdirs.check(report, pf.output_dirs, state_dir)
    except SglangError as exc:
        report.fail("output_dirs", exc.msg)
    pf.interp = interp = _preflight.check_interpreter(report, p["venv"], p["python"], timeout=30)
    if interp is not None:
        if interp.error and interp.sglang_installed:
            report.warn("interpreter", "interpreter %s reported: %s" % (interp.path, interp.error))
        if _preflight.check_sglang(report, interp, p["search_paths"]):
            pf.entry, pf.entry_argv = _preflight.choose_entrypoint(report, interp, p["entrypoint"])
            cache: Optional[str] = os.path.join(state_dir, "introspect-cache")
            if (check_mode and not os.path.isdir(state_dir)) or "state_dir" in full:
                cache = None  # nothing is created in a state dir that does not exist yet, or is full
            pf.flags = _preflight.check_flags(report, interp, pf.args, cache, p["introspect_timeout"])
        else:
            report.skip("flags", "flags not checked: no sglang in %s" % interp.path)
    else:
        report.skip("sglang", "sglang not checked: no usable interpreter")
    pf.model_path = _preflight.check_model_path(report, p["model_path"])
    _preflight.check_shm(report, pf.tp_size, p.get("shm_min_free_mb"),
                         [d.path for d in pf.output_dirs if getattr(d, "reclaimable", False)])
    _preflight.check_identity_paths(report, p.get("identity_paths"))
    if pf.tp_size is not None:
        _preflight.check_gpus(report, pf.tp_size, p["gpu_backend"], pf.env, pf.args, p["gpu_check"])
    return pf


def _fingerprint_interpreter(path: str) -> str:
    """The venv's interpreter with its directory resolved. Not the file's realpath: every venv's
    bin/python resolves to the same base interpreter, so that would hide a venv change."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def read_identity(p: Mapping[str, Any], pf: Preflight) -> Optional[Dict[str, Any]]:
    """The code and model identity of the requested server as they are on disk now (kept in
    its record; compared with the running server's by the plan). Stats only, no content read."""
    interp = pf.interp
    if interp is None or not interp.sglang_installed:
        return None
    try:
        code = _code_identity.build(interp.sglang_location, pf.env, interp.venv if interp.is_venv else None,
                                    p.get("identity_paths") or ())
    except OSError as exc:
        code = _code_identity.CodeIdentity(package=interp.sglang_location, source="unknown",
                                           error="cannot read the sglang package: %s" % (exc.strerror or exc))
    try:
        model = _model_identity.build(pf.model_path)
    except OSError as exc:
        model = {"version": _model_identity.VERSION, "path": pf.model_path, "files": {},
                 "error": "cannot read the model: %s" % (exc.strerror or exc)}
    return {"code": code, "model": model}


def prepare(p: Mapping[str, Any], check_mode: bool) -> Request:
    """Name, containment backend, directories, preflight and the requested server's identity.
    A failure here (bad name, unavailable backend) carries only its own details."""
    name = _record.validate_name(p["name"])
    # Before anything is read or created: a backend that is not available fails the task here.
    backend, why = _containment.choose(p["containment"])
    state_dir = os.path.abspath(p["state_dir"] or _record.default_state_dir())
    log_dir = os.path.abspath(p["log_dir"] or os.path.join(state_dir, "logs"))
    dirs = {"state_dir": state_dir, "log_dir": log_dir, "tmpdir": _record.tmpdir_path(state_dir, name)}
    restored = None
    if p.get("restore") == "last_good":  # the server options become the last-good launch's
        from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_restore
        p, restored = _launch_restore.apply(p, state_dir, name)
    api_key = p["api_key"] or None
    pf = preflight(p, dirs, check_mode)
    argv: List[str] = []
    fp, inputs = None, None
    if pf.entry and pf.port is not None and pf.tp_size is not None:
        argv = _cliargs.server_argv(pf.entry_argv, pf.model_path, p["host"], pf.port, pf.tp_size, pf.args,
                                    api_key, pf.flags)
        hashed, inputs = _cliargs.fingerprint_inputs(
            _fingerprint_interpreter(pf.interp.path), pf.interp.sglang_version or "", pf.entry, pf.model_path,
            p["host"], pf.port, pf.tp_size, pf.args, pf.env, api_key)
        fp = _cliargs.fingerprint(hashed)
    return Request(params=p, name=name, state_dir=state_dir, log_dir=log_dir, backend=backend, why=why, pf=pf,
                   argv=argv, fingerprint=fp, inputs=inputs,
                   secrets=_cliargs.argv_secrets(api_key, pf.args, pf.env), restored=restored,
                   identity=read_identity(p, pf) if fp is not None and not pf.report.errors else None)


def base_result(req: Request) -> Dict[str, Any]:
    """The result before the lock: what the preflight found and what would run."""
    result: Dict[str, Any] = {"changed": False, "reason": None, "decision": None, "pid": None, "log_path": None,
                              "port_holder": [], "blockers": [], "preflight": req.pf.report.to_dict(),
                              "containment": {"backend": req.backend, "why": req.why, "cgroup": None, "unit": None},
                              "last_good": _last_good.summary(req.state_dir, req.name)}
    if req.restored is not None:
        result["restored"] = dict(req.restored)
    if req.pf.interp is not None:
        result["interpreter"] = req.pf.interp.to_dict()
    if req.fingerprint is not None:
        result.update(fingerprint=req.fingerprint, fingerprint_inputs=req.inputs,
                      argv=_redact.redact_argv(req.argv, _cliargs.secret_arg_flags(req.pf.args)))
    if req.identity is not None:
        result["identity"] = {"code": req.identity["code"].summary(),
                              "model": _model_identity.summary(req.identity["model"])}
    return result


def _is_running(record: Optional[Mapping[str, Any]]) -> bool:
    if not record or not isinstance(record.get("pid"), int):
        return False
    return _procs.is_alive(record["pid"], _procs.record_start(record))


# A healthy server can stall for seconds (a long prefill, a GC pause, a busy host): one request
# that timed out does not make it unresponsive. Bounded: at most PROBE_ATTEMPTS x probe_timeout
# plus the pauses (17 s with the default probe_timeout of 5 s).
PROBE_ATTEMPTS = 3
PROBE_PAUSE_S = 1.0


def _unanswered(record: Mapping[str, Any], host: str, timeout: float, report: Optional[_preflight.Report] = None,
                sleep: Callable[[float], None] = time.sleep) -> Optional[Dict[str, Any]]:
    """The HTTP probe of the running server when it answered none of PROBE_ATTEMPTS requests of
    `timeout` s each (with its process state: T when stopped - retried too: job control or a
    debugger may continue it), with `attempts` and `seconds`; None when it answered. A server
    that is gone is not asked again. An answer after a retry is a warning in `report`: the
    server is kept, the stall is said."""
    began = time.monotonic()
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        probe = _http.answers(host, record["port"], timeout)
        seconds = round(time.monotonic() - began, 3)
        if probe["answered"]:
            if attempt > 1 and report is not None:
                report.warn("liveness", "instance %r (pid %s) did not answer %s within %s s at first; it answered on "
                            "attempt %d of %d (%.1f s in all) and is kept" % (
                                record.get("name"), record.get("pid"), probe["endpoint"], _num(timeout), attempt,
                                PROBE_ATTEMPTS, seconds))
            return None
        proc = _procs.read_proc(record["pid"])
        probe.update(state=proc.state if proc else None, attempts=attempt, seconds=seconds,
                     retried=attempt > 1, max_attempts=PROBE_ATTEMPTS)
        if proc is None or attempt == PROBE_ATTEMPTS:
            return probe
        sleep(PROBE_PAUSE_S)
    return None  # pragma: no cover - the loop returns


def _num(value: float) -> str:
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


def previous_exit(record: Optional[Mapping[str, Any]], state_dir: str, name: str) -> Optional[Dict[str, Any]]:
    """How the recorded server ended, when it is gone without a teardown (a teardown removes its
    record and exit file): its pid and launch, and from the supervisor's exit file when, with which
    exit code or signal. None when there is no record or its server runs."""
    if not record or _is_running(record):
        return None
    launch_id = record.get("launch_id")
    data = _record.read_launch_exit(_record.exit_path(state_dir, name), launch_id if isinstance(launch_id, str) else None)
    out: Dict[str, Any] = {"pid": record.get("pid"), "launch_id": launch_id,
                           "launched_at": record.get("launched_at"), "exit_file": data is not None}
    if data is None:
        out["how"] = ("gone without an exit file (its supervisor ended too: killed with it, or the host rebooted)")
        return out
    when = data.get("exited_at")
    out.update(returncode=data.get("returncode"), signal=data.get("signal"), exited_at=when,
               exited_at_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
               if isinstance(when, (int, float)) else None)
    how = "killed by signal %s" % data["signal"] if data.get("signal") else "exit code %s" % data.get("returncode")
    if data.get("error"):
        how += " (%s)" % data["error"]
    out["how"] = "exited on its own at %s with %s" % (out["exited_at_utc"] or "an unknown time", how)
    return out


def previous_exit_text(name: str, prev: Mapping[str, Any]) -> str:
    return "the previous server of instance %r (pid %s) %s" % (name, prev.get("pid"), prev.get("how"))


def _readable_record(req: Request) -> Optional[Dict[str, Any]]:
    """The instance's launch record; a damaged one (set aside by `run` outside check mode, named
    in `record_damaged`) is no record: the instance is then known by its marker, port and cgroup."""
    try:
        return _record.read_record(req.state_dir, req.name)
    except SglangError as exc:
        if exc.details.get("reason") != _record.DAMAGED:
            raise
        return None


def damaged_record(req: Request, check_mode: bool, warn: Callable[[str], None]) -> Optional[Dict[str, Any]]:
    """A damaged launch record (zero bytes, cut short) never wedges the instance: kept aside for
    inspection (renamed, never deleted; check mode only names where), said in a warning, and the
    call goes on as for an instance without a record. Nothing when the preflight failed."""
    if req.pf.report.errors or not os.path.isdir(req.state_dir):
        return None
    info = _record.damaged_record(req.state_dir, req.name, check_mode)
    if info is not None:
        warn(_record.damaged_text(req.name, info))
    return info


def _label_other_instances(req: Request, holders: List[Dict[str, Any]], report: _preflight.Report) -> None:
    """Port holders that carry another instance's marker are named as that instance: a restart's
    teardown refuses to stop another instance (reason other_instance) unless its `takeover`
    names it - said now, before anything is done."""
    for holder in holders:
        if holder.get("instance") or not holder.get("pid"):
            continue
        marker = _procs.marker_of(int(holder["pid"])) or {}
        name, their_dir = marker.get(_procs.MARKER_INSTANCE), marker.get(_procs.MARKER_STATE_DIR)
        ours = os.path.realpath(req.state_dir)
        if not name or (name == req.name and os.path.realpath(their_dir or req.state_dir) == ours):
            continue
        holder.update(other_instance=name, other_state_dir=their_dir)
        holder.setdefault("note", "instance %r" % name)
        command = "ansible-playbook playbooks/teardown.yml -e sglang_name=%s" % name
        if their_dir and os.path.realpath(their_dir) != ours:
            command += " -e sglang_state_dir=%s" % their_dir
        text = ("port %s is held by instance %r (pid %s), not by %r: a restart's teardown never stops another "
                "instance (it refuses, reason other_instance) unless its takeover names it (takeover: [%s]); "
                "stop it with `%s`" % (req.pf.port, name, holder["pid"], req.name, name, command))
        if text not in report.warnings:
            report.warn("port_holders", text)


def gather(req: Request, check_mode: bool) -> _launch_plan.Facts:
    """Under the lock: the record, the port and its holders (their checks join the preflight
    report), then the probe or the cgroup check where the plan depends on them."""
    p, report = req.params, req.pf.report
    record = _readable_record(req) if os.path.isdir(req.state_dir) else None
    running = _is_running(record)
    port_state = "free"
    holders: List[Dict[str, Any]] = []
    if req.pf.port is not None:
        port_report = _preflight.Report()
        port_state, holders = _preflight.check_port(port_report, p["host"], req.pf.port,
                                                    record if running else None, running)
        _label_other_instances(req, holders, report)
        report.checks.extend(port_report.checks)
        report.warnings.extend(port_report.warnings)
        # A foreign holder fails the preflight on its own (naming it once); a busy port alone
        # is the port_busy decision, named with the other failures when there are some.
        refused = _preflight.check_foreign_holders(report, req.pf.port, holders, p["foreign_port_holders"])
        if report.errors and not refused:
            report.errors.extend(e for e in port_report.errors if e not in report.errors)
    facts = _launch_plan.Facts(
        name=req.name, host=p["host"], port=req.pf.port, check_mode=check_mode, fingerprint=req.fingerprint,
        inputs=req.inputs, record=record, running=running, port_state=port_state, holders=tuple(holders),
        preflight_errors=tuple(report.errors), preflight_reason=report.reason(),
        identity=req.identity, ignore_changes=tuple(p.get("ignore_changes") or ()))
    if record is not None and _launch_plan.wants_probe(facts):
        facts = dataclasses.replace(facts, probe=_unanswered(record, p["host"], p["probe_timeout"], report))
    if _launch_plan.wants_containment_check(facts):
        facts = dataclasses.replace(facts, cgroup_problem=_containment.launch_problem(req.name, req.backend))
    return facts


def outcome(base: Mapping[str, Any], preflight_report: _preflight.Report, d: _launch_plan.Decision,
            diff: bool) -> Dict[str, Any]:
    """The module result of a decision (before any spawn)."""
    result = dict(base)
    result.update(changed=d.changed, reason=d.reason, decision=d.message, blockers=list(d.blockers),
                  port_holder=[dict(h) for h in d.port_holder])
    report = preflight_report.to_dict()
    report["warnings"].extend(d.warnings)
    result["preflight"] = report
    if d.current is not None:
        result.update(pid=d.current.get("pid"), log_path=d.current.get("log_path"), record=dict(d.current),
                      containment=_launch_plan.record_containment(d.current))
    if d.changes is not None:
        result["changes"] = [dict(c) for c in d.changes]
    if d.probe is not None:
        result["probe"] = dict(d.probe)
    # what a replacement the plan asks for is for: a role keeps the data of a server replaced only
    # because it did not answer (unresponsive), not for a new configuration
    result["replace_reason"] = d.reason if d.action == _launch_plan.RELAUNCH else None
    if diff:
        result["diff"] = dict(d.diff)
    return result


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def spawn(req: Request) -> Dict[str, Any]:
    """Start the server; the launcher writes the record, complete from its first write (so
    there is never a server without a record) with these fields of the module's."""
    pf, interp, p = req.pf, req.pf.interp, req.params
    fields = {
        "interpreter": interp.path, "venv": interp.venv, "sglang_version": interp.sglang_version,
        "entrypoint": pf.entry, "fingerprint": req.fingerprint, "fingerprint_inputs": req.inputs,
        "host": p["host"], "port": pf.port, "tp_size": pf.tp_size,
        "nnodes": _int(pf.args.get("--nnodes"), 1), "node_rank": _int(pf.args.get("--node-rank"), 0),
        "expect": _cliargs.expected_server_info(pf.model_path, pf.tp_size, pf.port, pf.args),
    }
    cache = pf.compile_cache or _compile_cache.plan(None, pf.env)
    if cache.dir is not None:  # the collection's own directory: created privately, never removed
        _compile_cache.ensure(cache.dir, [_record.tmpdir_path(req.state_dir, req.name)])
    fields["compile_cache"] = cache.to_record()
    if req.identity is not None:  # what this server imports and loads, for the next plan to compare
        fields.update(code_identity=req.identity["code"].record(), model_identity=req.identity["model"])
    spec = _launcher.LaunchSpec(
        name=req.name, state_dir=req.state_dir, log_dir=req.log_dir, python=interp.path,
        venv=interp.venv if interp.is_venv else None, argv=req.argv, env=pf.env,
        keep_logs=p["keep_logs"], secrets=req.secrets,
        extra_secret_flags=_cliargs.secret_arg_flags(pf.args), spawn_timeout=p["spawn_timeout"],
        record_fields=fields, containment=req.backend, containment_why=req.why, cache_env=cache.added,
        launch_secrets=_last_good.launch_secrets(p["api_key"] or None, pf.args, pf.env, req.inputs))
    return _launcher.spawn(spec)


def _carrying(exc: SglangError, result: Mapping[str, Any]) -> SglangError:
    """`exc` with the result built so far (preflight, interpreter, fingerprint...); its own
    reason (locked, died, spawn_failed, unsafe_dir...) and details win."""
    details = dict(result)
    details.update(exc.details)
    details["reason"] = exc.details.get("reason") or "error"
    return SglangError(exc.msg, **details)


@contextlib.contextmanager
def _instance_lock(req: Request, take: bool, stop: Optional[_teardown_call.Request]) -> Iterator[None]:
    """Check mode and a failed preflight act on nothing: no lock (taking it creates the state dir).
    With a teardown first, as long as the teardown would wait for it."""
    if not take:
        yield
        return
    timeout = max(req.params["lock_timeout"], stop.lock_timeout if stop else 0.0)
    with _lock.instance_lock(req.state_dir, req.name, timeout):
        yield


def operation_lock(req: Request) -> Optional[Dict[str, Any]]:
    """The instance's operation lock, taken by this call when `operation_lock` asks (a
    restart's plan: one module call instead of a lock task before it). Taken for real in check
    mode too - the plan always runs in check mode - unless `check_only` (a --check run, which
    only learns whether it could be taken). Not taken when the preflight failed: nothing will
    be done then, and an unusable state dir is that failure's to name."""
    spec = req.params.get("operation_lock")
    if not spec or req.pf.report.errors:
        return None
    holder = spec.get("holder") or {}
    if not isinstance(holder.get("controller"), dict):
        raise SglangError("operation_lock needs the action plugin of sglang_launch, which records the controller "
                          "that holds the lock: call the module as llmops.sglang.sglang_launch", reason="bad_option")
    try:
        return _lock.take(req.state_dir, req.name, holder, takeover=spec.get("takeover"),
                          takeover_reason=spec.get("takeover_reason"), check_mode=bool(spec.get("check_only")),
                          lifetime=spec.get("ttl"))  # the run's own lifetime, recorded for other controllers
    except SglangError as exc:
        raise SglangError(exc.msg, **_lock.failure_details(exc.details)) from None
    except OSError as exc:
        where = exc.filename or req.state_dir
        raise SglangError("the operation lock in %s cannot be taken: %s" % (where, exc.strerror or exc),
                          reason="lock_failed") from None


def _prewarm_forced(spec: Mapping[str, Any], decision: Any) -> bool:
    """A forced restart replaces a server that runs unchanged: its new weights are warmed by this
    call too (nothing else reads them before the old server stops)."""
    return bool(spec.get("forced")) and decision.action == _launch_plan.NOOP


def prewarm(model_path: str, spec: Mapping[str, Any]) -> Dict[str, Any]:
    """sglang_prewarm's work in this call, for a server this call decided must be (re)started:
    a restart's plan warms the new weights while the old server still serves, without a task of
    its own. Read for real in check mode too (the plan runs in check mode) unless `check_only`.
    A failure is no failure of this call: the result says it (failed, reason, msg) and the
    caller decides (a memory floor or a directory without weights never stops a restart)."""
    # imported here: only a plan that decides to restart reads weights (ctypes, mincore)
    from ansible_collections.llmops.sglang.plugins.module_utils._prewarm import _prewarm

    opts = _prewarm.Options(threads=spec["threads"], min_available=spec["min_available"], timeout=spec["timeout"],
                            check_mode=bool(spec.get("check_only")))
    try:
        return _prewarm.report(_prewarm.run(model_path, opts), opts)
    except SglangError as exc:
        return dict(exc.details, failed=True, msg=exc.msg)
    except OSError as exc:  # an unreadable shard: the caller decides, the lock taken stays in the result
        return {"failed": True, "reason": _exit.os_error_reason(exc), "path": exc.filename,
                "msg": "prewarm: %s" % _exit.os_error_message(exc)}


def _kept_report(req: Request, check_mode: bool) -> _launch_plan.Facts:
    """The facts read before a teardown; the preflight report keeps what they add only when
    they refuse the launch (the facts are read again after the teardown)."""
    report = req.pf.report
    saved = (list(report.checks), list(report.errors), list(report.warnings))
    facts = gather(req, check_mode)
    if not facts.preflight_errors:
        report.checks[:], report.errors[:], report.warnings[:] = saved
    return facts


def facts_for(req: Request, stop: Optional[_teardown_call.Request], check_mode: bool, diff: bool,
              warn: Callable[[str], None], partial: Dict[str, Any]) -> _launch_plan.Facts:
    """The decision's facts. With a teardown (once the preflight passed): read with the old
    server still running first - a port holder the launch would refuse refuses before anything
    is stopped - then the teardown (its result into `partial`), then read again (check mode:
    nothing changed, the first reading stands)."""
    if stop is None or req.pf.report.errors:
        return gather(req, check_mode)
    from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_replace

    before = _kept_report(req, check_mode)
    if before.preflight_errors:
        return before
    before = _launch_replace.foreign_on_teardown_ports(req, stop, before)
    if before.preflight_errors:
        return before
    if req.restored is not None and _launch_replace.restore_runs(req, before.record):
        return before  # the last-good launch itself still runs: the restore stops nothing
    stop, kept = _keep_data_of_unresponsive(stop, before, warn)
    partial["teardown"] = _launch_replace.run_first(stop, check_mode, diff, warn)
    if kept:
        partial["teardown"]["purge_skipped"] = kept
    return before if check_mode else gather(req, check_mode)


def _keep_data_of_unresponsive(stop: _teardown_call.Request, before: _launch_plan.Facts, warn: Callable[[str], None]
                               ) -> Tuple[_teardown_call.Request, Optional[Dict[str, Any]]]:
    """A server replaced because it did not answer runs the requested configuration: what it
    wrote (the dumps in purge_paths) is the operator's data, never purged for that. The teardown
    then runs without purge_paths, and says so."""
    if before.probe is None or not stop.opts.purge_paths:
        return stop, None
    paths = list(stop.opts.purge_paths)
    why = ("the running server has the requested configuration and is replaced only because it did not answer "
           "(unresponsive): purge_paths are kept")
    warn("%s: %s" % (why, ", ".join(paths)))
    return dataclasses.replace(stop, opts=dataclasses.replace(stop.opts, purge_paths=[])), \
        {"paths": paths, "reason": "unresponsive", "why": why}


def run(p: Mapping[str, Any], check_mode: bool, diff: bool,
        warn: Callable[[str], None] = lambda _text: None,
        hide: Callable[[List[str]], None] = lambda _values: None) -> Dict[str, Any]:
    """The module's work: a result, or SglangError carrying the result so far. `hide` gets the
    secrets a restore read from the host (they were no parameter: the caller masks them too)."""
    req = prepare(p, check_mode)
    if req.restored is not None:
        hide(req.secrets)
    stop = None
    if p.get("teardown") and not req.pf.report.errors:  # a failed preflight stops nothing: no teardown to check
        from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_replace
        stop = _launch_replace.request(req)
    partial = base_result(req)
    try:
        taken = operation_lock(req)
        if taken is not None:
            partial["operation_lock"] = taken
        with _instance_lock(req, take=not check_mode and not req.pf.report.errors, stop=stop):
            damaged = damaged_record(req, check_mode, warn)
            if damaged is not None:
                partial["record_damaged"] = damaged
            prev = _previous_exit_now(req)
            if stop is not None and not check_mode and not req.pf.report.errors:
                # made before the old server stops: a name another user takes during the teardown
                # would leave the host without a server (refused after it, unsafe_dir)
                partial["output_dirs_created"] = _outputdirs.create(req.pf.output_dirs)
            decision = _launch_plan.decide(facts_for(req, stop, check_mode, diff, warn, partial))
            partial = result = outcome(partial, req.pf.report, decision, diff)
            if prev is not None:
                result["previous_exit"] = prev
                result["decision"] = "%s; %s" % (result["decision"], previous_exit_text(req.name, prev))
            if stop is not None:
                from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_replace
                _launch_replace.merge(result, diff)
            if decision.action == _launch_plan.REFUSE:
                raise SglangError(decision.failure or decision.message, reason=decision.reason)
            if decision.action == _launch_plan.LAUNCH and not check_mode:
                made = _outputdirs.create(req.pf.output_dirs)  # re-judged: made before, or missing till now
                result["output_dirs_created"] = sorted(set(result.get("output_dirs_created") or []) | set(made))
                launched = spawn(req)
                result.update(pid=launched["pid"], log_path=launched["log_path"], record=launched,
                              containment=_launch_plan.record_containment(launched))
            elif p.get("prewarm") and (decision.changed or _prewarm_forced(p["prewarm"], decision)):
                result["prewarm"] = prewarm(p["model_path"], p["prewarm"])
            return result
    except SglangError as exc:
        raise _carrying(exc, partial) from None
    except Exception as exc:  # a lock taken or a server stopped above must reach the caller (give back, roll back)
        if "operation_lock" not in partial and "teardown" not in partial:
            raise
        fields = _exit.failure(exc, "sglang_launch")
        raise _carrying(SglangError(fields.pop("msg"), **fields), partial) from None


def _previous_exit_now(req: Request) -> Optional[Dict[str, Any]]:
    """previous_exit of the instance's record as it is before anything is done (a teardown
    removes the record and exit file of a server that is gone). Never fails the call: an
    unreadable record is the decision's to report."""
    if req.pf.report.errors or not os.path.isdir(req.state_dir):
        return None
    try:
        return previous_exit(_record.read_record(req.state_dir, req.name), req.state_dir, req.name)
    except SglangError:
        return None


def _secret_values(value: Any) -> List[str]:
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _secret_values(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _secret_values(item)]
    return [str(value)] if value not in (None, True, False, "") else []


def param_secrets(p: Mapping[str, Any]) -> List[str]:
    """Every literal secret among the parameters: the api key, secret-looking env values and
    secret flags in `args`."""
    values = [p.get("api_key")]
    values += [v for k, v in (p.get("env") or {}).items() if _redact.is_secret_env(str(k))]
    values += [v for k, v in (p.get("args") or {}).items() if _cliargs.is_secret_arg(str(k))]
    return [text for value in values for text in _secret_values(value)]


def operator_warnings(preflight_report: Mapping[str, Any], p: Mapping[str, Any]) -> List[str]:
    """What the operator must see without -v: every preflight warning, GPUs that could not be
    read (so tp_size went unchecked) unless the check was turned off, a hub id model path."""
    out = list(preflight_report.get("warnings") or [])
    gpus_wanted = p.get("gpu_check", True) and p.get("gpu_backend") != "none"
    for check in preflight_report.get("checks") or []:
        if check.get("status") != "note":
            continue
        msg = str(check.get("msg") or "")
        if check.get("name") == "gpus" and gpus_wanted and msg.startswith("GPUs not checked"):
            out.append("%s: tp_size %s was not checked against the GPUs" % (msg, p.get("tp_size")))
        elif check.get("name") == "model_path" and "hub id" in msg:
            out.append(msg)
    return out
