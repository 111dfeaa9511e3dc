"""Per-instance locks. PRIVATE to this collection.

Two locks, one concern (an instance is changed by one actor at a time):

- `instance_lock`: flock on <state_dir>/<name>.lock while ONE module acts (launch, teardown).
- the operation lock <state_dir>/<name>.restart.lock: held by one playbook run across several
  module calls (plan, teardown, launch, ready, verify), taken and released by the
  `sglang_lock` module. It is a file that records its holder: the controller (host, user, the
  ansible-playbook pid and its start time, boot and PID namespace), the play, the inventory
  host and since when. The next run takes over a lock whose holder is provably gone (same
  controller, pid dead or reused); a lock from another controller is reported with its holder
  and age and counts as stale only after `ttl` seconds (the last resort).

  Its lifetime: the holder records how long its run may take (`lifetime`, computed from every
  step - plan, prewarm, teardown, launch, readiness, verification and the rollback's own -, see
  plugins/filter/lock_lifetime.py) and refreshes the lock while it waits (`refresh`, `refreshed`);
  its age counts from the last refresh, and it is stale only after the longer of the taker's
  `ttl` and the holder's own lifetime.

The controller half (`controller_identity`, `judge_holder`) runs in the action plugin on the
controller; the host half (`acquire`, `release`) in the module on the managed host.
"""
from __future__ import annotations

import errno
import fcntl
import getpass
import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host._record import ensure_dir, validate_name

LOCK_VERSION = 1
# Fields of the controller identity that must match for two holders to be the same run.
_SAME_RUN = ("host", "machine_id", "boot_id", "pid_ns", "pid", "pid_start")


@contextmanager
def instance_lock(state_dir: str, name: str, timeout: float = 30.0) -> Iterator[str]:
    """flock on <state_dir>/<name>.lock; fails with who holds it after `timeout` seconds."""
    ensure_dir(state_dir)
    path = os.path.join(state_dir, "%s.lock" % validate_name(name))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
                    raise SglangError(
                        "another operation on instance %r holds %s (pid %s) for more than %.0f s; "
                        "refusing to interleave" % (name, path, holder or "unknown", timeout),
                        reason="locked")
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        os.close(fd)


# --- the controller: who runs the play, and is a recorded holder still alive? -----------------

