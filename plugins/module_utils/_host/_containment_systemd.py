"""PRIVATE to llmops.sglang. The systemd backend of containment: one transient service per
instance, `llmops-sglang-<name>.service`, started with systemd-run where PID 1 is systemd
(writing into cgroupfs outside a delegated subtree would fight systemd there).

The unit runs the supervisor (KillMode=control-group, collected when it stops). Nothing secret is
in the unit's properties, which every local user can read over D-Bus: the supervisor's payload
(its source, the server argv with the API key, the server's whole environment) reaches it as
stdin from a 0600 file in the private state dir (StandardInput=file:), deleted by the launcher once
the server process exists; the log file is the unit's stdout/stderr (append:), the instance TMPDIR
its working directory.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Dict, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

RUNTIME_DIR = "/run/systemd/system"   # exists iff PID 1 is systemd (sd_booted(3))
PREFIX = "llmops-sglang-"
TIMEOUT = 30.0
# States in which the unit still has (or may still get) processes.
BUSY = ("active", "activating", "deactivating", "reloading", "refreshing")


def unit_name(name: str) -> str:
    return "%s%s.service" % (PREFIX, name)


def pid1_is_systemd() -> bool:
    return os.path.isdir(RUNTIME_DIR)


def available() -> Tuple[bool, str]:
    """(True, why) when a transient system unit can be started here by this user."""
    if not pid1_is_systemd():
        return False, "PID 1 is not systemd (%s does not exist)" % RUNTIME_DIR
    if os.geteuid() != 0:
        return False, "PID 1 is systemd, but units of the system manager need root (uid %d)" % os.geteuid()
    missing = [tool for tool in ("systemd-run", "systemctl") if not shutil.which(tool)]
    if missing:
        return False, "PID 1 is systemd, but %s is not on PATH" % " and ".join(missing)
    if _cgroup.v2_mount() is None:
        return False, "PID 1 is systemd, but no cgroup v2 hierarchy is mounted (legacy cgroup v1 mode)"
    return True, "PID 1 is systemd: a transient unit per instance"


def _tool_env() -> Dict[str, str]:
    """systemctl and systemd-run get no environment of the module's (no secrets, no pager)."""
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
            "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}


def _run(argv: List[str], timeout: float = TIMEOUT) -> "subprocess.CompletedProcess[str]":
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_tool_env(),
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SglangError("%s failed: %s" % (argv[0], exc), reason="containment_failed")


def show(unit: str, props: List[str]) -> Dict[str, str]:
    """`systemctl show` of the properties (values as systemd prints them; an unknown unit reads
    as inactive with empty values)."""
    argv = ["systemctl", "show", "--no-pager"] + ["--property=%s" % p for p in props] + ["--", unit]
    out = _run(argv)
    if out.returncode != 0:
        raise SglangError("systemctl show %s failed: %s" % (unit, (out.stderr or out.stdout).strip()),
                          reason="containment_failed", unit=unit)
    values: Dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value
    return values


def active_state(unit: str) -> str:
    return show(unit, ["ActiveState"]).get("ActiveState", "inactive")


def cgroup_path(unit: str) -> Optional[str]:
    """The unit's cgroup as a path under this host's cgroup2 mount (None without one)."""
    group = show(unit, ["ControlGroup"]).get("ControlGroup", "")
    mount = _cgroup.v2_mount()
    if not group or not group.startswith("/") or mount is None or ".." in group.split("/"):
        return None
    return os.path.join(mount, group.lstrip("/"))


def main_pid(unit: str) -> int:
    try:
        return int(show(unit, ["MainPID"]).get("MainPID", "0") or 0)
    except ValueError:
        return 0


def _escape(text: str) -> str:
    """systemd expands %-specifiers in ExecStart= and file paths, and $VARIABLES in ExecStart=."""
    return text.replace("%", "%%")


def _escape_arg(text: str) -> str:
    return _escape(text).replace("$", "$$")


def description(unit: str, claim: Optional[str] = None) -> str:
    """The unit's description: the instance, and the claim of the launch that started it."""
    text = "llmops.sglang instance %s" % unit[len(PREFIX):-len(".service")]
    return "%s (%s)" % (text, claim) if claim else text


def claimant(unit: str) -> str:
    """The claim in the description of a unit (another launch's), or ""."""
    text = show(unit, ["Description"]).get("Description", "")
    start = text.find(" (claim ")
    return text[start + 2:-1] if start >= 0 and text.endswith(")") else ""


def is_ours(unit: str, claim: Optional[str]) -> bool:
    """True when the unit carries this launch's claim (its description says so)."""
    return bool(claim) and description(unit, claim) == show(unit, ["Description"]).get("Description", "")


def start(unit: str, argv: List[str], stdin_path: str, log_path: str, workdir: str,
          claim: Optional[str] = None) -> int:
    """Start the unit (Type=exec: returns once the supervisor's interpreter was executed);
    returns its MainPID. SglangError(spawn_failed) with systemd's words when it fails, or
    cgroup_busy naming the claimant when another launch's unit of this name runs (systemd-run
    refuses a name that exists: the claim is atomic)."""
    cmd = ["systemd-run", "--quiet", "--collect", "--service-type=exec", "--unit=%s" % unit,
           "--description=%s" % _escape(description(unit, claim)),
           "--property=KillMode=control-group", "--property=SendSIGKILL=yes",
           "--property=StandardInput=file:%s" % _escape(stdin_path),
           "--property=StandardOutput=append:%s" % _escape(log_path),
           "--property=StandardError=append:%s" % _escape(log_path),
           "--property=WorkingDirectory=%s" % _escape(workdir),
           "--"] + [_escape_arg(arg) for arg in argv]
    out = _run(cmd)
    if out.returncode != 0:
        state = active_state(unit)
        if state in BUSY and not is_ours(unit, claim):
            raise SglangError("unit %s is %s, started by another launch of this instance (%s); stop it with "
                              "sglang_teardown first" % (unit, state, claimant(unit) or "claimant unknown"),
                              reason="cgroup_busy", unit=unit)
        raise SglangError("systemd-run could not start %s: %s" % (unit, (out.stderr or out.stdout).strip()),
                          reason="spawn_failed", unit=unit)
    pid = main_pid(unit)
    if pid <= 0:
        raise SglangError("unit %s started but has no main process (state %s)" % (unit, active_state(unit)),
                          reason="spawn_failed", unit=unit)
    return pid


def kill(unit: str, sig: str = "SIGKILL") -> bool:
    """`systemctl kill --kill-whom=all`: every process of the unit's cgroup."""
    return _run(["systemctl", "kill", "--kill-whom=all", "--signal=%s" % sig, "--", unit]).returncode == 0


def reset_failed(unit: str) -> None:
    """Forget a failed run of the unit (frees its name; does nothing to a running unit)."""
    _run(["systemctl", "reset-failed", "--", unit])


def release(unit: str) -> None:
    """Stop the unit (its processes are gone by now) and forget a failed state, so that the name
    is free and systemd removes the cgroup."""
    _run(["systemctl", "stop", "--", unit])
    _run(["systemctl", "reset-failed", "--", unit])
