"""Is THIS launch ready? Identity, not health (DESIGN.md, "Rules that keep operators safe").

Ready only when every proof holds:
1. the ready line in this launch's log, after the launch offset (old lines never count);
2. `Uvicorn running on http://H:P` for the expected port and no bind error;
3. every listening socket on the port (IPv4 and IPv6) belongs to this instance;
4. /server_info reports the expected configuration;
5. the requested health endpoint answers 200.
Each poll is cheap (new log bytes, one /proc/<pid>/stat read, /proc/net/tcp only when needed),
so a dead launch is reported within about one poll interval, with the lines that explain it.
"""
from __future__ import annotations

import collections
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Pattern, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils import _http, _logpatterns as lp
from ansible_collections.llmops.sglang.plugins.module_utils import _ports, _procs, _record, _redact
from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._logfollow import LogFollower

HEALTH_CHOICES = ("none", "health", "health_generate")
DECISIVE_MAX = 40
TAIL_LINES = 40
WINDOW_LINES = 4000  # lines kept in memory for decisive-line context (startup logs are small)
TRACEBACK_LOOKBACK = 400  # deep stacks: ~2 lines per frame
FATAL_SETTLE_S = 1.0  # after a fatal line, read this long for the rest of the traceback
EXIT_FILE_WAIT_S = 1.0  # the supervising parent writes the exit file just after the exit
LOG_MISSING_GRACE_S = 5.0
VERIFY_EVERY_S = 0.5  # HTTP/identity checks need not run at the log cadence
STALE_CHECK_EVERY_S = 1.0


# --- inputs --------------------------------------------------------------------------------

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


def instance_from_record(record: Dict[str, Any]) -> Instance:
    """Validate the fields readiness needs; a precise error names the first bad one."""
    pid = _opt_int(record, "pid")
    if not pid or pid <= 0:
        raise SglangError("the launch record has no pid: nothing was launched, or the record is "
                          "not a launch record", reason="record_invalid")
    log_path = record.get("log_path")
    if not isinstance(log_path, str) or not log_path:
        raise SglangError("the launch record has no log_path", reason="record_invalid")
    name = str(record.get("name") or "")
    exit_path = record.get("exit_path")
    if not exit_path and name and record.get("state_dir"):
        exit_path = _record.exit_path(str(record["state_dir"]), name)
    argv = record.get("argv") or []
    expect = record.get("expect") or {}
    return Instance(
        name=name, pid=pid, start_time=_opt_float(record, "start_time"),
        pgid=_opt_int(record, "pgid"), sid=_opt_int(record, "sid"),
        launch_id=record.get("launch_id") or None, log_path=log_path,
        log_offset=_opt_int(record, "log_offset") or 0,
        host=str(record.get("host") or "127.0.0.1"), port=_opt_int(record, "port"),
        argv=[str(a) for a in argv] if isinstance(argv, list) else [],
        exit_path=str(exit_path) if exit_path else None,
        launched_at=_opt_float(record, "launched_at") or _opt_float(record, "start_time"),
        node_rank=_opt_int(record, "node_rank") or 0,
        expect=dict(expect) if isinstance(expect, dict) else {},
        supervisor_pid=_opt_int(record, "supervisor_pid"),
        supervisor_start_time=_opt_float(record, "supervisor_start_time"),
    )


@dataclass
class Options:
    timeout: float = 1200.0
    poll_interval: float = 0.2
    ready_patterns: Sequence[str] = lp.READY_PATTERNS
    fatal_patterns: Sequence[str] = lp.FATAL_PATTERNS
    expect: Dict[str, Any] = field(default_factory=dict)
    health: str = "health"
    api_key: Optional[str] = None
    node_rank: int = 0
    require_ready_line: bool = True


# --- the log, analysed as it arrives ---------------------------------------------------------

