"""PRIVATE to llmops.sglang. Drain one SGLang server: wait (bounded) until it runs nothing.

Used after the router stopped routing to the server and before its teardown. The server's own
load is read, in this order, from:

- GET /get_load (sglang 0.5.6 and earlier): one entry per DP rank,
  {dp_rank, num_reqs (running + waiting), num_waiting_reqs, num_tokens}; some versions name the
  fields num_running_reqs / num_queue_reqs.
- GET /v1/loads (0.5.23, which dropped /get_load): {loads: [{dp_rank, num_running_reqs,
  num_waiting_reqs, ...}]}.
- GET /metrics (only with --enable-metrics): the gauges sglang:num_running_reqs and
  sglang:num_queue_reqs, summed over their label sets.

The first source that answers is kept for the rest of the wait. Read-only: nothing is sent to
the server but GET requests. HTTP goes through ansible's open_url (_http): nothing to install.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

SOURCES = ("get_load", "v1_loads", "metrics")
PATHS = {"get_load": "/get_load", "v1_loads": "/v1/loads", "metrics": "/metrics"}
ON_TIMEOUT = ("fail", "proceed")
SAMPLES_RETURNED = 50

_GAUGE = re.compile(r"^sglang:(num_running_reqs|num_queue_reqs)(?:\{[^}]*\})?\s+(\S+)", re.M)


@dataclass
class Load:
    """Requests a server is running and has queued, and the endpoint that said so."""

    running: int
    waiting: int
    source: str

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0

    def as_dict(self) -> Dict[str, Any]:
        return {"running": self.running, "waiting": self.waiting, "source": self.source}


def _int(value: Any) -> Optional[int]:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _rank_load(entry: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    """(running, waiting) of one DP rank, whatever the version calls them."""
    waiting = _int(entry.get("num_waiting_reqs", entry.get("num_queue_reqs", 0))) or 0
    if "num_running_reqs" in entry:
        running = _int(entry["num_running_reqs"])
    elif "num_reqs" in entry:  # 0.5.6: num_reqs counts the waiting ones too
        total = _int(entry["num_reqs"])
        running = None if total is None else max(0, total - waiting)
    else:
        return None
    return None if running is None else (running, waiting)


def _sum_ranks(entries: Any, source: str) -> Optional[Load]:
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        return None
    loads = [_rank_load(e) for e in entries if isinstance(e, dict)]
    counted = [item for item in loads if item is not None]
    if not counted or len(counted) != len(loads):
        return None
    return Load(sum(item[0] for item in counted), sum(item[1] for item in counted), source)


def parse_get_load(body: Any) -> Optional[Load]:
    return _sum_ranks(body, "get_load")


def parse_v1_loads(body: Any) -> Optional[Load]:
    return _sum_ranks(body.get("loads"), "v1_loads") if isinstance(body, dict) else None


def parse_metrics(text: Any) -> Optional[Load]:
    if not isinstance(text, str):
        return None
    totals: Dict[str, float] = {}
    for name, value in _GAUGE.findall(text):
        try:
            totals[name] = totals.get(name, 0.0) + float(value)
        except ValueError:
            continue
    if "num_running_reqs" not in totals:
        return None
    return Load(int(totals["num_running_reqs"]), int(totals.get("num_queue_reqs", 0)), "metrics")


PARSERS: Dict[str, Callable[[Any], Optional[Load]]] = {
    "get_load": parse_get_load, "v1_loads": parse_v1_loads, "metrics": parse_metrics}

Fetch = Callable[[str], _http.Response]


class Unreachable(Exception):
    """No answer at all from the server (it is not running): there is nothing to drain."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def read_load(fetch: Fetch, sources: List[str]) -> Load:
    """The first source in `sources` that answers with a load; SglangError when none does."""
    tried: List[str] = []
    for source in sources:
        resp = fetch(PATHS[source])
        if resp.status is None:
            raise Unreachable(resp.error or "no answer")
        if resp.status in (401, 403):
            raise SglangError("%s answered HTTP %d: api_key missing or wrong" % (PATHS[source], resp.status),
                              reason="unauthorized")
        load = PARSERS[source](resp.body) if resp.status == 200 else None
        if load is not None:
            return load
        tried.append("%s: HTTP %s" % (PATHS[source], resp.status))
    raise SglangError("the server reports no load (%s); start it with --enable-metrics for /metrics"
                      % "; ".join(tried), reason="no_load_source", tried=tried)