def _read_text(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def process_start(pid: int) -> Optional[int]:
    """Start time of `pid` in clock ticks since boot (/proc/PID/stat field 22); None when there
    is no such process (or no /proc). Exact, so a reused pid never compares equal."""
    # Read by hand on purpose: the action plugin runs this on the CONTROLLER, where psutil is
    # not a requirement, and both halves must agree on the unit stored in lock files.
    raw = _read_text("/proc/%d/stat" % pid)
    if raw is None:
        return None
    try:
        return int(raw.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def _pid_namespace() -> Optional[str]:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _program(pid: int) -> str:
    """ansible-playbook, ansible, ... : the script the controller's python runs."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        argv = []
    for arg in argv[:3]:
        base = os.path.basename(arg)
        if base.startswith("ansible"):
            return base
    return "ansible-playbook"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a container's uid)
        return "uid %d" % os.getuid()


def pid_exists(pid: int) -> bool:
    """Existence alone, for controllers without /proc (no start time to compare)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def controller_identity(pid: int) -> Dict[str, Any]:
    """The process that runs the play (`pid`: ansible-playbook) and the machine it runs on."""
    return {
        "host": socket.getfqdn(),
        "user": _user(),
        "program": _program(pid),
        "pid": pid,
        "pid_start": process_start(pid),
        "boot_id": _read_text("/proc/sys/kernel/random/boot_id"),
        "machine_id": _read_text("/etc/machine-id") or _read_text("/var/lib/dbus/machine-id"),
        "pid_ns": _pid_namespace(),
    }


def _differs(a: Dict[str, Any], b: Dict[str, Any], key: str) -> bool:
    """Both sides know `key` and disagree (an unknown value proves nothing)."""
    return a.get(key) is not None and b.get(key) is not None and a.get(key) != b.get(key)


def judge_holder(holder: Dict[str, Any], me: Dict[str, Any],
                 start_of: Callable[[int], Optional[int]] = process_start,
                 exists: Callable[[int], bool] = pid_exists) -> Tuple[str, str]:
    """Verdict on a lock's holder, seen from the controller `me`: (verdict, why) with verdict
    "gone" (provably: take it over), "alive", "self" (this very run) or "foreign" (another
    controller, or nothing recorded: only the age rule can free it)."""
    ctl = holder.get("controller") if isinstance(holder.get("controller"), dict) else {}
    if not ctl.get("host") or not isinstance(ctl.get("pid"), int):
        return "foreign", "the lock records no controller process"
    if ctl.get("host") != me.get("host") or _differs(ctl, me, "machine_id"):
        return "foreign", "held from another controller (%s)" % ctl.get("host")
    if _differs(ctl, me, "boot_id"):
        return "gone", "the controller %s was rebooted since the lock was taken" % ctl["host"]
    if _differs(ctl, me, "pid_ns"):
        return "foreign", "held from another PID namespace (container) of this controller"
    pid, prog = ctl["pid"], ctl.get("program") or "ansible-playbook"
    if me.get("pid_start") is None:  # no /proc here: a live pid may be a reused one, so it counts as alive
        if not exists(pid):
            return "gone", "its %s (pid %d) is no longer running" % (prog, pid)
        return "alive", "pid %d runs on this controller (its start time cannot be read here)" % pid
    start = start_of(pid)
    if start is None:
        return "gone", "its %s (pid %d) is no longer running" % (prog, pid)
    if ctl.get("pid_start") is not None and start != ctl["pid_start"]:
        return "gone", "pid %d is now another process (the recorded %s ended)" % (pid, prog)
    if pid == me.get("pid"):
        return "self", "held by this run"
    return "alive", "its %s (pid %d) is still running on this controller" % (prog, pid)


def takeover_reason(verdict: str, why: str, age: float, ttl: Optional[float],
                    lifetime: Optional[float] = None) -> Optional[str]:
    """Why a lock may be taken over (None: it may not). A holder proven gone frees it at
    once; one that cannot be checked (another controller, nothing recorded) only after `ttl`
    seconds without a sign of life (`age` counts from its last refresh) - and never before the
    `lifetime` the holder recorded for its own run; a live holder never."""
    if verdict == "gone":
        return why
    if verdict != "foreign" or ttl is None or ttl <= 0:
        return None
    limit = max(float(ttl), float(lifetime or 0))
    if age >= limit:
        what = "ttl" if limit == float(ttl) else "the lifetime its holder recorded"
        return "%s, and the lock is older than %s (%d s >= %d s)" % (why, what, age, limit)
    return None


def stale_after(holder: Dict[str, Any], ttl: Optional[float]) -> float:
    """Seconds without a refresh after which `holder`'s lock counts as stale for a taker with `ttl`."""
    try:
        lifetime = float(holder.get("lifetime") or 0)
    except (TypeError, ValueError):
        lifetime = 0.0
    return max(float(ttl or 0), lifetime)


def describe_holder(holder: Dict[str, Any], age: Optional[float] = None) -> str:
    """One line naming who holds a lock; never a bare '?'."""
    if holder.get("legacy"):
        owner = holder.get("owner") or "no owner recorded"
        text = "a lock directory left by an older llmops.sglang (%s)" % owner
    elif not holder.get("controller"):
        text = "an unreadable lock file (%s)" % (holder.get("error") or "no holder recorded")
    else:
        ctl = holder["controller"]
        text = "%s pid %s of %s@%s" % (ctl.get("program") or "ansible-playbook", ctl.get("pid", "(unknown pid)"),
                                       ctl.get("user") or "(unknown user)", ctl.get("host"))
        extras = []
        if holder.get("play"):
            extras.append("play %r" % holder["play"])
        if holder.get("inventory_host"):
            extras.append("host %s" % holder["inventory_host"])
        if extras:
            text += " (%s)" % ", ".join(extras)
    if holder.get("since_iso"):
        text += ", since %s" % holder["since_iso"]
    if age is not None:
        text += " (%d s ago)" % int(age)
    return text


# --- the managed host: the lock file ----------------------------------------------------------

def lock_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "%s.restart.lock" % validate_name(name))


@contextmanager
def _dir_guard(state_dir: str) -> Iterator[None]:
    """flock on the state directory: read-decide-write of a lock file is one step among the
    sglang_lock calls (the lock file itself is replaced, so it cannot carry the flock)."""
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_holder(path: str) -> Optional[Dict[str, Any]]:
    """The holder recorded in the lock at `path`; None when there is no lock. An older
    collection's lock directory or an unreadable file is described, never None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SglangError("cannot read the lock %s: %s" % (path, exc.strerror or exc), reason="lock_failed", path=path)
    if os.path.isdir(path) and not os.path.islink(path):
        owner = _read_text(os.path.join(path, "owner"))
        return {"legacy": True, "owner": " ".join(owner.split()) if owner else None, "mtime": st.st_mtime}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            data = json.load(fh)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return {"error": "%s: %s" % (path, exc), "mtime": st.st_mtime}
    data.setdefault("mtime", st.st_mtime)
    return data


def lock_age(holder: Dict[str, Any], now: Optional[float] = None) -> float:
    """Seconds since the lock's last sign of life - taken, or refreshed by its holder while it
    waits (host clock: written and read on the same host)."""
    since = holder.get("since")
    if not isinstance(since, (int, float)):
        since = holder.get("mtime") or 0.0
    refreshed = holder.get("refreshed")
    if isinstance(refreshed, (int, float)) and refreshed > since:
        since = refreshed
    return max(0.0, (now if now is not None else time.time()) - float(since))


def lock_id(holder: Dict[str, Any]) -> str:
    """What a takeover names: the token, or for a lock without one (an older collection's,
    an unreadable file) its modification time."""
    return str(holder.get("token") or "mtime:%.6f" % float(holder.get("mtime") or 0.0))


def same_run(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    """Both holders are this playbook run acting on the same inventory host."""
    ca, cb = a.get("controller") or {}, b.get("controller") or {}
    return bool(ca and cb) and all(ca.get(k) == cb.get(k) for k in _SAME_RUN) \
        and a.get("inventory_host") == b.get("inventory_host")


def new_holder(holder: Dict[str, Any], now: Optional[float] = None, lifetime: Optional[float] = None) -> Dict[str, Any]:
    """The record a lock file holds: the caller's identity plus a token, the time and how long
    the holder's run may take (`lifetime`, seconds; None when not known)."""
    now = time.time() if now is None else now
    data = {k: holder.get(k) for k in ("controller", "play", "inventory_host")}
    data.update(lock_version=LOCK_VERSION, token=uuid.uuid4().hex, since=round(now, 3),
                since_iso=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    if lifetime:
        data["lifetime"] = round(float(lifetime), 1)
    return data


def _refreshed(current: Dict[str, Any], now: Optional[float] = None) -> Dict[str, Any]:
    now = time.time() if now is None else now
    data = {k: v for k, v in current.items() if k != "mtime"}
    data.update(refreshed=round(now, 3), refreshed_iso=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    return data


def refresh(state_dir: str, name: str, token: str, check_mode: bool = False,
            min_interval: float = 0.0) -> Dict[str, Any]:
    """The holder's sign of life while it waits (readiness, drain): the lock whose token is
    `token` gets `refreshed` = now, so its age - what makes another controller's run take it
    over - counts from here. Another holder's lock, or none, is left alone; one whose last sign
    of life is younger than `min_interval` seconds too (a sliced wait calls this every slice).
    Returns changed, path and the holder now in place (None when the lock is not this token's)."""
    path = lock_path(state_dir, name)
    if not os.path.isdir(state_dir):
        return {"changed": False, "path": path, "holder": None}
    with _dir_guard(state_dir):
        current = read_holder(path)
        if current is None or current.get("legacy") or lock_id(current) != token:
            return {"changed": False, "path": path, "holder": None}
        if min_interval > 0 and lock_age(current) < min_interval:
            return {"changed": False, "path": path, "holder": current}
        data = _refreshed(current)
        if not check_mode:
            _write_lock(path, data, replace=True)
        return {"changed": True, "path": path, "holder": data}


def _write_lock(path: str, data: Dict[str, Any], replace: bool) -> None:
    """Write the complete record to a temporary file, then link it into place (new lock:
    fails if one appeared) or rename it over the old one. The temporary file is removed in
    every case: a failed attempt (a full disk) leaves nothing behind."""
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, ".%s.%s.tmp" % (os.path.basename(path), uuid.uuid4().hex[:8]))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            _remove_legacy(path)
            os.rename(tmp, path)
        else:
            os.link(tmp, path)
    except OSError as exc:
        if exc.errno == errno.EEXIST and not replace:
            raise SglangError("the lock %s appeared while it was being taken" % path, reason="locked", path=path)
        raise SglangError("cannot write the lock %s: %s; nothing was changed"
                          % (path, exc.strerror or exc), reason="lock_failed", path=path)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _remove_legacy(path: str) -> None:
    """An older collection's lock is a directory with one `owner` file."""
    if os.path.isdir(path) and not os.path.islink(path):
        try:
            os.unlink(os.path.join(path, "owner"))
        except FileNotFoundError:
            pass
        os.rmdir(path)


def acquire(state_dir: str, name: str, holder: Dict[str, Any], takeover: Optional[str] = None,
            takeover_reason: Optional[str] = None, check_mode: bool = False,
            lifetime: Optional[float] = None) -> Dict[str, Any]:
    """Take the lock for `holder`. Returns changed, path, holder (the record now in place),
    previous and taken_over (why an old holder was replaced). An existing lock is replaced only
    when it is this run's already, or when its token is `takeover` (the controller judged its
    holder gone: compare-and-swap under the directory flock). Raises SglangError reason
    "locked" (with holder and age) when someone else holds it, "lock_failed" when it cannot
    be written."""
    path = lock_path(state_dir, name)
    if check_mode and not os.path.isdir(state_dir):
        return {"changed": True, "path": path, "holder": new_holder(holder, lifetime=lifetime), "previous": None,
                "taken_over": None}
    if not check_mode:
        ensure_dir(state_dir)
    with _dir_guard(state_dir):
        current = read_holder(path)
        why = None
        if current is not None:
            age = lock_age(current)
            if same_run(current, holder):  # this run's own lock: a sign of life
                data = _refreshed(current)
                if lifetime:
                    data["lifetime"] = round(float(lifetime), 1)
                if not check_mode:
                    _write_lock(path, data, replace=True)
                return {"changed": False, "path": path, "holder": data, "previous": None, "taken_over": None}
            if not takeover or lock_id(current) != takeover:
                raise SglangError("instance %r is locked by %s; nothing was changed"
                                  % (name, describe_holder(current, age)),
                                  reason="locked", path=path, holder=current, age=round(age, 1))
            why = takeover_reason or "its holder is gone"
        data = new_holder(holder, lifetime=lifetime)
        if not check_mode:
            _write_lock(path, data, replace=current is not None)
        return {"changed": True, "path": path, "holder": data, "previous": current, "taken_over": why}


def failure_details(details: Dict[str, Any]) -> Dict[str, Any]:
    """A lock failure's details as a module result: `lock_path`, not `path` (Ansible would add
    that file's attributes to the result), and the holder's line when a holder is named."""
    out = dict(details)
    if "path" in out:
        out["lock_path"] = out.pop("path")
    if isinstance(out.get("holder"), dict):
        out["holder_text"] = describe_holder(out["holder"], out.get("age"))
    return out


def take(state_dir: str, name: str, holder: Dict[str, Any], takeover: Optional[str] = None,
         takeover_reason: Optional[str] = None, check_mode: bool = False, diff: bool = False,
         lifetime: Optional[float] = None) -> Dict[str, Any]:
    """`acquire` as a result: reason held | taken | taken_over, lock_path, holder and its line
    (sglang_lock's result, and the `operation_lock` of sglang_launch's)."""
    out = acquire(state_dir, name, holder, takeover=takeover, takeover_reason=takeover_reason,
                  check_mode=check_mode, lifetime=lifetime)
    reason = "held" if not out["changed"] else ("taken_over" if out["previous"] else "taken")
    result = dict(changed=out["changed"], reason=reason, lock_path=out["path"], holder=out["holder"],
                  holder_text=describe_holder(out["holder"]))
    if out["previous"] is not None:
        result.update(previous=out["previous"], taken_over=out["taken_over"])
    if diff:
        before = describe_holder(out["previous"]) if out["previous"] else "(not held)"
        result["diff"] = {"before": before + "\n", "after": result["holder_text"] + "\n"}
    return result


def release(state_dir: str, name: str, holder: Dict[str, Any], token: Optional[str] = None,
            force: bool = False, check_mode: bool = False) -> Dict[str, Any]:
    """Remove the lock when this run holds it (same run and inventory host, or `token`), or
    any lock with `force`. Another holder's lock stays; `kept` says whose it is."""
    path = lock_path(state_dir, name)
    if not os.path.isdir(state_dir):
        return {"changed": False, "path": path, "previous": None, "kept": None}
    with _dir_guard(state_dir):
        current = read_holder(path)
        if current is None:
            return {"changed": False, "path": path, "previous": None, "kept": None}
        ours = force or same_run(current, holder) or (token is not None and lock_id(current) == token)
        if not ours:
            return {"changed": False, "path": path, "previous": None,
                    "kept": describe_holder(current, lock_age(current))}
        if not check_mode:
            try:
                if current.get("legacy"):
                    _remove_legacy(path)
                else:
                    os.unlink(path)
            except OSError as exc:
                raise SglangError("cannot remove the lock %s: %s" % (path, exc.strerror or exc),
                                  reason="lock_failed", path=path)
        return {"changed": True, "path": path, "previous": current, "kept": None}
