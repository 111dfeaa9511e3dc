"""The spawn: supervisor + server in a new session, a clean explicit environment, a fresh
per-launch log file, and the launch record that every later step works from.

The server must outlive the ansible task and the ssh session: a new session (setsid) with no
controlling terminal, stdin from /dev/null, stdout/stderr to the log file, no inherited fds.

There is never a server without a record: the record is written right after the spawn, before
the interpreter has even started (so before the server can bind), and completed once the
server process exists. Any failure after the spawn kills the launch's whole session before it
is reported.

With cgroup containment the instance cgroup is created (fresh, or refused when a running launch
still has processes in it) before the spawn, the supervisor joins it before it starts the server,
and the launch is accepted only when supervisor and server are both seen inside it. With systemd
containment the supervisor is the main process of a transient unit (systemd-run), whose cgroup it
is born in; its payload (argv and the whole server environment) comes from a 0600 file, never
from the unit's properties, which every local user can read.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._host import _last_good
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _supervisor
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment_systemd as _systemd
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
NO_PROXY = "localhost,127.0.0.1,::1"
# Inherited from the module's environment when present: identity and locale, nothing else.
_PASS_THROUGH = ("HOME", "USER", "LOGNAME", "LANG")
_PROXY_KEYS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
SPAWN_TIMEOUT = 30.0   # cold venvs on network filesystems take many seconds to start python
SETTLE_SECONDS = 0.3
STOP_SECONDS = 5.0
LOG_TAIL_BYTES = 4096


@dataclass
class LaunchSpec:
    """What a launch starts: the server's argv and environment, where it logs, under which name."""

    name: str
    state_dir: str
    log_dir: str
    python: str                     # venv interpreter path as given (never its realpath)
    venv: Optional[str]
    argv: List[str]                 # full server argv, secrets in clear (only here)
    env: Dict[str, str]             # the operator's env
    keep_logs: int = 5
    secrets: List[str] = field(default_factory=list)
    extra_secret_flags: List[str] = field(default_factory=list)
    # Seconds the server process may take to appear after the spawn (interpreter start-up).
    spawn_timeout: float = SPAWN_TIMEOUT
    # More fields for the record (fingerprint, port, ...), so it is complete from its first write.
    record_fields: Dict[str, Any] = field(default_factory=dict)
    # The backend _containment.choose picked: "none", "cgroup" (the supervisor joins the instance
    # cgroup before the server starts) or "systemd" (the supervisor is a transient unit's main
    # process), and why it was picked (kept in the record).
    containment: str = "none"
    containment_why: str = ""
    # The compile/JIT cache variables the collection adds (_compile_cache.Plan.added): set in the
    # server's environment wherever the operator's env does not set them.
    cache_env: Dict[str, str] = field(default_factory=dict)
    # The values the record masks (_last_good.launch_secrets), kept in <name>.secrets for a
    # promotion to last good; None writes no file.
    launch_secrets: Optional[Dict[str, Any]] = None


# --- log files -------------------------------------------------------------------------------