def _line_epoch(line: str) -> Optional[Tuple[float, bool]]:
    """(epoch, has sub-second precision) from sglang's `[YYYY-mm-dd HH:MM:SS(.mmm)]` (local)."""
    m = lp.TIMESTAMP.match(line)
    if not m:
        return None
    try:
        base = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None
    return base + (float(m.group(2)) if m.group(2) else 0.0), bool(m.group(2))


class LogAnalyzer:
    """Reads each new line once: startup phases, the ready/uvicorn/bind lines, fatal lines."""

    def __init__(self, ready: Sequence[Pattern[str]], fatal: Sequence[Pattern[str]],
                 port: Optional[int], launched_at: float, ready_phase: str = lp.READY_PHASE) -> None:
        self.ready_res, self.fatal_res = list(ready), list(fatal)
        self.phase_res = [(name, re.compile(rx)) for name, rx in lp.PHASES]
        self.port, self.launched_at, self.ready_phase = port, launched_at, ready_phase
        self.window: Deque[Tuple[int, str]] = collections.deque(maxlen=WINDOW_LINES)
        self.count = 0
        self.timeline: List[Dict[str, Any]] = []
        self.seen_phases: set = set()
        self.ready_line: Optional[str] = None
        self.uvicorn_line: Optional[str] = None
        self.other_uvicorn: Optional[str] = None
        self.bind_error: Optional[str] = None
        self.fatal: List[Tuple[int, str]] = []  # (line index, line)

    def _seconds(self, line: str, now: float) -> float:
        """Seconds since launch: observed time, unless the log's own stamp is earlier (a
        backlog read at once); second-resolution stamps get +0.5 s."""
        observed = now - self.launched_at
        stamp = _line_epoch(line)
        if stamp is not None:
            written = stamp[0] - self.launched_at + (0.0 if stamp[1] else 0.5)
            observed = min(observed, written)
        return round(max(0.0, observed), 2)

    def _phase(self, name: str, line: str, now: float) -> None:
        # A phase seen after a later one is an echo (uvicorn's access line for the warmup
        # request can land after the ready line): the timeline stays in startup order.
        later = lp.PHASE_NAMES[lp.PHASE_NAMES.index(name) + 1:]
        if name not in self.seen_phases and not self.seen_phases.intersection(later):
            self.seen_phases.add(name)
            self.timeline.append({"phase": name, "seconds": self._seconds(line, now),
                                  "line": line[:500]})

    def feed(self, lines: Sequence[str], now: float) -> None:
        for line in lines:
            index = self.count
            self.count += 1
            self.window.append((index, line))
            self._classify(index, line, now)

    def _classify(self, index: int, line: str, now: float) -> None:
        for name, rx in self.phase_res:
            if name not in self.seen_phases and rx.search(line):
                self._phase(name, line, now)
        m = lp.UVICORN_RUNNING.search(line)
        if m:
            if self.port is None or int(m.group(2)) == self.port:
                self.uvicorn_line = self.uvicorn_line or line
            else:
                self.other_uvicorn = line
        if lp.BIND_ERROR_ANY.search(line) and self.bind_error is None:
            self.bind_error = line
        if self.ready_line is None and lp.first_match(line, self.ready_res):
            self.ready_line = line
            self._phase(self.ready_phase, line, now)
        if lp.first_match(line, self.fatal_res) or lp.BIND_ERROR_ANY.search(line):
            self.fatal.append((index, line))

    @property
    def phase(self) -> Optional[str]:
        """The furthest phase reached, in canonical order."""
        reached = [p for p in lp.PHASE_NAMES if p in self.seen_phases]
        return reached[-1] if reached else None

    def tail(self, n: int = TAIL_LINES) -> List[str]:
        return [entry[1] for entry in list(self.window)[-n:]]

    def _at(self, index: int) -> Optional[str]:
        first = self.window[0][0] if self.window else 0
        pos = index - first
        return self.window[pos][1] if 0 <= pos < len(self.window) else None

    def _block(self, index: int) -> Tuple[int, int]:
        """The lines that explain one fatal line: its whole traceback when it has one."""
        line = self._at(index) or ""
        start = end = index
        if lp.TRACEBACK_START.search(line):
            for j in range(index + 1, min(self.count, index + TRACEBACK_LOOKBACK)):
                if lp.EXCEPTION_LINE.search(self._at(j) or ""):
                    end = j
                    break
            return start, end
        for j in range(index - 1, max(-1, index - TRACEBACK_LOOKBACK), -1):
            text = self._at(j)
            if text is None or (lp.EXCEPTION_LINE.search(text) and j != index):
                break
            if lp.TRACEBACK_START.search(text):
                start = j
                break
        return start, end

    def cause(self) -> Optional[str]:
        """The first fatal line in one sentence: a `... Traceback (most recent call last):`
        line is completed with its exception line, so the message names the error itself."""
        if not self.fatal:
            return None
        index, line = self.fatal[0]
        text = lp.TIMESTAMP_PREFIX.sub("", line).strip()
        if lp.TRACEBACK_START.search(text):
            start, end = self._block(index)
            head = lp.TRACEBACK_START.split(text)[0].rstrip(" :")
            last = (self._at(end) or "").strip() if end != index else ""
            text = "%s: %s" % (head, last) if head and last else (last or text)
        return text

    def decisive_lines(self, limit: int = DECISIVE_MAX) -> List[str]:
        """From `Traceback` to the exception line for each fatal line, merged, capped."""
        ranges: List[Tuple[int, int]] = []
        for index in [f[0] for f in self.fatal[:8]]:
            start, end = self._block(index)
            if ranges and start <= ranges[-1][1] + 1:
                ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
            else:
                ranges.append((start, end))
        out: List[str] = []
        for n, (start, end) in enumerate(ranges):
            if n:
                out.append("...")
            out.extend(self._at(i) or "" for i in range(start, end + 1))
        if len(out) > limit:
            head = limit // 4
            out = out[:head] + ["... (%d lines omitted)" % (len(out) - limit + 1)] + out[-(limit - head - 1):]
        return out


