"""Is THIS launch ready? Identity, not health (DESIGN.md, "Rules that keep operators safe").

A launch that is starting is ready only when every proof holds:
1. the ready line in this launch's log, after the launch offset (old lines never count);
2. `Uvicorn running on http://H:P` for the expected port and no bind error;
3. every listening socket on the port that collides with the launch's address (same family
   and address, or a wildcard) belongs to this instance;
4. /server_info reports the expected configuration;
5. the requested health endpoint answers 200;
and then keeps holding until the settle window ends (process alive, port still this instance's).
A starting launch's window counts from the poll that first saw its ready line: it has been
alive since, so the time the proofs take is inside the window, not added after it. A re-check
of a running server, a log without a ready line and a launch that lost its port count from when
the proofs held.
When asked (`work`), the server proves inside that window that it does its job (_workproof: one
generation that must write a dump, or a chat answer that must carry reasoning): the request's
time overlaps the settle window instead of adding a module call after it.

A server that already holds its port when the check begins (a re-check) is judged by the port
owner, /server_info and health; its log only adds the ready line if it still has it (rotation,
truncation and deletion are no failure), and its old lines are never scanned.

Each poll is cheap (new log bytes, one liveness read, the kernel's socket table when the port
matters; the processes holding the port are named by one scan, reused while the same sockets
listen), so a dead launch is reported within about one poll interval, with the lines that
explain it.

This file is the wait's state machine. Its parts: the launch and how it ended
(_readiness_instance), the configuration check (_readiness_expect), who owns the port
(_portowner, the rule the launch preflight uses too), the log (_logfollow reads it,
_loganalysis judges each line with the patterns of _logpatterns).
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _loganalysis
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns as lp
from ansible_collections.llmops.sglang.plugins.module_utils._host import _portowner
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _workproof
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._logfollow import LogFollower
from ansible_collections.llmops.sglang.plugins.module_utils._host._portowner import PortOwners
from ansible_collections.llmops.sglang.plugins.module_utils._core._progress import ProgressTracker
from ansible_collections.llmops.sglang.plugins.module_utils._readiness._readiness_expect import compare_expected, mismatch_table
from ansible_collections.llmops.sglang.plugins.module_utils._readiness._readiness_instance import (
    Instance, ago, exit_text, instance_from_record, read_exit_status)

HEALTH_CHOICES = ("none", "health", "health_generate")
FATAL_SETTLE_S = 1.0  # after a decisive line, read this long for the rest of the traceback
LOG_MISSING_GRACE_S = 5.0
VERIFY_EVERY_S = 0.5  # HTTP/identity checks need not run at the log cadence
STALE_CHECK_EVERY_S = 1.0
SETTLE_DEFAULT_S = 2.0
SNAPSHOT_VERSION = 1  # the resume state of a sliced wait
# Once the ready line is in (or the proofs hold), a slice runs on to the verdict, this much
# longer at most: the gap between two slices would otherwise delay a verdict due in seconds.
FINISH_GRACE_S = 60.0
HEAD_BYTES = 4 * 1024 * 1024  # a running server's startup is read up to its ready line, at most this
DEAD_TAIL_BYTES = 256 * 1024  # a server found dead: its last lines explain the exit


# --- inputs: the launch (_readiness_instance) and how to judge it ----------------------------

@dataclass
class Options:
    """How one wait judges the launch."""
    timeout: float = 1200.0
    poll_interval: float = 0.2
    ready_patterns: Sequence[str] = lp.READY_PATTERNS
    fatal_patterns: Sequence[str] = lp.FATAL_PATTERNS
    benign_patterns: Sequence[str] = lp.BENIGN_PATTERNS
    settle: float = SETTLE_DEFAULT_S
    expect: Dict[str, Any] = field(default_factory=dict)
    health: str = "health"
    api_key: Optional[str] = None
    node_rank: int = 0
    require_ready_line: bool = True
    work: Optional[_workproof.WorkCheck] = None  # the proof that the server does its job
    # Was this launch ever judged ready (its start is the one remembered, _timeline_store)?
    # False: a launch that holds its port already is still a start - a launch this play made
    # that bound its port before the first poll - unless its log has outgrown a start's
    # (HEAD_BYTES). None (unknown: no state dir or launch id): holding the port means running.
    proven_before: Optional[bool] = None


# One rule for "does that listener collide with this server's address" (_ports), and one for
# "is that process this launch's" (_portowner), shared with the teardown and the preflight.
address_conflict = _ports.address_conflict
host_addresses = _ports.host_addresses


# --- the outcome -----------------------------------------------------------------------------

@dataclass
class Outcome:
    """The verdict: ready or the failure reason, a message and the result details."""
    ready: bool
    reason: str
    msg: str
    details: Dict[str, Any] = field(default_factory=dict)


# --- the state machine -----------------------------------------------------------------------

STARTING, RUNNING, GONE = "starting", "running", "gone"


class Readiness:
    """One wait for one launch. `run()` returns an Outcome and never raises for server trouble.

    `mode` is fixed when the wait begins: STARTING (the launch has not bound its port yet: its
    log from the offset is the main evidence), RUNNING (it already holds its port: a re-check;
    only its startup up to the ready line and new lines are read) or GONE (already dead)."""

    def __init__(self, inst: Instance, opts: Options,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inst, self.opts, self.clock, self.sleep = inst, opts, clock, sleep
        self.started = clock()
        self.started_epoch = time.time()
        self.launched_at = inst.launched_at or self.started_epoch
        self.rank = opts.node_rank
        self.log = _loganalysis.for_launch(opts.ready_patterns, opts.fatal_patterns, opts.benign_patterns,
                                           inst.port, self.launched_at, self.rank)
        self.follower = LogFollower(inst.log_path, inst.log_offset)
        self.quiet_level, self.quiet_http = lp.quiet_log_levels(inst.argv)
        self.secrets = [opts.api_key] if opts.api_key else []
        self.mode = STARTING
        self.ident = inst.identity()
        # verification state
        self.owners: Optional[PortOwners] = None  # the port's owners as the result reports them
        self._scan: Optional[PortOwners] = None  # the last scan: reused while the same sockets listen
        self.info: Optional[Dict[str, Any]] = None
        self.info_endpoint: Optional[str] = None
        self.matched: Dict[str, Any] = {}
        self.health_status: Optional[Dict[str, Any]] = None
        self.waiting_for = "the ready line"
        self._next_verify = 0.0
        self._next_stale = 0.0
        self._proven_at: Optional[float] = None  # clock() when every proof first held
        self._proven_since_launch: Optional[float] = None
        # clock() when a starting launch's log first said it is up (ready line, Uvicorn line):
        # its settle window counts from there, so the proofs' own time is inside the window
        self._up_at: Optional[float] = None
        self._up_since_launch: Optional[float] = None
        self._listening = False  # a listener of ours was seen when the proofs held
        self._lost_note = ""  # why the proofs stopped holding inside the settle window
        self._work: Optional[_workproof.WorkResult] = None  # once per wait, when the proofs first hold
        self.progress = ProgressTracker()  # informational: the stage and tqdm counts
        self._begun = False  # the mode is fixed (first slice done)

    # -- helpers ------------------------------------------------------------------------
    def _now_epoch(self) -> float:
        return self.started_epoch + (self.clock() - self.started)

    def _poll_log(self, final: bool = False) -> None:
        self._feed(self.follower.poll(final=final))

    def _feed(self, lines: List[str], history: bool = False) -> None:
        self.log.feed(lines, self._now_epoch(), history=history)
        self.progress.feed(lines)
        if self.log.ready_line is not None:
            self.progress.mark_ready()

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
            "matched": self.matched,
            "expected": self.opts.expect,
            "server_info_endpoint": self.info_endpoint,
            "listeners": self.owners.listeners if self.owners else [],
            "health": self.health_status,
            "pid": self.inst.pid, "launch_id": self.inst.launch_id,
            "log_path": self.inst.log_path, "log_offset": self.inst.log_offset,
            "log_events": [e.to_dict() for e in self.follower.events],
            "log_bytes_read": self.follower.bytes_read,
            "node_rank": self.rank,
            "already_running": self.mode == RUNNING,
            "settle": self.opts.settle,
            "proven_at": self._proven_since_launch,
            "settle_from": self._window_since_launch(),
            "work": self._work.to_dict() if self._work else None,
            "decisive_lines": [] if ready else self.log.decisive_lines(),
            "log_tail": [] if ready else self.log.tail(),
            "exit_status": None,
        }
        details.update(extra)
        self.follower.close()
        return Outcome(ready, reason, msg, _redact.redact_deep(details, self.secrets))

    # -- who owns the port ------------------------------------------------------------------
    def _port_owners(self) -> PortOwners:
        """The owners of the launch's port now: the last scan while the same sockets listen
        (two reads of the kernel's tables), else a scan of every process's fds."""
        self._scan = _portowner.current(self.inst.port or 0, self.ident, self._scan)
        return self._scan

    # -- how the log is read -------------------------------------------------------------
    def _holds_port(self) -> bool:
        """Does this launch already listen on its port? One scan names the port's holders."""
        if not self.inst.port:
            return False
        owners = self._port_owners()
        if owners.ours:
            self.owners = owners
            return True
        return False

    def _unproven_start(self) -> bool:
        """A launch never judged ready whose log since the launch offset is no longer than a
        start's: judged as a start (its whole log from the offset, the ready line required, the
        settle window from it, its start remembered), not as a server that was already running."""
        if self.opts.proven_before is not False:
            return False
        try:
            grown = os.stat(self.inst.log_path).st_size - self.inst.log_offset
        except OSError:
            return False
        return 0 <= grown <= HEAD_BYTES

    def _begin(self) -> None:
        """Fix the mode. A running server: its startup up to the ready line (bounded) for the
        timeline, then only new lines; what it logged since (recovered errors, hours of access
        lines) is never read. A dead one: the same startup, then its last lines."""
        alive = self._alive()
        if alive and self._holds_port() and not self._unproven_start():
            self.mode = RUNNING
        elif not alive:
            self.mode = GONE
        else:
            return
        head = self.follower.read_head(HEAD_BYTES, self.log.is_ready_line)
        found = bool(head) and self.log.is_ready_line(head[-1])
        self._feed(head, history=self.mode == RUNNING)
        if self.mode == RUNNING:
            self.log.past_start = True
            self.follower.seek_near_end()
        elif found:
            self.follower.seek_near_end(DEAD_TAIL_BYTES)

    # -- failures ------------------------------------------------------------------------
    def _death_context(self) -> str:
        """When the process died, truthfully: before or after its ready line, or the proofs."""
        now = self._now_epoch()
        if self._proven_at is not None:
            return ("%.1f s after every readiness proof held (inside the settle window of %.1f s)"
                    % (max(0.0, self.clock() - self._proven_at), self.opts.settle))
        ready_at = self.log.ready_seconds()
        if ready_at is not None:
            return "after its ready line (printed %s after the launch, %s ago)" % (
                ago(ready_at), ago(max(0.0, now - self.launched_at - ready_at)))
        if self.mode == RUNNING:
            return ("while it was already running (it held port %s when this check began; "
                    "its log no longer has the ready line)" % self.inst.port)
        return "at phase %s before becoming ready" % self._phase_text()

    def _fail_from_log(self, exit_status: Any) -> Outcome:
        """The launch died or printed a decisive line: name the cause, most specific first."""
        first = self.log.cause()
        if self.log.bind_error and self.inst.port:
            owners = self._port_owners()
            self.owners = owners
            clash = owners.clashing(self.inst.host)
            if clash:
                return self._stale(owners, clash, exit_status)
        died = exit_status is not None
        what = "the launch is failing"
        if died:
            what = "the launched process %d exited (%s) %s" % (self.inst.pid, exit_text(exit_status),
                                                               self._death_context())
        if first is not None:
            return self._outcome(False, "fatal_log", "%s; its log says: %s" % (what, first),
                                 exit_status=exit_status)
        last = self.log.tail(1)
        return self._outcome(False, "exited", "%s; last log line: %s"
                             % (what, last[0] if last else "(none read)"), exit_status=exit_status)

    def _stale(self, owners: PortOwners, clash: List[Dict[str, Any]], exit_status: Any = None) -> Outcome:
        names = ", ".join("pid %s (user %s, started %s, on %s: %s)"
                          % (o.get("pid"), o.get("user"), o.get("started"), o.get("address"), o.get("cmdline"))
                          for o in clash)
        because = ("and this launch failed to bind it" if self.log.bind_error
                   else "so this launch cannot bind it")
        return self._outcome(
            False, "stale_server",
            "port %s (%s) is held by another process, not by this launch (pid %d), %s: %s"
            % (self.inst.port, self.inst.host, self.inst.pid, because, names),
            stale_owners=clash, exit_status=exit_status)

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
        if self.follower.truncated and self.mode == STARTING:
            return self._outcome(
                False, "log_truncated",
                "%s was truncated while waiting (see log_events): lines of this launch are lost "
                "and %s was not seen within %.0f s; phase reached: %s"
                % (self.inst.log_path, self.waiting_for, self.opts.timeout, self._phase_text()))
        if self.mode == RUNNING:
            return self._outcome(
                False, "timeout",
                "not ready after %.0f s: the server (pid %d) held port %s when the check began "
                "and is waiting for %s; last lines: %s"
                % (self.opts.timeout, self.inst.pid, self.inst.port, self.waiting_for, last))
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
        if self.mode == RUNNING:
            return True  # identity from the port owner, /server_info and health
        if self.opts.require_ready_line and self.log.ready_line is None:
            self.waiting_for = "the ready line" if self.rank == 0 else "the dummy health server line"
            return False
        if self.rank == 0 and self.log.uvicorn_line is None and not self.quiet_http:
            self.waiting_for = "`Uvicorn running on` for port %s" % self.inst.port
            return False
        return True

    def _watch_port(self) -> Optional[Outcome]:
        """Until the ready line: a foreign listener on our address before we bind dooms the
        launch (a bind error after minutes of loading): say so now (once a second). Once the
        launch has bound (`Uvicorn running on`), its listener's owners are named here, ahead of
        the ready line, so the verdict does not wait for that scan. Cheap: the kernel's socket
        table; a scan of the processes only when the port's sockets changed."""
        if self.rank >= 1 or not self.inst.port or self.log.ready_line is not None:
            return None
        now = self.clock()
        bound = self.log.uvicorn_line is not None
        if now < self._next_stale and not (bound and not (self._scan and self._scan.ours)):
            return None
        self._next_stale = now + STALE_CHECK_EVERY_S
        owners = self._port_owners()
        if bound:
            return None  # the proofs judge a bound launch's port (_verify), from this scan
        clash = owners.clashing(self.inst.host)
        if clash:
            self.owners = owners
            return self._stale(owners, clash)
        return None

    def _verify(self) -> Optional[Outcome]:
        """Identity, configuration, health; None while still waiting (reason in waiting_for)."""
        now = self.clock()
        if now < self._next_verify:
            return None
        self._next_verify = now + max(self.opts.poll_interval, VERIFY_EVERY_S)
        if self.rank >= 1:
            self._listening = bool(self.inst.port and self.mode == RUNNING)
            return self._proven()
        if not self.inst.port:
            raise SglangError("the launch record has no port and node_rank is 0: cannot check "
                              "the HTTP server", reason="record_invalid")
        self.owners = self._port_owners()
        clash = self.owners.clashing(self.inst.host)
        if clash:
            return self._stale(self.owners, clash)
        if not self.owners.ours:
            self.waiting_for = "a listener of this launch on port %d%s" % (self.inst.port, self._lost_note)
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

    def _health_endpoint(self) -> Optional[str]:
        """The endpoint to check. A running server whose log no longer shows the ready line is
        checked with /health even with `health: none`: it answers 200 only after the warmup."""
        if self.opts.health != "none":
            return "/" + self.opts.health
        if self.mode == RUNNING and self.log.ready_line is None:
            return "/health"
        return None

    def _check_health(self) -> Optional[Outcome]:
        path = self._health_endpoint()
        if path is None:
            self.health_status = {"endpoint": None, "status": None, "checked": False}
            return self._proven()
        cap = 30.0 if path == "/health_generate" else 5.0
        resp = _http.request(self.inst.host, self.inst.port or 0, path, self.opts.api_key,
                             timeout=self._remaining(cap))
        self.health_status = {"endpoint": path, "status": resp.status, "checked": True}
        if resp.status == 200:
            self._listening = True
            return self._proven()
        self.waiting_for = "%s to answer 200 (last: %s)" % (path, resp.error or resp.status)
        return None

    # -- the settle window -----------------------------------------------------------------
    def _proven(self) -> Optional[Outcome]:
        """Every proof holds now; ready when the settle window (_window_start) has ended with
        the process alive and the port still ours."""
        self._proven_at = self.clock()
        self._proven_since_launch = round(self._now_epoch() - self.launched_at, 3)
        if self.rank == 0:
            self._listening = True
            failed = self._prove_work()
            if failed is not None:
                return failed
        if self.opts.settle <= 0:
            return self._ready()
        self.waiting_for = "the settle window (%.1f s)" % self.opts.settle
        window_start = self._window_start()
        if window_start is not None and self.clock() - window_start >= self.opts.settle:
            return self._settle_step(window_start)  # slow proofs outlasted it: the end check now
        return None

    def _prove_work(self) -> Optional[Outcome]:
        """The asked proof of work, once (inside the settle window, whose clock runs meanwhile);
        a failure outcome, or None. A server that died meanwhile is reported as the crash."""
        if self.opts.work is None or self._work is not None:
            return None
        self.waiting_for = "the proof of work (%s)" % self.opts.work.kind
        proc = _procs.read_proc(self.inst.pid)  # the owner of the dump the proof may remove again
        check = dataclasses.replace(self.opts.work, server_uid=proc.uid if proc else None)
        self._work = _workproof.prove(check, self.inst.host, self.inst.port or 0, self.opts.api_key,
                                      self.clock, self.sleep)
        if self._work.ok:
            return None
        if not self._alive():
            return self._on_dead()
        return self._outcome(False, "work_failed", self._work.msg)

    def _window_start(self) -> Optional[float]:
        """clock() at which the settle window began: when a starting launch's log said it is up
        (it has been alive since), else when every proof held (a re-check of a running server)."""
        if self._proven_at is None:
            return None
        return self._up_at if self._up_at is not None else self._proven_at

    def _window_since_launch(self) -> Optional[float]:
        if self._proven_at is None:
            return None
        return self._up_since_launch if self._up_at is not None else self._proven_since_launch

    def _mark_up(self) -> None:
        """The settle window's start: the first poll that has the ready line of a starting
        launch whose port was never lost (else the window counts from the proofs)."""
        if self.mode == STARTING and self._up_at is None and self.log.ready_line is not None \
                and not self._lost_note:
            self._up_at = self.clock()
            self._up_since_launch = round(self._now_epoch() - self.launched_at, 3)

    def _lost_port(self, why: str) -> None:
        """The port is no longer this launch's: the proofs do not hold; wait for them again (the
        settle window then counts from the new attempt)."""
        self._proven_at = None
        self._proven_since_launch = None
        self._up_at = None
        self._up_since_launch = None
        self._lost_note = " (%s)" % why
        self.waiting_for = "a listener of this launch on port %s%s" % (self.inst.port, self._lost_note)

    def _settle_step(self, window_start: float) -> Optional[Outcome]:
        """Inside the settle window that began at `window_start` (the process is alive: checked
        by the caller)."""
        port = self.inst.port
        if port and self._listening and not _ports.has_listener(port):
            self._lost_port("released during the settle window")
            return None
        if self.clock() - window_start < self.opts.settle:
            return None
        if port and self._listening:
            self.owners = self._port_owners()
            clash = self.owners.clashing(self.inst.host)
            if clash:
                return self._stale(self.owners, clash)
            if not self.owners.ours:
                self._lost_port("lost during the settle window")
                return None
        return self._ready()

    def _ready(self) -> Outcome:
        settle = ""
        if self.opts.settle > 0:
            settle = "; held for the %.1f s settle window%s" % (
                self.opts.settle, " since its ready line" if self._up_at is not None else "")
        if self._work is not None:
            settle += "; proof of work: %s" % self._work.msg
        if self.rank >= 1:
            return self._outcome(True, "ready", "node_rank %d is up: %s%s" % (
                self.rank, (self.log.ready_line or "listening on port %s" % self.inst.port).strip(), settle))
        version = (self.info or {}).get("version")
        health = self.health_status or {}
        return self._outcome(
            True, "ready", "sglang %s on port %s is ready: this launch (pid %d)%s owns the port, "
            "reports the expected configuration and %s%s"
            % (version or "(version not reported)", self.inst.port, self.inst.pid,
               ", already running," if self.mode == RUNNING else "",
               "answers %s 200" % health["endpoint"] if health.get("checked")
               else "health was not checked (health: none)", settle))

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> Optional[Outcome]:
        """One poll: new log lines, liveness, decisive lines, then (when due) the proofs."""
        self._poll_log()
        if self.mode == STARTING and not self.follower.is_open and not self.follower.ever_opened \
                and self.clock() - self.started >= min(LOG_MISSING_GRACE_S, self.opts.timeout):
            return self._outcome(False, "log_missing",
                                 "the launch log %s does not exist: cannot prove readiness "
                                 "from this launch's log" % self.inst.log_path)
        if not self._alive():
            return self._on_dead()
        window_start = self._window_start()
        if window_start is not None:
            return self._settle_step(window_start)
        if self.mode == STARTING and self.log.decisive:
            return self._on_fatal()
        stale = self._watch_port() if self.mode == STARTING else None
        if stale is not None:
            return stale
        if self._log_conditions():
            self._mark_up()
            return self._verify()
        return None

    def _deadline(self) -> float:
        """The timeout; a settle window that began before it is allowed to finish."""
        deadline = self.started + self.opts.timeout
        window_start = self._window_start()
        if window_start is not None:
            deadline = max(deadline, window_start + self.opts.settle)
        return deadline

    def run(self, slice_seconds: Optional[float] = None) -> Optional[Outcome]:
        """The verdict; with `slice_seconds`, None when the slice ends first (a sliced wait
        then goes on from `snapshot()` in another process). The timeout counts from the
        first slice."""
        if not self._begun:
            hidden = self._hidden()
            if hidden is not None:
                return hidden
            self._begin()
            self._begun = True
        slice_end = None if slice_seconds is None else self.clock() + slice_seconds
        while True:
            outcome = self.step()
            if outcome is not None:
                return outcome
            now = self.clock()
            if now >= self._deadline():
                return self._timeout()
            if slice_end is not None and now >= slice_end and not self._finishing(now - slice_end):
                return None
            pause = min(self.opts.poll_interval, self._deadline() - now)
            if slice_end is not None:
                pause = min(pause, slice_end - now)
            self.sleep(max(0.01, pause))

    # -- a sliced wait: the state carried from one slice (process) to the next ------------------
    def _finishing(self, overtime: float) -> bool:
        """Is the verdict due within seconds (ready line seen, or the proofs held)?"""
        near = self._proven_at is not None or (self.mode == STARTING and self.log.ready_line is not None)
        return near and overtime < FINISH_GRACE_S

    def pending(self) -> Dict[str, Any]:
        """What a slice that ended without a verdict reports: where the start is."""
        self.progress.peek(self.follower.pending_text())
        return {
            "elapsed": round(self.clock() - self.started, 3),
            "since_launch": round(self._now_epoch() - self.launched_at, 3),
            "phase": self.log.phase, "waiting_for": self.waiting_for,
            "progress": dict(self.progress.state), "already_running": self.mode == RUNNING,
            "pid": self.inst.pid, "launch_id": self.inst.launch_id,
            "log_bytes_read": self.follower.bytes_read,
        }

    def snapshot(self) -> Dict[str, Any]:
        """Everything the next slice needs to go on exactly as this wait would have, secrets
        redacted; the log is closed (the next slice reopens it at the same byte)."""
        def clean(text: str) -> str:
            return _redact.redact_text(text, self.secrets)

        inst = asdict(self.inst)
        inst["argv"] = lp.log_level_argv(self.inst.argv)  # all the wait needs from it
        state = {
            "version": SNAPSHOT_VERSION, "instance": inst, "mode": self.mode,
            "started": self.started, "started_epoch": self.started_epoch,
            "elapsed": self.clock() - self.started,
            "waiting_for": clean(self.waiting_for), "next_verify": self._next_verify,
            "next_stale": self._next_stale, "proven_at": self._proven_at,
            "proven_since_launch": self._proven_since_launch, "listening": self._listening,
            "up_at": self._up_at, "up_since_launch": self._up_since_launch,
            "lost_note": self._lost_note,
            "info": None if self.info is None else {"version": self.info.get("version")},
            "info_endpoint": self.info_endpoint, "matched": _redact.redact_deep(self.matched, self.secrets),
            "health_status": self.health_status,
            "work": self._work.to_dict() if self._work else None,
            "owners": None if self.owners is None else self.owners.to_state(),
            "scan": None if self._scan is None else self._scan.to_state(),
            "follower": self.follower.snapshot(), "log": self.log.snapshot(clean),
            "progress": dict(self.progress.state),
        }
        self.follower.close()
        return state

    @classmethod
    def restore(cls, state: Dict[str, Any], opts: Options,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> "Readiness":
        """The wait `snapshot()` described, in this process."""
        if not isinstance(state, dict) or state.get("version") != SNAPSHOT_VERSION:
            raise SglangError("the resume state of a sliced wait is missing or of another version",
                              reason="invalid_argument")
        try:
            return cls._restored(state, opts, clock, sleep)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SglangError("the resume state of a sliced wait is not one this module wrote (%s: %s)"
                              % (type(exc).__name__, exc), reason="invalid_argument")

    @classmethod
    def _restored(cls, state: Dict[str, Any], opts: Options, clock: Callable[[], float],
                  sleep: Callable[[float], None]) -> "Readiness":
        inst = Instance(**state["instance"])
        waiter = cls(inst, opts, clock, sleep)
        now = clock()
        started = float(state["started"])
        # One host, one monotonic clock; should it ever be behind, the elapsed time carries on.
        waiter.started = started if started <= now else now - float(state.get("elapsed") or 0.0)
        waiter.started_epoch = float(state["started_epoch"])
        waiter.mode = state["mode"]
        waiter.waiting_for = state["waiting_for"]
        waiter._next_verify, waiter._next_stale = state["next_verify"], state["next_stale"]
        waiter._proven_at, waiter._proven_since_launch = state["proven_at"], state["proven_since_launch"]
        waiter._up_at, waiter._up_since_launch = state.get("up_at"), state.get("up_since_launch")
        waiter._listening, waiter._lost_note = bool(state["listening"]), state["lost_note"]
        waiter.info, waiter.info_endpoint = state["info"], state["info_endpoint"]
        waiter.matched, waiter.health_status = dict(state["matched"] or {}), state["health_status"]
        waiter._work = _workproof.from_dict(state.get("work"))
        owners, scan = state.get("owners"), state.get("scan")
        waiter.owners = PortOwners.from_state(owners) if owners else None
        waiter._scan = PortOwners.from_state(scan) if scan else None
        holders = [p for p in (inst.pid, inst.supervisor_pid) if p]
        waiter.follower = LogFollower.restore(state["follower"], holders)
        waiter.log.restore(state["log"])
        waiter.progress = ProgressTracker(state.get("progress"))
        waiter._begun = True
        return waiter


def wait_ready(record: Dict[str, Any], opts: Options,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Outcome:
    inst = instance_from_record(record)
    outcome = Readiness(inst, opts, clock, sleep).run()
    if outcome is None:  # only a slice ends without a verdict
        raise SglangError("the readiness wait ended without a verdict", reason="error")
    return outcome


@dataclass
class Slice:
    """One slice of a sliced wait: the verdict, or where the start is and the state to go on."""
    outcome: Optional[Outcome]
    pending: Dict[str, Any] = field(default_factory=dict)
    state: Optional[Dict[str, Any]] = None


def wait_ready_slice(record: Optional[Dict[str, Any]], opts: Options, state: Optional[Dict[str, Any]],
                     seconds: float, clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> Slice:
    """At most about `seconds` of the wait (a verdict being read - the rest of a traceback, the
    settle window's last check - is finished first): from `record` for the first slice, from
    the previous slice's `state` after that. The verdict is the one `wait_ready` gives."""
    if state:
        waiter = Readiness.restore(state, opts, clock, sleep)
    else:
        waiter = Readiness(instance_from_record(dict(record or {})), opts, clock, sleep)
    outcome = waiter.run(slice_seconds=seconds)
    if outcome is not None:
        return Slice(outcome)
    pending = waiter.pending()
    return Slice(None, pending, waiter.snapshot())