def utc_stamp(now: Optional[float] = None) -> str:
    return datetime.fromtimestamp(now if now is not None else time.time(), timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _log_re(name: str) -> "re.Pattern[str]":
    return re.compile(r"^%s-\d{8}T\d{6}Z(-\d+)?\.log$" % re.escape(name))


def open_launch_log(log_dir: str, name: str, now: Optional[float] = None) -> Tuple[str, int]:
    """A fresh file for this launch (O_EXCL: never appended to an older launch's log, so every
    line in it belongs to this launch); a numeric suffix when two launches share a second.
    0600: sglang prints its server_args, API key included, into it."""
    _record.ensure_dir(log_dir, label="log_dir")
    stem = "%s-%s" % (name, utc_stamp(now))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND | os.O_CLOEXEC
    for attempt in range(1000):
        path = os.path.join(log_dir, "%s%s.log" % (stem, "" if attempt == 0 else "-%d" % attempt))
        try:
            fd = os.open(path, flags, 0o600)
            return path, fd
        except FileExistsError:
            continue
        except OSError as exc:
            raise _record.io_error("create the log file", path, exc)
    raise SglangError("cannot create a fresh log file %s*.log in %s" % (stem, log_dir), reason="io_error",
                      path=log_dir)


def link_path(log_dir: str, name: str) -> str:
    return os.path.join(log_dir, "%s.log" % name)


def update_log_link(log_dir: str, name: str, log_path: str) -> str:
    """<name>.log -> newest per-launch log, replaced atomically (rename over the old link)."""
    link = link_path(log_dir, name)
    tmp = os.path.join(log_dir, ".%s.%s.tmp" % (os.path.basename(link), os.urandom(6).hex()))
    try:
        os.symlink(os.path.basename(log_path), tmp)  # fails on anything already there
        try:
            os.rename(tmp, link)
        except OSError:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise _record.io_error("update the log link", link, exc)
    return link


def prune_logs(log_dir: str, name: str, keep: int, current: str) -> List[str]:
    """Delete older per-launch logs of this instance beyond the newest `keep` (current kept)."""
    pattern = _log_re(name)
    try:
        entries = [e for e in os.listdir(log_dir) if pattern.match(e)]
    except OSError:
        return []
    paths = [os.path.join(log_dir, e) for e in entries]

    def age_key(path: str) -> Tuple[float, str]:
        try:
            return os.stat(path).st_mtime, path
        except OSError:
            return 0.0, path

    ordered = sorted(paths, key=age_key, reverse=True)
    survivors = [current] + [p for p in ordered if p != current][:max(keep - 1, 0)]
    removed = []
    for path in ordered:
        if path not in survivors:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def log_tail(path: str, secrets: List[str], max_bytes: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return _redact.redact_text(data, secrets)


# --- environment -----------------------------------------------------------------------------

def _merge_no_proxy(value: Optional[str]) -> str:
    items = [i.strip() for i in (value or "").split(",") if i.strip()]
    for host in NO_PROXY.split(","):
        if host not in items:
            items.append(host)
    return ",".join(items)


def build_env(python: str, venv: Optional[str], user_env: Mapping[str, str], markers: Mapping[str, str],
              tmpdir: str, inherited: Optional[Mapping[str, str]] = None,
              caches: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The server's whole environment, built explicitly: nothing from the ansible task leaks in
    (no proxies unless the operator sets them, no PYTHONPATH, no activated-venv leftovers).
    `caches`: the persistent compile/JIT cache variables, outside the per-launch TMPDIR (which
    the teardown removes), each only where the operator's env does not set it."""
    inherited = os.environ if inherited is None else inherited
    bin_dir = os.path.join(venv, "bin") if venv else os.path.dirname(python)
    env: Dict[str, str] = {k: inherited[k] for k in _PASS_THROUGH if inherited.get(k)}
    env.setdefault("LANG", "C.UTF-8")
    env["PATH"] = "%s:%s" % (bin_dir, SYSTEM_PATH)
    if venv:
        env["VIRTUAL_ENV"] = venv
    env["TMPDIR"] = tmpdir
    env["PYTHONUNBUFFERED"] = "1"
    # setproctitle overwrites the environ block of every titled child (sglang::scheduler_TP0...)
    # unless SPT_NOENV is set; keeping it makes the instance marker readable in every rank.
    env["SPT_NOENV"] = "1"
    # Millisecond log timestamps: sglang_ready's startup timeline is then exact, not whole seconds.
    env["SGLANG_LOG_MS"] = "1"
    env.update(markers)
    env.update({k: str(v) for k, v in user_env.items()})
    for key, value in (caches or {}).items():
        if key not in user_env:  # the operator's own value wins
            env[key] = value
    # Warmup talks HTTP to localhost: a proxy must never see it (after env, which may add more).
    merged = _merge_no_proxy(env.get("no_proxy") or env.get("NO_PROXY"))
    env["no_proxy"] = env["NO_PROXY"] = merged
    env.update(markers)  # the markers are identity: never overridden
    return env


# --- the spawn -------------------------------------------------------------------------------

def _child_of(parent: int) -> Optional[_procs.Proc]:
    """The supervisor's server process (it has one child): a parent-link pass, not a full row
    per process on every poll of the spawn wait."""
    kids = _procs.children_of(parent)
    return kids[0] if kids else None


def _exit_text(exit_data: Optional[Dict[str, Any]], returncode: Optional[int]) -> str:
    if exit_data:
        if exit_data.get("error"):
            return exit_data["error"]
        if exit_data.get("signal"):
            return "killed by %s" % exit_data["signal"]
        return "exit status %s" % exit_data.get("returncode")
    if returncode is not None:
        return "supervisor exit status %d" % returncode
    return "unknown exit status"


class UnitSupervisor:
    """The supervisor as the main process of a systemd unit: PID 1's child, not this process's.
    Its exit status is known only from the exit file (poll() answers -1 once it is gone)."""

    def __init__(self, pid: int, unit: str) -> None:
        self.pid = pid
        self.unit = unit
        self.returncode: Optional[int] = None
        proc = _procs.read_proc(pid)
        self.start_time = proc.start_time if proc else None

    def poll(self) -> Optional[int]:
        if self.returncode is None and not _procs.is_alive(self.pid, self.start_time):
            self.returncode = -1
        return self.returncode


def exit_status(sup: "subprocess.Popen[bytes]") -> Optional[int]:
    """The supervisor's exit status once it has exited, WITHOUT reaping it: until it is reaped
    its pid - the launch's process group and session id - cannot be reused by anyone else."""
    if isinstance(sup, UnitSupervisor):
        return sup.poll()
    if sup.returncode is not None:
        return sup.returncode
    try:
        info = os.waitid(os.P_PID, sup.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return sup.poll()
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def wait_for_server(sup: "subprocess.Popen[bytes]", exit_path: str, launch_id: str,
                    timeout: float = SPAWN_TIMEOUT) -> Tuple[Optional[_procs.Proc], Optional[Dict[str, Any]]]:
    """(server Proc, None) once the supervisor's child exists, (None, exit data) when the launch
    already ended (the supervisor reaped the server or could not execute it), (None, None) when
    no server appeared within `timeout` seconds. The supervisor is never reaped here."""
    deadline = time.monotonic() + timeout
    while True:
        child = _child_of(sup.pid)
        if child is not None and not child.is_zombie:
            return child, None
        rc = exit_status(sup)
        if rc is not None:
            fallback = {"returncode": rc, "launch_id": launch_id, "pid": None, "signal": None}
            return None, _record.read_launch_exit(exit_path, launch_id) or fallback
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(0.02)


def _signal_member(pid: int, sid: int) -> bool:
    """SIGKILL `pid` if it still is a member of session `sid`, through a pidfd where the kernel
    has them: the pid is pinned before it is checked, so a reused pid never gets the signal."""
    pidfd = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None  # gone already, or no pidfd support: plain kill below
    try:
        proc = _procs.read_proc(pid)
        if proc is None or proc.sid != sid or proc.is_zombie:
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def stop_session(sup: "subprocess.Popen[bytes]", timeout: float = STOP_SECONDS) -> List[int]:
    """SIGKILL everything of the launch - the supervisor's process group and every other member
    of its session - then reap the supervisor. Safe against id reuse because the supervisor (the
    leader, whose pid both ids are) is only reaped at the end. Returns the pids still alive."""
    sid = sup.pid
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(sid, signal.SIGKILL)
        except OSError:
            pass
        left = [p.pid for p in _procs.snapshot().values() if p.sid == sid and not p.is_zombie]
        for pid in left:
            _signal_member(pid, sid)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    try:
        sup.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    return [p.pid for p in _procs.snapshot().values() if p.sid == sid and not p.is_zombie]


def _stopped_text(sup_pid: int, left: List[int]) -> str:
    if left:
        return ("; stopping the launch's session (supervisor pid %d) left pids %s running: stop them with "
                "sglang_teardown" % (sup_pid, ", ".join(str(p) for p in left)))
    return "; the launch's session (supervisor pid %d) was stopped, nothing of it is left running" % sup_pid


def _prepare(spec: LaunchSpec) -> Tuple[str, str]:
    """State dir, TMPDIR (both private), no stale exit file. Returns (tmpdir, exit_path)."""
    _record.validate_name(spec.name)
    if not isinstance(spec.spawn_timeout, (int, float)) or not spec.spawn_timeout > 0:
        raise SglangError("spawn_timeout must be a positive number of seconds, got %r" % (spec.spawn_timeout,),
                          reason="bad_spawn_timeout")
    _record.ensure_dir(spec.state_dir, label="state_dir")
    tmpdir = _record.tmpdir_path(spec.state_dir, spec.name)
    _record.ensure_dir(tmpdir, label="TMPDIR")
    try:
        if os.stat(tmpdir).st_uid == os.geteuid():
            os.chmod(tmpdir, 0o700)  # an older launch's, maybe 0755: the server's files are private
    except OSError as exc:
        raise _record.io_error("make private", tmpdir, exc)
    exit_path = _record.exit_path(spec.state_dir, spec.name)
    try:
        os.unlink(exit_path)  # a stale exit file must never be read as this launch's
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _record.io_error("remove the stale exit file", exit_path, exc)
    return tmpdir, exit_path


def _start(spec: LaunchSpec, env: Dict[str, str], tmpdir: str, exit_path: str, launch_id: str,
           log_fd: int, cgroup: Optional[str] = None) -> "subprocess.Popen[bytes]":
    stdin_fd = _supervisor.payload_pipe(_supervisor.payload(exit_path, launch_id, spec.argv, cgroup))
    try:
        return subprocess.Popen(_supervisor.command(spec.python, spec.name), stdin=stdin_fd, stdout=log_fd,
                                stderr=log_fd, close_fds=True, start_new_session=True, env=env, cwd=tmpdir)
    except OSError as exc:
        raise SglangError("cannot start %s: %s" % (spec.python, exc.strerror or exc), reason="spawn_failed")
    finally:
        os.close(stdin_fd)


def _start_unit(spec: LaunchSpec, env: Dict[str, str], tmpdir: str, exit_path: str, launch_id: str,
                log_path: str, contained: Dict[str, Any]) -> UnitSupervisor:
    """systemd-run the supervisor with its payload (env included) on stdin from a 0600 file."""
    payload_file = _record.payload_path(spec.state_dir, spec.name)
    _record.write_bytes_atomic(payload_file, _supervisor.payload(exit_path, launch_id, spec.argv, None, env))
    try:
        pid = _systemd.start(contained["unit"], _supervisor.command(spec.python, spec.name), payload_file, log_path,
                             tmpdir, claim=contained.get("claim"))
        _containment.unit_started(contained)
    except BaseException:
        _remove_payload(spec)
        raise
    return UnitSupervisor(pid, contained["unit"])


def _remove_payload(spec: LaunchSpec) -> None:
    """The payload holds secrets: gone as soon as the supervisor has read it (or failed)."""
    try:
        os.unlink(_record.payload_path(spec.state_dir, spec.name))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _record.io_error("remove the supervisor payload", _record.payload_path(spec.state_dir, spec.name), exc)


def _stop_launch(sup: Any, contained: Dict[str, Any]) -> List[int]:
    """After a failed launch: the cgroup first (it reaches members that left the session), then
    the session of a supervisor we started ourselves. A unit's session is not ours to killpg:
    once its main process is reaped by PID 1 the id may be anyone's."""
    _containment.discard(contained)
    if isinstance(sup, UnitSupervisor):
        path = contained.get("cgroup")
        return _cgroup.members(path) if isinstance(path, str) else []
    return stop_session(sup)


def spawn(spec: LaunchSpec) -> Dict[str, Any]:
    """Start the server; return the launch record (already written, complete). Raises
    SglangError (with `log_tail` when the server is gone within the first moments); any failure
    after the spawn stops the launch's session first, and the message says so."""
    tmpdir, exit_path = _prepare(spec)
    contained = _containment.prepare(spec.name, spec.containment, spec.containment_why, spec.state_dir)
    try:
        return _spawn(spec, tmpdir, exit_path, contained)
    except BaseException:
        _containment.discard(contained)  # a failed launch leaves no cgroup behind (nor any member)
        raise
    finally:
        _containment.release(contained)  # the claim: from here on the cgroup's members hold it


def _spawn(spec: LaunchSpec, tmpdir: str, exit_path: str, contained: Dict[str, Any]) -> Dict[str, Any]:
    launch_id = uuid.uuid4().hex
    markers = {_procs.MARKER_INSTANCE: spec.name, _procs.MARKER_LAUNCH_ID: launch_id,
               _procs.MARKER_STATE_DIR: spec.state_dir}
    env = build_env(spec.python, spec.venv, spec.env, markers, tmpdir, caches=spec.cache_env)
    now = time.time()
    log_path, log_fd = open_launch_log(spec.log_dir, spec.name, now)
    try:
        link = update_log_link(spec.log_dir, spec.name, log_path)
        prune_logs(spec.log_dir, spec.name, spec.keep_logs, log_path)
        if contained.get("containment") == "systemd":
            sup: Any = _start_unit(spec, env, tmpdir, exit_path, launch_id, log_path, contained)
        else:
            sup = _start(spec, env, tmpdir, exit_path, launch_id, log_fd, contained.get("cgroup"))
    finally:
        os.close(log_fd)
    sup_proc = _procs.read_proc(sup.pid)
    user_env = _redact.redact_env({k: str(v) for k, v in spec.env.items()})
    user_env.update(markers)
    record = dict(spec.record_fields)
    record.update({
        "name": spec.name, "launch_id": launch_id, "state_dir": spec.state_dir,
        "pid": None, "start_time": None,  # filled in as soon as the server process exists
        "supervisor_pid": sup.pid, "supervisor_start_time": sup_proc.start_time if sup_proc else None,
        "pgid": sup.pid, "sid": sup.pid,  # a new session: the supervisor leads group and session
        "argv": _redact.redact_argv(spec.argv, spec.extra_secret_flags), "env": user_env,
        "log_path": log_path, "log_offset": 0, "log_link": link,
        "tmpdir": tmpdir, "exit_path": exit_path,
        "launched_at": now, "record_version": _record.RECORD_VERSION, **_procs.boot_frame(),
        "launched_at_utc": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })
    record.update(contained)
    try:
        if spec.launch_secrets is not None:  # before the record: a record never lacks its secrets
            _last_good.write_launch_secrets(spec.state_dir, spec.name, launch_id, spec.launch_secrets)
        _record.write_record(spec.state_dir, spec.name, record)
        try:
            server = _await_server(spec, sup, exit_path, launch_id, log_path)
        finally:
            if isinstance(sup, UnitSupervisor):
                _remove_payload(spec)
        _check_contained(contained, sup.pid, server.pid)
        record.update(pid=server.pid, start_time=server.start_time, **_procs.boot_frame())
        _record.write_record(spec.state_dir, spec.name, record)
    except BaseException as exc:
        left = _stop_launch(sup, contained)
        if isinstance(exc, SglangError):
            details = dict(exc.details)
            details.setdefault("launch_id", launch_id)
            details.setdefault("supervisor_pid", sup.pid)
            details["left_running"] = left
            raise SglangError(exc.msg + _stopped_text(sup.pid, left), **details) from None
        raise
    return record


def _await_server(spec: LaunchSpec, sup: "subprocess.Popen[bytes]", exit_path: str, launch_id: str,
                  log_path: str) -> _procs.Proc:
    """The server process, once it exists and has survived the first moments."""
    server, exit_data = wait_for_server(sup, exit_path, launch_id, spec.spawn_timeout)
    if server is not None:
        # A server that cannot even parse its arguments dies within moments: catch that here.
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline and exit_status(sup) is None:
            time.sleep(0.02)
        rc = exit_status(sup)
        if rc is None:
            return server
        exit_data = _record.read_launch_exit(exit_path, launch_id) or {"returncode": rc}
    tail = log_tail(log_path, spec.secrets)
    if exit_data is None:
        raise SglangError("no server process of instance %r appeared within %g s (spawn_timeout); a slow "
                          "interpreter start needs a longer spawn_timeout; see %s"
                          % (spec.name, spec.spawn_timeout, log_path),
                          reason="spawn_timeout", log_path=log_path, log_tail=tail)
    reason = "containment_failed" if exit_data.get("reason") == "containment_failed" else "died"
    raise SglangError("the server of instance %r exited right after the launch (%s); see %s"
                      % (spec.name, _exit_text(exit_data, exit_status(sup)), log_path), reason=reason,
                      log_path=log_path, log_tail=tail, exit=exit_data)


def _check_contained(contained: Dict[str, Any], sup_pid: int, server_pid: int) -> None:
    """Supervisor and server must both be in the instance cgroup, or the launch is not contained."""
    path = contained.get("cgroup")
    if contained.get("containment") not in _containment.CONTAINED or not isinstance(path, str):
        return
    inside = set(_cgroup.members(path))
    outside = [pid for pid in (sup_pid, server_pid) if pid not in inside]
    if outside:
        raise SglangError("pid(s) %s of the launch are not in its cgroup %s" % (", ".join(map(str, outside)), path),
                          reason="containment_failed", cgroup=path)
