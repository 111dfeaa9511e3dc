#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module sglang_launch: preflight, then start an SGLang server in its own session."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_launch
short_description: Start an SGLang server after a full preflight, idempotently
description:
  - Runs a complete preflight first and reports B(every) problem at once in RV(preflight.errors)
    - the interpreter is the venv's (never a C(python3) looked up in PATH), sglang is importable
    there (when not, names the interpreter and any venv that has sglang), every flag in O(args)
    exists in B(that) sglang version and every value is within its choices and type, O(model_path)
    exists (a local directory with C(config.json)) unless it is a hub id C(org/name), O(tp_size)
    GPUs are visible, the port is free (or held by this same instance), no process that is
    neither this instance nor an sglang server of the module's user listens on the port (on any
    address), the log and state directories are writable, they and the instance C(TMPDIR) have
    O(min_free_mb) MiB and O(min_free_inodes) inodes free, O(env) is valid, and the log level
    does not hide the ready line.
  - Starts C(<venv>/bin/python -m sglang.launch_server) (or C(<venv>/bin/sglang serve)) under a
    small supervising parent in a new session (setsid), stdin from C(/dev/null), stdout and
    stderr to a fresh per-launch log C(<log_dir>/<name>-<UTC timestamp>.log) with the symlink
    C(<log_dir>/<name>.log) pointing at the newest; older logs beyond O(keep_logs) are removed.
    The server survives the end of the task and of the ssh session.
  - The server gets a clean, explicit environment - C(PATH) with the venv's C(bin) first,
    C(VIRTUAL_ENV), C(HOME), C(USER), C(LANG), C(no_proxy)/C(NO_PROXY) including C(localhost,127.0.0.1,::1),
    a per-instance C(TMPDIR) C(<state_dir>/<name>.tmp), C(PYTHONUNBUFFERED=1),
    C(SPT_NOENV=1) (keeps the marker readable in titled ranks), C(SGLANG_LOG_MS=1) (millisecond
    log times), the instance marker
    variables C(LLMOPS_SGLANG_INSTANCE), C(LLMOPS_SGLANG_LAUNCH_ID), C(LLMOPS_SGLANG_STATE_DIR),
    then O(env). Proxies reach the server only when set in O(env).
  - Writes the launch record C(<state_dir>/<name>.json) (mode 0600, atomically) that
    C(sglang_ready) and C(sglang_teardown) work from. Secrets are never stored or returned in
    clear; the API key only reaches the server's command line, as sglang requires.
  - Idempotent - when the recorded server is alive (same pid and start time) with the same
    fingerprint (interpreter, sglang version, entry point, model, host, port, tp_size, args,
    env and a digest of the API key) and answers HTTP within O(probe_timeout), nothing is
    started (RV(reason) V(running)). A running server with another fingerprint, one that does
    not answer (hung or stopped, RV(reason) V(unresponsive)), or a port held by another process,
    fails with what differs and who holds the port; this module never stops anything (use
    C(sglang_teardown)).
  - Every result and failure passes through one redaction before it is returned - secret keys,
    secret flag values in command lines (also inside one-string process titles) and every
    literal secret value given are masked.
  - Holds the per-instance lock C(<state_dir>/<name>.lock) while deciding and launching.
  - What an operator must see is an Ansible warning (shown without C(-v)) - every preflight
    warning, GPUs that could not be read (no NVML, no C(nvidia-smi)) so that O(tp_size) was not
    checked against them (unless O(gpu_check=false) or O(gpu_backend=none)), and a O(model_path)
    taken for a hub id.