# --- who owns the port ---------------------------------------------------------------------

def _iso(epoch: Optional[float]) -> Optional[str]:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def describe_process(pid: int) -> Dict[str, Any]:
    """Enough to name a process to an operator: pid, user, command line, start time, marker."""
    proc = _procs.read_proc(pid)
    if proc is None:
        return {"pid": pid, "user": None, "cmdline": None, "start_time": None, "started": None}
    marker = _procs.marker_of(pid) or {}
    return {
        "pid": pid, "user": proc.user, "cmdline": " ".join(_redact.redact_argv(proc.cmdline)) or proc.title,
        "start_time": proc.start_time, "started": _iso(proc.start_time),
        "instance": marker.get(_procs.MARKER_INSTANCE), "launch_id": marker.get(_procs.MARKER_LAUNCH_ID),
    }


def ownership(pid: int, inst: Instance) -> Optional[str]:
    """Why `pid` belongs to this launch, or None. The module's own group/session never counts:
    a launch that skipped setsid would otherwise claim every process of the calling shell."""
    proc = _procs.read_proc(pid)
    if proc is None:
        return None
    main_same = _procs.is_alive(inst.pid, inst.start_time)
    if pid == inst.pid and main_same:
        return "the launched process"
    if main_same and inst.pid in _procs.ancestors(pid):
        return "a descendant of the launched process %d" % inst.pid
    if inst.pgid and proc.pgid == inst.pgid and inst.pgid != os.getpgrp():
        return "in the launch's process group %d" % inst.pgid
    if inst.sid and proc.sid == inst.sid and inst.sid != os.getsid(0):
        return "in the launch's session %d" % inst.sid
    marker = _procs.marker_of(pid) or {}
    if inst.launch_id and marker.get(_procs.MARKER_LAUNCH_ID) == inst.launch_id:
        return "carries %s=%s" % (_procs.MARKER_LAUNCH_ID, inst.launch_id)
    return None