@dataclass
class Options:
    """How long and how often to wait for the load to reach zero."""

    timeout: float = 300.0
    poll_interval: float = 1.0
    settle: float = 2.0
    sources: List[str] = field(default_factory=lambda: list(SOURCES))
    on_timeout: str = "fail"
    check_mode: bool = False


def validate(opts: Options) -> None:
    if opts.timeout < 0 or opts.settle < 0:
        raise SglangError("timeout and settle must be >= 0", reason="invalid_argument")
    if not 0.05 <= opts.poll_interval <= 60:
        raise SglangError("poll_interval must be between 0.05 and 60 s", reason="invalid_argument")
    bad = [s for s in opts.sources if s not in SOURCES]
    if bad or not opts.sources:
        raise SglangError("sources must be a non-empty list of %s (got %s)" % (", ".join(SOURCES), bad),
                          reason="invalid_argument")
    if opts.on_timeout not in ON_TIMEOUT:
        raise SglangError("on_timeout must be one of %s" % ", ".join(ON_TIMEOUT), reason="invalid_argument")


@dataclass
class State:
    """Where a wait stands; a sliced wait carries it from one module call to the next (as a
    dict). `started` and `idle_since` are CLOCK_MONOTONIC readings: one clock for every
    process on the host, so the timeout counts from the first slice's start."""
    started: float
    sources: List[str]
    samples: List[Dict[str, Any]] = field(default_factory=list)
    idle_since: Optional[float] = None
    peak: int = 0
    load: Optional[Dict[str, Any]] = None
    next_at: Optional[float] = None      # when the next reading is due

    def to_dict(self) -> Dict[str, Any]:
        return {"started": self.started, "sources": list(self.sources), "samples": list(self.samples),
                "idle_since": self.idle_since, "peak": self.peak, "load": self.load, "next_at": self.next_at}

    @classmethod
    def from_dict(cls, data: Any, now: float, opts: "Options") -> "State":
        """A state another slice returned, checked: a bad one is refused, never half-used."""
        try:
            state = cls(started=float(data["started"]), sources=[str(x) for x in data["sources"]],
                        samples=[dict(x) for x in data.get("samples") or []],
                        idle_since=None if data.get("idle_since") is None else float(data["idle_since"]),
                        peak=int(data.get("peak") or 0),
                        load=dict(data["load"]) if data.get("load") else None,
                        next_at=None if data.get("next_at") is None else float(data["next_at"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SglangError("the resume state of a sliced drain is not valid (%s)" % exc, reason="invalid_argument")
        bad = [s for s in state.sources if s not in SOURCES]
        if bad or not state.sources or not state.started <= now <= state.started + opts.timeout + 3600:
            raise SglangError("the resume state of a sliced drain is not valid (sources %s, started %.0f s ago)"
                              % (state.sources, now - state.started), reason="invalid_argument")
        return state


@dataclass
class Step:
    """One slice: the final result, or (result None) the state to go on from."""
    result: Optional[Dict[str, Any]]
    state: State


def drain(fetch: Fetch, opts: Options, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """Poll until the server runs and queues nothing for `settle` seconds in a row (a request
    the router sent just before it dropped the worker still counts), or until `timeout`."""
    result = drain_slice(fetch, opts, None, None, clock, sleep).result
    if result is None:  # cannot happen: a slice without an end returns only with the verdict
        raise SglangError("the drain ended without a verdict", reason="internal_error")
    return result


def drain_slice(fetch: Fetch, opts: Options, resume: Optional[Dict[str, Any]], seconds: Optional[float],
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> Step:
    """The wait, from `resume` (None: from the start), for at most about `seconds` (None: to
    the verdict). A slice never sleeps past its end; the next one takes the readings at the
    times one uninterrupted wait would (when it starts in time), so the verdict, the samples and
    the elapsed time are those of one uninterrupted wait."""
    validate(opts)
    slice_start = clock()
    state = State(slice_start, list(opts.sources)) if resume is None else State.from_dict(resume, slice_start, opts)
    slice_end = None if seconds is None else slice_start + seconds
    deadline = state.started + opts.timeout
    while True:
        if state.next_at is not None:
            wait = state.next_at - clock()
            if wait > 0 and slice_end is not None and clock() + wait > slice_end:
                sleep(max(0.0, slice_end - clock()))  # the next reading belongs to the next slice
                return Step(None, state)
            if wait > 0:
                sleep(wait)
        now = clock()
        done = _poll(fetch, opts, state, now, deadline, clock)
        if done is not None:
            return Step(done, state)
        state.next_at = clock() + max(0.01, min(opts.poll_interval, deadline - now))


def _poll(fetch: Fetch, opts: Options, state: State, now: float, deadline: float,
          clock: Callable[[], float]) -> Optional[Dict[str, Any]]:
    """One reading: the result when it decides, else None (the state updated)."""
    started = state.started
    try:
        load = read_load(fetch, state.sources)
    except Unreachable as exc:
        return _done(True, "unreachable", "the server does not answer (%s): nothing to drain"
                     % exc.error, None, state.samples, state.peak, started, clock)
    state.sources = [load.source]  # keep to the source that answered
    state.peak = max(state.peak, load.running + load.waiting)
    state.load = load.as_dict()
    samples = state.samples
    if not samples or (load.running, load.waiting) != (samples[-1]["running"], samples[-1]["waiting"]):
        samples.append(dict(load.as_dict(), at=round(now - started, 2)))
    state.idle_since = (state.idle_since if state.idle_since is not None else now) if load.idle else None
    if opts.check_mode:
        return _done(load.idle, "check_mode", "check mode: the server runs %d and queues %d requests"
                     % (load.running, load.waiting), load, samples, state.peak, started, clock)
    if state.idle_since is not None and now - state.idle_since >= opts.settle:
        return _done(True, "drained", "drained: no running or waiting request for %.1f s (%s)"
                     % (opts.settle, PATHS[load.source]), load, samples, state.peak, started, clock)
    if now >= deadline and load.idle:  # idle at the deadline: the settle time is cut short
        return _done(True, "drained", "drained: no running or waiting request at the deadline (%s)"
                     % PATHS[load.source], load, samples, state.peak, started, clock)
    if now >= deadline:
        msg = ("still %d running and %d waiting requests after %.0f s (drain timeout)"
               % (load.running, load.waiting, opts.timeout))
        if opts.on_timeout == "fail":
            raise SglangError(msg + ". Nothing was stopped.", reason="timeout",
                              load=load.as_dict(), samples=samples, peak=state.peak)
        return _done(False, "timeout", msg + ": proceeding (on_timeout=proceed)", load, samples,
                     state.peak, started, clock)
    return None


def progress(state: State, opts: Options, now: float) -> Dict[str, Any]:
    """Where a pending wait stands, for the line the action plugin prints between slices."""
    load = state.load or {}
    return {"running": load.get("running"), "waiting": load.get("waiting"), "source": load.get("source"),
            "elapsed": round(now - state.started, 2), "timeout": opts.timeout, "settle": opts.settle,
            "idle_for": None if state.idle_since is None else round(now - state.idle_since, 2)}


def _done(drained: bool, reason: str, msg: str, load: Optional[Load], samples: List[Dict[str, Any]],
          peak: int, started: float, clock: Callable[[], float]) -> Dict[str, Any]:
    return {"changed": False, "drained": drained, "reason": reason, "msg": msg,
            "load": load.as_dict() if load else None, "source": load.source if load else None,
            "peak": peak, "samples": samples[-SAMPLES_RETURNED:], "elapsed": round(clock() - started, 3)}