requirements:
  - Linux (C(/proc)).
  - psutil and requests for the Python that runs the module (SGLang's venv has both). Without
    them the module fails with reason V(missing_library), naming an interpreter on the host that
    has them - O(venv), the interpreters of launch records and running sglang servers, sglang
    installs under O(search_paths) - to pass as C(ansible_python_interpreter).
version_added: "0.1.0"
author:
  - llmops.sglang contributors (@llmops)
options:
  name:
    description: Instance name; names the launch record, the lock, the log files and the marker.
    type: str
    default: sglang
  venv:
    description:
      - Virtualenv holding sglang; its C(bin/python) runs the server. Mutually exclusive with O(python).
    type: path
  python:
    description:
      - Absolute path of the interpreter that runs the server (a bare name is refused). Mutually
        exclusive with O(venv).
    type: path
  search_paths:
    description:
      - Globs of environment roots searched for other sglang installs when the interpreter has
        none (reported in the error). Default - common venv, conda and pyenv locations.
    type: list
    elements: path
  entrypoint:
    description:
      - V(launch_server) runs C(python -m sglang.launch_server); V(serve) runs the venv's
        C(sglang serve); V(auto) prefers launch_server, else serve.
    type: str
    choices: [auto, launch_server, serve]
    default: auto
  model_path:
    description: Local model directory (with C(config.json)) or hub id C(org/name).
    type: str
    required: true
  host:
    description: Address the server binds.
    type: str
    default: 127.0.0.1
  port:
    description: TCP port of the HTTP server (an integer 1-65535).
    type: raw
    default: 30000
  tp_size:
    description: Tensor parallel size (an integer >= 1).
    type: raw
    default: 1
  args:
    description:
      - Extra server flags, keys without leading dashes (C(reasoning-parser) or C(reasoning_parser)).
        V(true) gives a bare switch, V(false) or V(null) omits the flag, a list repeats the flag
        (or follows one flag for C(nargs=+) flags), a mapping is passed as one JSON string.
      - Checked against the flags of the sglang version in the venv, including choices and types.
      - C(model-path), C(host), C(port), C(tp-size) and C(api-key) must be given through their
        own options instead.
    type: dict
    default: {}
  env:
    description:
      - Extra environment variables for the server (override the defaults, never the instance
        markers). Values must be strings; quote YAML booleans.
    type: dict
    default: {}
  api_key:
    description: API key passed as C(--api-key); never stored or returned in clear.
    type: str
  log_dir:
    description: Directory of the per-launch logs. Default C(<state_dir>/logs).
    type: path
  state_dir:
    description:
      - State directory (records, locks, TMPDIRs). Default C(/var/lib/llmops-sglang) as root,
        else C(~/.local/state/llmops-sglang).
    type: path
  keep_logs:
    description: Per-launch log files of this instance to keep, the new one included.
    type: int
    default: 5
  state:
    description: V(started) - the described server runs after the task.
    type: str
    choices: [started]
    default: started
  lock_timeout:
    description: Seconds to wait for another launch or teardown of the same instance.
    type: float
    default: 30
  introspect_timeout:
    description: Seconds allowed for reading the sglang CLI (imports sglang; cached per install).
    type: float
    default: 180
  gpu_backend:
    description: How GPUs are counted for the O(tp_size) check; V(none) skips it (a note, not a failure).
    type: str
    choices: [auto, nvml, nvidia-smi, none]
    default: auto
  gpu_check:
    description:
      - Check that O(tp_size) GPUs are visible (after C(CUDA_VISIBLE_DEVICES) in O(env), whose
        entries must name GPUs of this host). V(false) only for emulators that oversubscribe
        GPUs on purpose (e.g. the GPU validation's tp 8 over 2 GPUs).
    type: bool
    default: true
  allow_log_level_warning:
    description:
      - Allow C(--log-level warning) (or error, critical), which hides the ready line that
        C(sglang_ready) waits for. Reported in RV(preflight.warnings).
    type: bool
    default: false
  foreign_port_holders:
    description:
      - What a listener on O(port) (any address) that is neither this instance nor an sglang
        server of the module's user in its PID namespace means for the plan. A restart's teardown stops every listener
        of its ports, so such a holder is refused by default.
      - V(fail) - the preflight fails with RV(reason) V(port_busy), naming the holder (pid, user,
        command line with secrets masked); nothing is stopped.
      - V(kill) - the operator accepts that a restart stops it - check mode plans the change
        (V(port_busy), changed) with the holder labelled C(foreign=true) in RV(port_holder), the
        diff and RV(blockers). A real launch still never stops it.
    type: str
    choices: [fail, kill]
    default: fail
  min_free_mb:
    description:
      - MiB that must be free (for this user) on the filesystems of the log directory, the state
        directory and the instance C(TMPDIR) (each measured at its nearest existing ancestor
        when it does not exist yet). Below it the preflight fails with RV(reason) V(no_space),
        before anything is stopped.
    type: float
    default: 100
  min_free_inodes:
    description:
      - Inodes that must be free on the same filesystems (filesystems without an inode limit
        are not checked). Below it the preflight fails with RV(reason) V(no_space).
    type: int
    default: 1000
  probe_timeout:
    description:
      - Seconds a running server with the requested configuration has to answer an HTTP request
        (C(GET /v1/models), no credentials; any HTTP status is an answer). One that does not
        answer (hung, stopped) is RV(reason) V(unresponsive) - changed in check mode, so a restart
        replaces it; a failure otherwise.
    type: float
    default: 5
  spawn_timeout:
    description:
      - Seconds the server process may take to appear after the spawn (interpreter start-up;
        cold venvs on network filesystems are slow). When none appears, the launch's session is
        stopped and the task fails with RV(reason) V(spawn_timeout).
    type: float
    default: 30
  containment:
    description:
      - How the launched server is contained, so that C(sglang_teardown) finds every process of it
        however it forks, detaches or retitles itself. The choice and why are in
        RV(containment) and in the launch record (C(containment), C(containment_why)).
      - V(systemd) - a transient unit C(llmops-sglang-<name>.service) (C(systemd-run),
        C(KillMode=control-group)); needs PID 1 to be systemd and root.
      - V(cgroup) - a cgroup v2 directory C(<cgroup2 mount>/llmops-sglang.slice/<name>/) owned by the
        module's user; the supervisor joins it before the server starts.
      - V(none) - no cgroup; the server is found by its launch record, session, marker and titles.
      - V(auto) - V(systemd) where PID 1 is systemd and the module runs as root, else V(cgroup) where
        cgroup v2 is writable by the module's user, else V(none).
      - A backend asked for by name that is not available fails with RV(reason)
        V(containment_unavailable) before anything is read or created. An instance cgroup (or unit)
        that still holds processes refuses the launch with V(cgroup_busy) (changed in check mode).
    type: str
    choices: [auto, systemd, cgroup, none]
    default: auto
attributes:
  check_mode:
    support: full
    description:
      - Runs the whole preflight and starts nothing. A running instance with another fingerprint
        is reported as changed with RV(reason) V(config_changed) and the differences (this is how
        the restart role plans); one that does not answer within O(probe_timeout) as changed with
        RV(reason) V(unresponsive). A port held by an sglang server that is not this instance is
        reported in RV(port_holder) and RV(blockers) with RV(reason) V(port_busy) (changed); a
        foreign holder fails the plan unless O(foreign_port_holders=kill). An instance cgroup that still
        holds processes is reported the same way with RV(reason) V(cgroup_busy). The containment
        backend is chosen and reported (RV(containment)); nothing is created.
  diff_mode:
    support: full
    description:
      - Before/after fingerprint inputs (secrets masked); the "before" side starts with one
        C(# port holder:) line per other listener on the port, labelled C([foreign]) when it is one.
notes:
  - Requires Linux C(/proc). GPUs are counted with NVML (nvidia-ml-py) when importable, else C(nvidia-smi).
  - The server runs under a supervising parent (C(<state_dir>/llmops-sglang-supervisor.py)) that
    forwards SIGTERM/SIGINT and writes C(<state_dir>/<name>.exit.json) when the server exits.
seealso:
  - module: llmops.sglang.sglang_ready
  - module: llmops.sglang.sglang_teardown
"""

EXAMPLES = r"""
- name: Start the serving instance from the venv, with the Kimi reasoning parser
  llmops.sglang.sglang_launch:
    name: serving
    venv: /root/ml-env
    model_path: /models/Kimi-K2.5
    port: 8000
    tp_size: 8
    args:
      reasoning-parser: kimi_k2
      tool-call-parser: kimi_k2
      trust-remote-code: true
      mem-fraction-static: 0.88
    api_key: "{{ vault_sglang_api_key }}"
  register: launch

- name: Plan a restart - what would change? (check mode, with the diff)
  llmops.sglang.sglang_launch:
    name: extraction
    venv: /root/ml-env
    model_path: /models/Kimi-K2.5
    port: 8000
    tp_size: 8
    args:
      disable-cuda-graph: true
      disable-radix-cache: true
      disable-custom-all-reduce: true
      mem-fraction-static: 0.88
    env:
      SGLANG_HS_DUMP_DIR: /dev/shm/sglang_hs
      NCCL_PROTO: Simple
  check_mode: true
  diff: true
  register: plan
"""

RETURN = r"""
changed:
  description: Whether a server was (or in check mode would be) started.
  returned: always
  type: bool
reason:
  description:
    - V(new) (no record), V(not_running) (recorded server gone), V(running) (same server alive
      and answering, nothing done), V(config_changed) (alive with another fingerprint; check mode
      only, else a failure), V(unresponsive) (alive with the same fingerprint but no HTTP answer
      within O(probe_timeout); check mode only, else a failure), V(port_busy) (port held by
      another sglang server - changed in check mode -, or by a foreign holder - a failure unless
      O(foreign_port_holders=kill)), V(cgroup_busy) (the instance cgroup or unit still holds
      processes of another launch of this name - changed in check mode, else a failure).
    - On failure also V(containment_unavailable) (the O(containment) asked for is not available
      here; nothing was done), V(unsafe_cgroup) (the instance cgroup exists owned by another user,
      or is not a directory), V(containment_failed) (the supervisor or the server did not end up in
      the instance cgroup; the launch was stopped), V(missing_library) (psutil or requests not importable, see RV(interpreter_with_libraries)),
      V(no_space) (below O(min_free_mb) or O(min_free_inodes)), V(preflight_failed)
      (several kinds of preflight failure), and the reasons of the step that failed - V(bad_name),
      V(unsafe_dir), V(locked), V(spawn_failed), V(spawn_timeout), V(died), V(io_error), ... -
      taken from where the error was raised.
  returned: always
  type: str
  sample: new
decision:
  description: One sentence saying what was (or in check mode would be) done and why.
  returned: always
  type: str
  sample: "instance 'serving' (pid 4242, stopped (state T)) runs the requested configuration but did not answer /v1/models within 5 s: it must be replaced"
probe:
  description: The HTTP probe of a running server that did not answer - C(endpoint), C(timeout), C(answered) (false),
    C(status), C(error), C(state) (process state, V(T) when stopped).
  returned: when reason is unresponsive
  type: dict
pid:
  description: Main server process (the one that owns the port); null in check mode.
  returned: always
  type: int
  sample: 123456
log_path:
  description: This launch's own log file.
  returned: always
  type: str
  sample: /var/lib/llmops-sglang/logs/serving-20250101T120000Z.log
record:
  description: The launch record as written (secrets masked); see docs/conventions.md.
  returned: when a server runs or was started
  type: dict
fingerprint:
  description: sha256 of everything that defines the server (secrets included only as digests).
  returned: when preflight resolved the interpreter
  type: str
fingerprint_inputs:
  description: The inputs of the fingerprint, secrets masked.
  returned: when preflight resolved the interpreter
  type: dict
changes:
  description: What differs from the running server, one entry per key (C(args.reasoning-parser), ...).
  returned: when reason is config_changed
  type: list
  elements: dict
preflight:
  description: The preflight report - every check with its outcome, and all errors and warnings.
  returned: always
  type: dict
  contains:
    checks:
      description: One entry per check - C(name), C(status) (V(ok), V(failed), V(warning), V(note) or V(skipped)) and C(msg).
      returned: always
      type: list
      elements: dict
    errors:
      description: Every problem that fails the preflight, as one sentence each.
      returned: always
      type: list
      elements: str
    warnings:
      description: Problems that do not fail the preflight (for example a log level that hides the ready line).
      returned: always
      type: list
      elements: str
interpreter:
  description: The resolved interpreter (path, venv, python_version, sglang_version, entrypoints, ...).
  returned: when resolved
  type: dict
argv:
  description: The server command line (secrets masked).
  returned: when preflight resolved the interpreter
  type: list
  elements: str
port_holder:
  description:
    - Processes listening on the port (any address) that are not this instance - C(pid), C(user),
      C(cmdline) (secrets masked), C(address), C(instance) (false), C(sglang) (why it is an sglang
      server of the module's user, or null), C(foreign) (true when it is not - a plain listener,
      another user's process, a process in another PID namespace, or one whose owner is not
      visible) and C(note) (for example V(in another PID namespace (a container))).
  returned: always
  type: list
  elements: dict
  sample: [{pid: 4242, user: root, cmdline: [python3, -m, http.server, "8000"], address: 0.0.0.0,
            instance: false, sglang: null, foreign: true}]
blockers:
  description: Check mode - what would make the real launch fail although the preflight passed.
  returned: always
  type: list
  elements: str
log_tail:
  description: Last lines of the log (secrets masked) when the server died right after the launch or never appeared.
  returned: on failure with reason died or spawn_timeout
  type: str
diff:
  description: Fingerprint inputs before (the running server, if any) and after, as text.
  returned: with --diff
  type: dict
missing_libraries:
  description: The Python libraries the module's interpreter could not import.
  returned: when reason is missing_library
  type: list
  elements: str
  sample: [psutil, requests]
containment:
  description:
    - The containment of the server - C(backend) (V(systemd), V(cgroup) or V(none)), C(why) (how it
      was chosen), C(cgroup) (absolute path of the instance cgroup) and C(unit) (the systemd unit),
      null where not applicable. For a server already running, what its launch record says; for a
      new launch, what O(containment) chose (C(cgroup) and C(unit) filled in once it started).
  returned: always, except when O(containment) could not be chosen
  type: dict
  sample: {backend: cgroup, why: "auto: PID 1 is not systemd; cgroup v2 at /sys/fs/cgroup is writable by uid 0",
           cgroup: /sys/fs/cgroup/llmops-sglang.slice/serving, unit: null}
interpreter_with_libraries:
  description:
    - An interpreter on the host that imports psutil and requests (run only when nobody but root
      or the module's user can replace it), to pass as C(ansible_python_interpreter); null when
      none was found.
  returned: when reason is missing_library
  type: str
  sample: /root/ml-env/bin/python
"""

import os
from typing import Any, Dict, List, Optional

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import (
    _cliargs, _containment, _deps, _exit, _http, _launcher, _lock, _preflight, _procs, _record, _redact)
from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError


class _NoLock:
    """Check mode takes no lock: it must not create the state dir or wait on a running launch."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


def _fingerprint_interpreter(path: str) -> str:
    """The venv's interpreter with its directory resolved. Not the file's realpath: every venv's
    bin/python resolves to the same base interpreter, so that would hide a venv change."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _is_running(record: Optional[Dict[str, Any]]) -> bool:
    if not record or not isinstance(record.get("pid"), int):
        return False
    return _procs.is_alive(record["pid"], record.get("start_time"))


def _preflight_all(p: Dict[str, Any], dirs: Dict[str, str], check_mode: bool) -> Dict[str, Any]:
    """Every check, in one pass; returns the validated values and the report."""
    report = _preflight.Report()
    state_dir = dirs["state_dir"]
    port = _preflight.check_port_param(report, p["port"])
    tp_size = _preflight.check_tp_size(report, p["tp_size"])
    if p["keep_logs"] < 1:
        report.fail("keep_logs", "keep_logs must be at least 1 (the new log), got %d" % p["keep_logs"])
    env = _preflight.check_env(report, p["env"])
    args = _preflight.check_args(report, p["args"])
    _preflight.check_log_level(report, args, p["allow_log_level_warning"])
    _preflight.check_dirs(report, {"state_dir": state_dir, "log_dir": dirs["log_dir"]})
    full = _preflight.check_space(report, dirs, p["min_free_mb"], p["min_free_inodes"])
    interp = _preflight.check_interpreter(report, p["venv"], p["python"], timeout=30)
    entry, entry_argv, flags = None, [], None
    if interp is not None:
        if interp.error and interp.sglang_installed:
            report.warn("interpreter", "interpreter %s reported: %s" % (interp.path, interp.error))
        if _preflight.check_sglang(report, interp, p["search_paths"]):
            entry, entry_argv = _preflight.choose_entrypoint(report, interp, p["entrypoint"])
            cache = os.path.join(state_dir, "introspect-cache")
            if (check_mode and not os.path.isdir(state_dir)) or "state_dir" in full:
                cache = None  # nothing is created in a state dir that does not exist yet, or is full
            flags = _preflight.check_flags(report, interp, args, cache, p["introspect_timeout"])
        else:
            report.skip("flags", "flags not checked: no sglang in %s" % interp.path)
    else:
        report.skip("sglang", "sglang not checked: no usable interpreter")
    model_path = _preflight.check_model_path(report, p["model_path"])
    if tp_size is not None:
        _preflight.check_gpus(report, tp_size, p["gpu_backend"], env, args, p["gpu_check"])
    return {"report": report, "port": port, "tp_size": tp_size, "env": env, "args": args,
            "interp": interp, "entry": entry, "entry_argv": entry_argv, "flags": flags,
            "model_path": model_path}


def _holders_text(holders: List[Dict[str, Any]]) -> str:
    """The port's other holders as diff lines: what a restart would stop."""
    return "".join("# port holder: %s\n" % _preflight.describe_holder(h) for h in holders)


def _diff(before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]],
          holders: List[Dict[str, Any]]) -> Dict[str, str]:
    return {"before": _holders_text(holders) + _cliargs.inputs_text(before), "after": _cliargs.inputs_text(after),
            "before_header": "running server", "after_header": "requested server"}


class _Failed(Exception):
    """A failure that carries the whole result built so far (preflight, holders, diff...)."""

    def __init__(self, msg: str, result: Dict[str, Any]) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result


def _fail(msg: str, result: Dict[str, Any], reason: Optional[str] = None) -> None:
    if reason is not None:
        result["reason"] = reason
    result["decision"] = result.get("decision") or msg
    raise _Failed(msg, result)


def _run(module: AnsibleModule) -> Dict[str, Any]:
    p = module.params
    name = _record.validate_name(p["name"])
    # Before anything is read or created: a backend that is not available fails the task here.
    backend, why = _containment.choose(p["containment"])
    state_dir = os.path.abspath(p["state_dir"] or _record.default_state_dir())
    log_dir = os.path.abspath(p["log_dir"] or os.path.join(state_dir, "logs"))
    dirs = {"state_dir": state_dir, "log_dir": log_dir, "tmpdir": _record.tmpdir_path(state_dir, name)}
    api_key = p["api_key"] or None
    result: Dict[str, Any] = {"changed": False, "reason": None, "decision": None, "pid": None,
                              "log_path": None, "port_holder": [], "blockers": [],
                              "containment": {"backend": backend, "why": why, "cgroup": None, "unit": None}}
    pf = _preflight_all(p, dirs, module.check_mode)
    report: _preflight.Report = pf["report"]
    result["preflight"] = report.to_dict()
    interp = pf["interp"]
    if interp is not None:
        result["interpreter"] = interp.to_dict()
    argv: List[str] = []
    redacted = None
    fp = None
    if pf["entry"] and pf["port"] is not None and pf["tp_size"] is not None:
        argv = _cliargs.server_argv(pf["entry_argv"], pf["model_path"], p["host"], pf["port"], pf["tp_size"],
                                    pf["args"], api_key, pf["flags"])
        hashed, redacted = _cliargs.fingerprint_inputs(
            _fingerprint_interpreter(interp.path), interp.sglang_version or "", pf["entry"], pf["model_path"],
            p["host"], pf["port"], pf["tp_size"], pf["args"], pf["env"], api_key)
        fp = _cliargs.fingerprint(hashed)
        extra = _cliargs.secret_arg_flags(pf["args"])
        result.update(fingerprint=fp, fingerprint_inputs=redacted, argv=_redact.redact_argv(argv, extra))
    secrets = _cliargs.argv_secrets(api_key, pf["args"], pf["env"])

    # Check mode and a failed preflight act on nothing: no lock (which would create the state dir).
    locked = not module.check_mode and not report.errors
    ctx = {"name": name, "state_dir": state_dir, "log_dir": log_dir, "interp": interp, "argv": argv,
           "pf": pf, "secrets": secrets, "host": p["host"], "keep_logs": p["keep_logs"],
           "probe_timeout": p["probe_timeout"], "spawn_timeout": p["spawn_timeout"],
           "containment": backend, "containment_why": why}
    try:
        with (_lock.instance_lock(state_dir, name, p["lock_timeout"]) if locked else _NoLock()):
            return _plan(module, p, result, report, pf, fp, redacted, ctx)
    except SglangError as exc:
        # The reason comes from where it was raised (locked, died, spawn_failed, unsafe_dir...);
        # the result so far (preflight, interpreter, fingerprint) goes with it.
        details = dict(exc.details)
        result["reason"] = details.pop("reason", None) or "error"
        result.update(details)
        raise _Failed(exc.msg, result)


def _plan(module: AnsibleModule, p: Dict[str, Any], result: Dict[str, Any], report: _preflight.Report,
          pf: Dict[str, Any], fp: Optional[str], redacted: Optional[Dict[str, Any]],
          ctx: Dict[str, Any]) -> Dict[str, Any]:
    """Under the lock: the record, the port and its holders, then the decision."""
    record = _record.read_record(ctx["state_dir"], ctx["name"]) if os.path.isdir(ctx["state_dir"]) else None
    running = _is_running(record)
    port_state, holders = "free", []
    if pf["port"] is not None:
        port_report = _preflight.Report()
        port_state, holders = _preflight.check_port(port_report, p["host"], pf["port"],
                                                    record if running else None, running)
        report.checks.extend(port_report.checks)
        report.warnings.extend(port_report.warnings)
        # A foreign holder fails the preflight on its own (naming it once); a busy port alone
        # is the port_busy decision below, named with the other failures when there are some.
        refused = _preflight.check_foreign_holders(report, pf["port"], holders, p["foreign_port_holders"])
        if report.errors and not refused:
            report.errors.extend(e for e in port_report.errors if e not in report.errors)
        result["port_holder"] = [h for h in holders if not h.get("instance")]
    result["preflight"] = report.to_dict()
    if module._diff:
        before = record.get("fingerprint_inputs") if (record and running) else None
        result["diff"] = _diff(before, redacted, result["port_holder"])
    if report.errors:
        _fail("preflight failed: " + "; ".join(report.errors), result, report.reason())
    return _decide(module, result, record, running, port_state, holders, fp, redacted, ctx)


def _unresponsive(record: Dict[str, Any], host: str, port_state: str, timeout: float) -> Optional[Dict[str, Any]]:
    """The probe of a running server that holds its port, when it does not answer HTTP within
    `timeout` (a hung or stopped server); None when it answers or is not listening yet."""
    if port_state != "instance" or not isinstance(record.get("port"), int):
        return None
    probe = _http.answers(host, record["port"], timeout)
    if probe["answered"]:
        return None
    proc = _procs.read_proc(record["pid"])
    probe["state"] = proc.state if proc else None
    return probe


def _decide(module: AnsibleModule, result: Dict[str, Any], record: Optional[Dict[str, Any]], running: bool,
            port_state: str, holders: List[Dict[str, Any]], fp: str, redacted: Dict[str, Any],
            ctx: Dict[str, Any]) -> Dict[str, Any]:
    """running and answering -> nothing; changed config or hung -> report (check) or fail; else launch."""
    others = [h for h in holders if not h.get("instance")]
    if running:
        before = record.get("fingerprint_inputs")
        result.update(pid=record.get("pid"), log_path=record.get("log_path"), record=record,
                      containment=_record_containment(record))
        if others:
            result["blockers"].append("port %s is also held by %s" % (redacted["port"], _preflight.describe_holders(others)))
        if record.get("fingerprint") == fp:
            probe = _unresponsive(record, ctx["host"], port_state, ctx["probe_timeout"])
            if probe is None:
                result["reason"] = "running"
                result["decision"] = "instance %r is running (pid %s) with the requested configuration: nothing to do" % (
                    ctx["name"], record.get("pid"))
                if others:
                    result["preflight"]["warnings"].append(
                        "instance %r is running but port %s is also held by %s" % (
                            ctx["name"], record.get("port"), _preflight.describe_holders(others)))
                return result
            result["probe"] = probe
            stopped = ", stopped (state T)" if probe.get("state") == "T" else ""
            result["reason"] = "unresponsive"
            result["decision"] = ("instance %r (pid %s%s) runs the requested configuration but did not answer %s "
                                  "within %s s: it must be replaced" % (
                                      ctx["name"], record.get("pid"), stopped, probe["endpoint"], _num(probe["timeout"])))
            if module.check_mode:
                result["changed"] = True
                return result
            _fail(result["decision"] + "; stop it first with sglang_teardown - sglang_launch never stops a server",
                  result)
        changes = _cliargs.diff_inputs(before, redacted)
        result.update(reason="config_changed", changes=changes)
        summary = ", ".join("%s: %r -> %r" % (c["key"], c["before"], c["after"]) for c in changes)
        result["decision"] = "instance %r is running (pid %s) with another configuration (%s)" % (
            ctx["name"], record.get("pid"), summary)
        if module.check_mode:
            result["changed"] = True
            return result
        _fail(result["decision"] + "; stop it first with sglang_teardown - sglang_launch never stops a server",
              result)
    result["reason"] = "not_running" if record else "new"
    if port_state == "busy":
        holder_text = _preflight.describe_holders(others)
        result["blockers"].append("port %s on %s is held by %s" % (redacted["port"], ctx["host"], holder_text))
        result["reason"] = "port_busy"
        result["decision"] = "port %s on %s is held by %s" % (redacted["port"], ctx["host"], holder_text)
        if module.check_mode:
            result["changed"] = True
            return result
        _fail("%s; sglang_launch never stops a process - run sglang_teardown with ports: [%s] or choose "
              "another port" % (result["decision"], redacted["port"]), result)
    problem = _containment.launch_problem(ctx["name"], ctx["containment"])
    if problem:
        result["blockers"].append(problem)
        result["reason"] = "cgroup_busy"
        result["decision"] = problem
        if module.check_mode:
            result["changed"] = True
            return result
        _fail(problem + "; stop it first with sglang_teardown", result)
    result["changed"] = True
    result["decision"] = "%s: a server %s started" % (
        "no launch record" if not record else "the recorded server is gone",
        "would be" if module.check_mode else "was")
    if module.check_mode:
        return result
    launched = _launch(ctx, fp, redacted)
    result.update(pid=launched["pid"], log_path=launched["log_path"], record=launched,
                  containment=_record_containment(launched))
    return result


def _record_containment(record: Dict[str, Any]) -> Dict[str, Any]:
    """The containment a record says its launch has (a record from before containment: none)."""
    backend = record.get("containment") or "none"
    why = record.get("containment_why")
    if "containment" not in record:
        why = "the launch record predates containment (record version %s): its server is found by the " \
              "launch record, session, marker and titles" % record.get("record_version", 1)
    return {"backend": backend, "why": why, "cgroup": record.get("cgroup"), "unit": record.get("unit")}


def _num(value: float) -> str:
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


def _launch(ctx: Dict[str, Any], fp: str, redacted: Dict[str, Any]) -> Dict[str, Any]:
    """Start the server; the launcher writes the record, complete from its first write (so
    there is never a server without a record) with these fields of the module's."""
    pf, interp = ctx["pf"], ctx["interp"]
    fields = {
        "interpreter": interp.path, "venv": interp.venv, "sglang_version": interp.sglang_version,
        "entrypoint": pf["entry"], "fingerprint": fp, "fingerprint_inputs": redacted,
        "host": ctx["host"], "port": pf["port"], "tp_size": pf["tp_size"],
        "nnodes": _int(pf["args"].get("--nnodes"), 1), "node_rank": _int(pf["args"].get("--node-rank"), 0),
        "expect": _cliargs.expected_server_info(pf["model_path"], pf["tp_size"], pf["port"], pf["args"]),
    }
    spec = _launcher.LaunchSpec(
        name=ctx["name"], state_dir=ctx["state_dir"], log_dir=ctx["log_dir"], python=interp.path,
        venv=interp.venv if interp.is_venv else None, argv=ctx["argv"], env=pf["env"],
        keep_logs=ctx["keep_logs"], secrets=ctx["secrets"],
        extra_secret_flags=_cliargs.secret_arg_flags(pf["args"]), spawn_timeout=ctx["spawn_timeout"],
        record_fields=fields, containment=ctx["containment"], containment_why=ctx["containment_why"])
    return _launcher.spawn(spec)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _secret_values(value: Any) -> List[str]:
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _secret_values(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _secret_values(item)]
    return [str(value)] if value not in (None, True, False, "") else []


def _param_secrets(p: Dict[str, Any]) -> List[str]:
    """Every literal secret among the parameters: the api key, secret-looking env values and
    secret flags in `args`."""
    values = [p.get("api_key")]
    values += [v for k, v in (p.get("env") or {}).items() if _redact.is_secret_env(str(k))]
    values += [v for k, v in (p.get("args") or {}).items() if _cliargs.is_secret_arg(str(k))]
    return [text for value in values for text in _secret_values(value)]


def _register_secrets(module: AnsibleModule) -> None:
    """Secret env values (HF_TOKEN, *_PASSWORD...) and secret flags in `args` get Ansible's own
    no_log masking, so they never show in `invocation`, messages or -vvv output."""
    for text in _param_secrets(module.params):
        if len(text) >= 8:  # shorter values would mask unrelated text (paths) in results
            module.no_log_values.add(text)


def operator_warnings(preflight: Dict[str, Any], p: Dict[str, Any]) -> List[str]:
    """What the operator must see without -v: every preflight warning, GPUs that could not be
    read (so tp_size went unchecked) unless the check was turned off, a hub id model path."""
    out = list(preflight.get("warnings") or [])
    gpus_wanted = p.get("gpu_check", True) and p.get("gpu_backend") != "none"
    for check in preflight.get("checks") or []:
        if check.get("status") != "note":
            continue
        msg = str(check.get("msg") or "")
        if check.get("name") == "gpus" and gpus_wanted and msg.startswith("GPUs not checked"):
            out.append("%s: tp_size %s was not checked against the GPUs" % (msg, p.get("tp_size")))
        elif check.get("name") == "model_path" and "hub id" in msg:
            out.append(msg)
    return out


def _warn(module: AnsibleModule, result: Dict[str, Any], secrets: List[str]) -> None:
    for text in operator_warnings(result.get("preflight") or {}, module.params):
        module.warn(_redact.redact_text(text, secrets))


def _body(module: AnsibleModule) -> Dict[str, Any]:
    """The module's work; every result and failure leaves through the same redaction."""
    secrets = _param_secrets(module.params)
    try:
        if not os.path.isdir("/proc/self"):
            raise SglangError("sglang_launch needs Linux /proc", reason="unsupported")
        result = _run(module)
        _warn(module, result, secrets)
        return _redact.redact_result(result, secrets)
    except _Failed as exc:
        _warn(module, exc.result, secrets)
        details = _redact.redact_result(exc.result, secrets)
        details.pop("msg", None)
        raise SglangError(exc.msg, **details)
    except SglangError as exc:  # before the plan (a bad name): its reason is kept
        raise SglangError(exc.msg, **_redact.redact_result(exc.details, secrets))


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default="sglang"),
            venv=dict(type="path"),
            python=dict(type="path"),
            search_paths=dict(type="list", elements="path"),
            entrypoint=dict(type="str", default="auto", choices=list(_preflight.ENTRYPOINTS)),
            model_path=dict(type="str", required=True),
            host=dict(type="str", default="127.0.0.1"),
            port=dict(type="raw", default=30000),
            tp_size=dict(type="raw", default=1),
            args=dict(type="dict", default={}),
            env=dict(type="dict", default={}),
            api_key=dict(type="str", no_log=True),
            log_dir=dict(type="path"),
            state_dir=dict(type="path"),
            keep_logs=dict(type="int", default=5),
            state=dict(type="str", default="started", choices=["started"]),
            lock_timeout=dict(type="float", default=30),
            introspect_timeout=dict(type="float", default=180),
            gpu_backend=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia-smi", "none"]),
            gpu_check=dict(type="bool", default=True),
            allow_log_level_warning=dict(type="bool", default=False),
            foreign_port_holders=dict(type="str", default="fail", choices=list(_preflight.FOREIGN_POLICIES)),
            min_free_mb=dict(type="float", default=100),
            min_free_inodes=dict(type="int", default=1000),
            probe_timeout=dict(type="float", default=5),
            spawn_timeout=dict(type="float", default=30),
            containment=dict(type="str", default="auto", choices=list(_containment.BACKENDS)),
        ),
        mutually_exclusive=[("venv", "python")],
        required_one_of=[("venv", "python")],
        supports_check_mode=True,
    )
    _register_secrets(module)
    _deps.require(module)
    _exit.run(module, _body, "sglang_launch", _param_secrets(module.params))


if __name__ == "__main__":
    main()