@dataclass
class PortOwners:
    listeners: List[Dict[str, Any]]
    foreign: List[Dict[str, Any]]  # processes (or unreadable sockets) that are not this launch

    @property
    def ours_listening(self) -> bool:
        return bool(self.listeners) and not self.foreign


def port_owners(port: int, inst: Instance) -> PortOwners:
    out, foreign = [], []
    seen_foreign: set = set()
    for listener in _ports.listeners([port]):
        entry = listener.to_dict()
        owners = []
        for pid in listener.pids:
            why = ownership(pid, inst)
            info = describe_process(pid)
            info.update({"ours": why is not None, "why": why})
            owners.append(info)
            if why is None and pid not in seen_foreign:
                seen_foreign.add(pid)
                foreign.append(dict(info, address=listener.address))
        if not listener.pids:
            foreign.append({"pid": None, "user": None, "address": listener.address,
                            "cmdline": "(owner not readable: another user's process)"})
        entry["owners"] = owners
        out.append(entry)
    return PortOwners(out, foreign)


def _conflicts(listen_addr: str, host: str) -> bool:
    """Would binding `host` collide with a socket on `listen_addr` (same port)?"""
    wild = ("0.0.0.0", "::", "")
    addr = listen_addr[7:] if listen_addr.startswith("::ffff:") else listen_addr
    return addr in wild or host in wild or addr == host


# --- server_info comparison ----------------------------------------------------------------

