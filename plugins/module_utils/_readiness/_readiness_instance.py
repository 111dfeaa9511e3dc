"""The launch sglang_ready judges: its launch record read into an `Instance`, and how it ended
(its exit file), in words for the verdict."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host._portowner import LaunchIdentity, iso

EXIT_FILE_WAIT_S = 1.0  # the supervising parent writes the exit file just after the exit


@dataclass
class Instance:
    """The launch being judged, from its launch record (docs/conventions.md)."""
    name: str
    pid: int
    start_time: Optional[float]
    pgid: Optional[int]
    sid: Optional[int]
    launch_id: Optional[str]
    log_path: str
    log_offset: int
    host: str
    port: Optional[int]
    argv: List[str]
    exit_path: Optional[str]
    launched_at: Optional[float]
    node_rank: int
    expect: Dict[str, Any]
    supervisor_pid: Optional[int] = None
    supervisor_start_time: Optional[float] = None

    def identity(self) -> LaunchIdentity:
        """What the one ownership rule (_portowner) needs of this launch."""
        return LaunchIdentity(pid=self.pid, start_time=self.start_time, supervisor_pid=self.supervisor_pid,
                              supervisor_start_time=self.supervisor_start_time, pgid=self.pgid, sid=self.sid,
                              launch_id=self.launch_id)


def _opt_int(record: Dict[str, Any], key: str) -> Optional[int]:
    value = record.get(key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SglangError("launch record field %s=%r is not an integer" % (key, value),
                          reason="record_invalid")


def _opt_float(record: Dict[str, Any], key: str) -> Optional[float]:
    value = record.get(key)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        raise SglangError("launch record field %s=%r is not a number" % (key, value),
                          reason="record_invalid")


def _required(record: Dict[str, Any]) -> None:
    pid = _opt_int(record, "pid")
    if not pid or pid <= 0:
        raise SglangError("the launch record has no pid: nothing was launched, or the record is "
                          "not a launch record", reason="record_invalid")
    log_path = record.get("log_path")
    if not isinstance(log_path, str) or not log_path:
        raise SglangError("the launch record has no log_path", reason="record_invalid")


def instance_from_record(record: Dict[str, Any]) -> Instance:
    """Validate the fields readiness needs; a precise error names the first bad one."""
    _required(record)
    name = str(record.get("name") or "")
    exit_path = record.get("exit_path")
    if not exit_path and name and record.get("state_dir"):
        exit_path = _record.exit_path(str(record["state_dir"]), name)
    argv = record.get("argv") or []
    expect = record.get("expect") or {}
    return Instance(
        name=name, pid=int(record["pid"]), start_time=_procs.record_start(record),
        pgid=_opt_int(record, "pgid"), sid=_opt_int(record, "sid"),
        launch_id=record.get("launch_id") or None, log_path=str(record["log_path"]),
        log_offset=_opt_int(record, "log_offset") or 0,
        host=str(record.get("host") or "127.0.0.1"), port=_opt_int(record, "port"),
        argv=[str(a) for a in argv] if isinstance(argv, list) else [],
        exit_path=str(exit_path) if exit_path else None,
        launched_at=_opt_float(record, "launched_at") or _opt_float(record, "start_time"),
        node_rank=_opt_int(record, "node_rank") or 0,
        expect=dict(expect) if isinstance(expect, dict) else {},
        supervisor_pid=_opt_int(record, "supervisor_pid"),
        supervisor_start_time=_procs.record_start(record, "supervisor_start_time"),
    )


# --- how it ended ----------------------------------------------------------------------------

def read_exit_status(inst: Instance, wait: float = EXIT_FILE_WAIT_S,
                     sleep: Callable[[float], None] = time.sleep) -> Any:
    """The exit file of THIS launch (launch_id must match), else "unknown". Waits (briefly)
    only while the supervising parent that writes it is still alive."""
    if not inst.exit_path:
        return "unknown"
    if not inst.supervisor_pid or not _procs.is_alive(inst.supervisor_pid, inst.supervisor_start_time):
        wait = 0.0
    deadline = time.monotonic() + wait
    while True:
        data = _record.read_launch_exit(inst.exit_path, inst.launch_id)
        if data:
            keep = ("returncode", "signal", "exited_at", "pid")
            return {k: data.get(k) for k in keep if k in data}
        if time.monotonic() >= deadline:
            return "unknown"
        sleep(0.1)


def exit_text(status: Any) -> str:
    """`exit code 1 at <time>` / `killed by signal 9 ...` / `exit status unknown`."""
    if not isinstance(status, dict):
        return "exit status unknown"
    how = ("killed by signal %s" % status["signal"] if status.get("signal")
           else "exit code %s" % status.get("returncode"))
    when = status.get("exited_at")
    if isinstance(when, (int, float)):
        how += " at %s" % iso(when)
    return how


def ago(seconds: float) -> str:
    if seconds < 120:
        return "%.1f s" % seconds
    if seconds < 7200:
        return "%.0f min" % (seconds / 60)
    return "%.1f h" % (seconds / 3600)