def normalise(value: Any) -> Any:
    """Compare what operators write with what servers report: 8 == "8", "true" == True,
    "/m/x/" == "/m/x", None == "null"."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        if low in ("none", "null"):
            return None
        try:
            return float(text)
        except ValueError:
            pass
        return os.path.normpath(text) if "/" in text else text
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    return value


_MISSING = "(not reported)"


def compare_expected(expect: Dict[str, Any], info: Dict[str, Any]) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """(matched field -> actual, mismatches [{field, expected, actual}])."""
    matched: Dict[str, Any] = {}
    mismatches: List[Dict[str, Any]] = []
    for key in sorted(expect):
        want = expect[key]
        if key not in info:
            mismatches.append({"field": key, "expected": want, "actual": _MISSING})
        elif normalise(want) == normalise(info[key]):
            matched[key] = info[key]
        else:
            mismatches.append({"field": key, "expected": want, "actual": info[key]})
    return matched, mismatches


def mismatch_table(mismatches: List[Dict[str, Any]]) -> str:
    return "; ".join("%s: expected %r, server reports %r" % (m["field"], m["expected"], m["actual"])
                     for m in mismatches)


# --- the outcome -----------------------------------------------------------------------------

@dataclass
class Outcome:
    ready: bool
    reason: str
    msg: str
    details: Dict[str, Any] = field(default_factory=dict)


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


def _exit_text(status: Any) -> str:
    if not isinstance(status, dict):
        return "exit status unknown"
    if status.get("signal"):
        return "killed by signal %s" % status["signal"]
    return "exit code %s" % status.get("returncode")


# --- the state machine -----------------------------------------------------------------------

class Readiness:
    """One wait for one launch. `run()` returns an Outcome and never raises for server trouble."""

    def __init__(self, inst: Instance, opts: Options,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inst, self.opts, self.clock, self.sleep = inst, opts, clock, sleep
        self.started = clock()
        self.started_epoch = time.time()
        self.launched_at = inst.launched_at or self.started_epoch
        self.rank = opts.node_rank
        ready_src = list(opts.ready_patterns)
        if self.rank >= 1:
            # ranks >= 1 never print the ready line: their signal is the dummy health server.
            ready_src = list(lp.DUMMY_HEALTH_PATTERNS) + [p for p in opts.ready_patterns
                                                          if p not in lp.READY_PATTERNS]
        self.log = LogAnalyzer(lp.compile_patterns(ready_src, "ready_patterns"),
                               lp.compile_patterns(opts.fatal_patterns, "fatal_patterns"),
                               inst.port, self.launched_at,
                               lp.NODE_READY_PHASE if self.rank >= 1 else lp.READY_PHASE)
        self.follower = LogFollower(inst.log_path, inst.log_offset)
        self.quiet_level, self.quiet_http = lp.quiet_log_levels(inst.argv)
        self.secrets = [opts.api_key] if opts.api_key else []
        # verification state
        self.owners: Optional[PortOwners] = None
        self.info: Optional[Dict[str, Any]] = None
        self.info_endpoint: Optional[str] = None
        self.matched: Dict[str, Any] = {}
        self.health_status: Optional[Dict[str, Any]] = None
        self.waiting_for = "the ready line"
        self._next_verify = 0.0
        self._next_stale = 0.0

    # -- helpers ------------------------------------------------------------------------
    def _now_epoch(self) -> float:
        return self.started_epoch + (self.clock() - self.started)

    def _poll_log(self, final: bool = False) -> None:
        self.log.feed(self.follower.poll(final=final), self._now_epoch())

    def _alive(self) -> bool:
        return _procs.is_alive(self.inst.pid, self.inst.start_time)

    def _phase_text(self) -> str:
        phase = self.log.phase
        return "%s (%s)" % (phase or "none", lp.PHASE_MEANING.get(phase, phase))

    def _outcome(self, ready: bool, reason: str, msg: str, **extra: Any) -> Outcome:
        now = self.clock()
        details: Dict[str, Any] = {
            "elapsed": round(now - self.started, 3),
            "since_launch": round(self._now_epoch() - self.launched_at, 3),
            "timeline": self.log.timeline,
            "phase": self.log.phase,
            "server_version": (self.info or {}).get("version"),
            "matched": _redact.redact_mapping(self.matched),
            "expected": _redact.redact_mapping(self.opts.expect),
            "server_info_endpoint": self.info_endpoint,
            "listeners": self.owners.listeners if self.owners else [],
            "health": self.health_status,
            "pid": self.inst.pid, "launch_id": self.inst.launch_id,
            "log_path": self.inst.log_path, "log_offset": self.inst.log_offset,
            "log_events": [e.to_dict() for e in self.follower.events],
            "log_bytes_read": self.follower.bytes_read,
            "node_rank": self.rank,
            "decisive_lines": [] if ready else self.log.decisive_lines(),
            "log_tail": [] if ready else self.log.tail(),
            "exit_status": None,
        }
        details.update(extra)
        self.follower.close()
        return Outcome(ready, reason, msg, redact_deep(details, self.secrets))

    # -- failures ------------------------------------------------------------------------
    def _fail_from_log(self, exit_status: Any) -> Outcome:
        """The launch died or printed a fatal line: name the cause, most specific first."""
        first = self.log.cause()
        if self.log.bind_error and self.inst.port:
            owners = port_owners(self.inst.port, self.inst)
            self.owners = owners
            if owners.foreign:
                return self._stale(owners, exit_status)
        if first is not None:
            how = ("the launched process %d exited (%s)" % (self.inst.pid, _exit_text(exit_status))
                   if exit_status is not None else "the launch is failing")
            return self._outcome(False, "fatal_log", "%s; its log says: %s" % (how, first),
                                 exit_status=exit_status)
        last = self.log.tail(1)
        return self._outcome(
            False, "exited",
            "the launched process %d exited (%s) at phase %s before becoming ready; last log line: %s"
            % (self.inst.pid, _exit_text(exit_status), self._phase_text(), last[0] if last else "(log empty)"),
            exit_status=exit_status)

    def _stale(self, owners: PortOwners, exit_status: Any = None) -> Outcome:
        names = ", ".join("pid %s (user %s, started %s: %s)"
                          % (o.get("pid"), o.get("user"), o.get("started"), o.get("cmdline"))
                          for o in owners.foreign)
        because = ("and this launch failed to bind it" if self.log.bind_error
                   else "so this launch cannot bind it")
        return self._outcome(
            False, "stale_server",
            "port %s is held by another process, not by this launch (pid %d), %s: %s"
            % (self.inst.port, self.inst.pid, because, names),
            stale_owners=owners.foreign, exit_status=exit_status)

    def _on_dead(self) -> Outcome:
        self._poll_log(final=True)
        return self._fail_from_log(read_exit_status(self.inst, sleep=self.sleep))

    def _on_fatal(self) -> Outcome:
        """Read on briefly so the traceback's exception line is part of the answer."""
        until = self.clock() + FATAL_SETTLE_S
        while self.clock() < until:
            if not self._alive():
                return self._on_dead()
            self.sleep(min(0.1, self.opts.poll_interval))
            self._poll_log()
        return self._fail_from_log(None)

    def _timeout(self) -> Outcome:
        tail = self.log.tail(5)
        last = " | ".join(t.strip() for t in tail) if tail else "(no line of this launch in the log)"
        if self.follower.truncated:
            return self._outcome(
                False, "log_truncated",
                "%s was truncated while waiting (see log_events): lines of this launch are lost "
                "and %s was not seen within %.0f s; phase reached: %s"
                % (self.inst.log_path, self.waiting_for, self.opts.timeout, self._phase_text()))
        return self._outcome(
            False, "timeout",
            "not ready after %.0f s: the server reached phase %s and is waiting for %s; last lines: %s"
            % (self.opts.timeout, self._phase_text(), self.waiting_for, last))

    # -- checks ----------------------------------------------------------------------------
    def _hidden(self) -> Optional[Outcome]:
        if not self.opts.require_ready_line or not self.quiet_level:
            return None
        return self._outcome(
            False, "ready_line_hidden",
            "the launch runs with --log-level %s, which suppresses the INFO line %r: readiness "
            "can never be proven from the log; relaunch with --log-level info, or set "
            "require_ready_line: false to rely on the Uvicorn line, port owner identity, "
            "/server_info and health" % (self.quiet_level, "The server is fired up and ready to roll!"))

    def _log_conditions(self) -> bool:
        if self.opts.require_ready_line and self.log.ready_line is None:
            self.waiting_for = "the ready line" if self.rank == 0 else "the dummy health server line"
            return False
        if self.rank == 0 and self.log.uvicorn_line is None and not self.quiet_http:
            self.waiting_for = "`Uvicorn running on` for port %s" % self.inst.port
            return False
        return True

    def _early_stale(self) -> Optional[Outcome]:
        """A foreign listener on our port before we bind: the launch is doomed (bind error
        after minutes of loading), say so now. Cheap: /proc/net only, owners when needed."""
        if self.rank >= 1 or not self.inst.port or self.log.uvicorn_line:
            return None
        now = self.clock()
        if now < self._next_stale:
            return None
        self._next_stale = now + STALE_CHECK_EVERY_S
        if not _ports.has_listener(self.inst.port):
            return None
        owners = port_owners(self.inst.port, self.inst)
        clash = [o for o in owners.foreign if _conflicts(o.get("address") or "", self.inst.host)]
        if clash:
            self.owners = owners
            return self._stale(PortOwners(owners.listeners, clash))
        return None

    def _verify(self) -> Optional[Outcome]:
        """Identity, configuration, health; None while still waiting (reason in waiting_for)."""
        now = self.clock()
        if now < self._next_verify:
            return None
        self._next_verify = now + max(self.opts.poll_interval, VERIFY_EVERY_S)
        if self.rank >= 1:
            return self._outcome(True, "ready", "node_rank %d is up: %s"
                                 % (self.rank, (self.log.ready_line or "").strip()))
        if not self.inst.port:
            raise SglangError("the launch record has no port and node_rank is 0: cannot check "
                              "the HTTP server", reason="record_invalid")
        self.owners = port_owners(self.inst.port, self.inst)
        if self.owners.foreign:
            return self._stale(self.owners)
        if not self.owners.listeners:
            self.waiting_for = "a listener on port %d" % self.inst.port
            return None
        bad = self._check_server_info()
        if bad is not None or self.info is None:
            return bad
        return self._check_health()

    def _remaining(self, cap: float) -> float:
        return max(0.5, min(cap, self.started + self.opts.timeout - self.clock()))

    def _check_server_info(self) -> Optional[Outcome]:
        if self.info is not None:
            return None
        info, error, endpoint = _http.server_info(self.inst.host, self.inst.port or 0,
                                                  self.opts.api_key, timeout=self._remaining(5.0))
        self.info_endpoint = endpoint
        if info is None:
            if error and "unauthorized" in error:
                return self._outcome(False, "unauthorized",
                                     "%s refused the request: pass the server's api_key" % error)
            self.waiting_for = "%s to answer (%s)" % (endpoint, error)
            return None
        matched, mismatches = compare_expected(self.opts.expect, info)
        if mismatches:
            self.info, self.matched = info, matched
            return self._outcome(
                False, "config_mismatch",
                "the server on port %s (this launch, pid %d) reports a configuration other than "
                "expected: %s" % (self.inst.port, self.inst.pid, mismatch_table(mismatches)),
                mismatches=mismatches)
        self.info, self.matched = info, matched
        return None

    def _check_health(self) -> Optional[Outcome]:
        if self.opts.health == "none":
            self.health_status = {"endpoint": None, "status": None, "checked": False}
            return self._ready()
        path = "/" + self.opts.health
        cap = 30.0 if self.opts.health == "health_generate" else 5.0
        resp = _http.request(self.inst.host, self.inst.port or 0, path, self.opts.api_key,
                             timeout=self._remaining(cap))
        self.health_status = {"endpoint": path, "status": resp.status, "checked": True}
        if resp.status == 200:
            return self._ready()
        self.waiting_for = "%s to answer 200 (last: %s)" % (path, resp.error or resp.status)
        return None

    def _ready(self) -> Outcome:
        version = (self.info or {}).get("version")
        return self._outcome(
            True, "ready", "sglang %s on port %s is ready: this launch (pid %d) owns the port, "
            "reports the expected configuration and %s"
            % (version or "(version not reported)", self.inst.port, self.inst.pid,
               "answers %s 200" % self.health_status["endpoint"] if self.health_status.get("checked")
               else "health was not checked (health: none)"))

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> Optional[Outcome]:
        """One poll: new log lines, liveness, fatal lines, then (when due) the proofs."""
        self._poll_log()
        if not self.follower.is_open and not self.follower.ever_opened \
                and self.clock() - self.started >= min(LOG_MISSING_GRACE_S, self.opts.timeout):
            return self._outcome(False, "log_missing",
                                 "the launch log %s does not exist: cannot prove readiness "
                                 "from this launch's log" % self.inst.log_path)
        if not self._alive():
            return self._on_dead()
        if self.log.fatal:
            return self._on_fatal()
        stale = self._early_stale()
        if stale is not None:
            return stale
        if self._log_conditions():
            return self._verify()
        return None

    def run(self) -> Outcome:
        hidden = self._hidden()
        if hidden is not None:
            return hidden
        deadline = self.started + self.opts.timeout
        while True:
            outcome = self.step()
            if outcome is not None:
                return outcome
            now = self.clock()
            if now >= deadline:
                return self._timeout()
            self.sleep(max(0.01, min(self.opts.poll_interval, deadline - now)))


def redact_deep(value: Any, secrets: Sequence[str]) -> Any:
    """Every string in a result, at any depth, through the redactor (the last line of defence)."""
    if isinstance(value, str):
        return _redact.redact_text(value, secrets)
    if isinstance(value, dict):
        return {k: (_redact.MASK if k in ("api_key", "admin_api_key") and v else redact_deep(v, secrets))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_deep(v, secrets) for v in value]
    return value


def wait_ready(record: Dict[str, Any], opts: Options,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Outcome:
    inst = instance_from_record(record)
    return Readiness(inst, opts, clock, sleep).run()
