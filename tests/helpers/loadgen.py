"""A steady client load through an SGLang router, counting every failed request.

A mix of requests, each client thread cycling through it: streaming /generate that runs for
seconds (multi-second streams are what a careless restart cuts: the router retries a request
that failed before its headers were sent, never a stream that broke afterwards), non-streaming
/generate, streaming and non-streaming /v1/chat/completions.

A request counts as failed on: a connection error or timeout, an HTTP status other than 200, a
body that is not the expected JSON, a stream that ends without `data: [DONE]` or carries an
error event. Bounded: at most `max_requests` requests and `max_seconds` seconds, then it stops
by itself. Loopback only: it refuses any other address.

    gen = LoadGen("http://127.0.0.1:18300", model="m", clients=6)
    gen.start(); ...; gen.stop()
    gen.summary()   # {"total", "failed", "failed_pct", "longest_gap", "errors", ...}
"""
from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

import requests

KINDS = ("stream_generate", "generate", "stream_chat", "chat")


@dataclass
class Result:
    kind: str
    start: float
    end: float
    ok: bool
    status: Optional[int] = None
    error: str = ""
    events: int = 0


def _loopback_only(url: str) -> None:
    host = urlsplit(url).hostname or ""
    addrs = {info[4][0] for info in socket.getaddrinfo(host, None)}
    bad = [a for a in addrs if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    if not addrs or bad:
        raise ValueError("load generator targets loopback only, not %s (%s)" % (url, ", ".join(bad)))


@dataclass
class LoadGen:
    base_url: str
    model: str = "default"
    clients: int = 6
    # tokens per long stream (cycled per request): with 0.05 s per token, 2 to 4 s each
    stream_tokens: Tuple[int, ...] = (40, 60, 80)
    short_tokens: int = 4
    mix: Tuple[str, ...] = KINDS
    max_requests: int = 20000
    max_seconds: float = 900.0
    request_timeout: float = 60.0
    results: List[Result] = field(default_factory=list)

    def __post_init__(self) -> None:
        _loopback_only(self.base_url)
        self.base_url = self.base_url.rstrip("/")
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._issued = 0
        self.started_at: Optional[float] = None
        self.stopped_at: Optional[float] = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "LoadGen":
        self.started_at = time.time()
        for i in range(self.clients):
            thread = threading.Thread(target=self._client, args=(i,), daemon=True, name="loadgen-%d" % i)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 120.0) -> None:
        """Stop issuing; wait for the requests in flight to end (they count)."""
        self._halt.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        self.stopped_at = time.time()

    def _take_slot(self) -> bool:
        with self._lock:
            if self._halt.is_set() or self._issued >= self.max_requests:
                return False
            if self.started_at is not None and time.time() - self.started_at > self.max_seconds:
                return False
            self._issued += 1
            return True

    def _client(self, index: int) -> None:
        session = requests.Session()
        session.trust_env = False  # never a proxy
        n = index  # clients start at different points of the mix
        while self._take_slot():
            kind = self.mix[n % len(self.mix)]
            tokens = self.stream_tokens[(n // len(self.mix)) % len(self.stream_tokens)]
            n += 1
            result = self._one(session, kind, tokens)
            with self._lock:
                self.results.append(result)

    # -- one request --------------------------------------------------------------------------------
    def _one(self, session: requests.Session, kind: str, tokens: int) -> Result:
        start = time.time()
        stream = kind.startswith("stream_")
        if kind.endswith("generate"):
            path = "/generate"
            body: Dict[str, Any] = {"text": "Tell me about Paris.", "stream": stream,
                                    "sampling_params": {"max_new_tokens": tokens if stream else self.short_tokens,
                                                        "temperature": 0}}
        else:
            path = "/v1/chat/completions"
            body = {"model": self.model, "stream": stream, "max_tokens": 256,
                    "messages": [{"role": "user", "content": "What is 2 + 2?"}]}
        try:
            resp = session.post(self.base_url + path, json=body, stream=stream, timeout=self.request_timeout)
        except requests.exceptions.RequestException as exc:
            return Result(kind, start, time.time(), False, None, "connection: %s" % type(exc).__name__)
        try:
            if resp.status_code != 200:
                return Result(kind, start, time.time(), False, resp.status_code,
                              "HTTP %d %s" % (resp.status_code, resp.text[:120]))
            if stream:
                ok, error, events = _read_stream(resp)
                return Result(kind, start, time.time(), ok, 200, error, events)
            ok, error = _check_body(kind, resp)
            return Result(kind, start, time.time(), ok, 200, error)
        except requests.exceptions.RequestException as exc:
            return Result(kind, start, time.time(), False, resp.status_code, "read: %s" % type(exc).__name__)
        finally:
            resp.close()

    # -- numbers ------------------------------------------------------------------------------------
    def snapshot(self) -> List[Result]:
        with self._lock:
            return list(self.results)

    def summary(self) -> Dict[str, Any]:
        results = self.snapshot()
        failed = [r for r in results if not r.ok]
        errors: Dict[str, int] = {}
        for r in failed:
            key = "%s: %s" % (r.kind, r.error.split(" ", 2)[0] if r.error.startswith("HTTP") else r.error)
            errors[key] = errors.get(key, 0) + 1
        by_kind = {k: sum(1 for r in results if r.kind == k) for k in self.mix}
        return {
            "total": len(results), "failed": len(failed),
            "failed_pct": round(100.0 * len(failed) / len(results), 2) if results else 0.0,
            "longest_gap": round(longest_gap(results, self.started_at, self.stopped_at), 2),
            "errors": errors, "by_kind": by_kind,
            "streams_ok": sum(1 for r in results if r.ok and r.kind.startswith("stream_")),
            "longest_stream": round(max([r.end - r.start for r in results if r.kind.startswith("stream_")]
                                        or [0.0]), 2),
        }


def _read_stream(resp: requests.Response) -> Tuple[bool, str, int]:
    """(ok, error, events): every event JSON, no error event, `data: [DONE]` last."""
    events, done = 0, False
    try:
        lines = list(_lines(resp))
    except requests.exceptions.RequestException as exc:  # the connection broke mid-stream
        return False, "truncated stream (%s)" % type(exc).__name__, 0
    for raw in lines:
        if not raw:
            continue
        line = raw.decode("utf-8", "replace")
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if done:
            return False, "data after [DONE]", events
        if payload == "[DONE]":
            done = True
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            return False, "bad event", events
        if isinstance(event, dict) and event.get("error"):
            return False, "error event", events
        events += 1
    if not done:
        return False, "truncated stream (no [DONE])", events
    return (True, "", events) if events else (False, "empty stream", events)


def _lines(resp: requests.Response) -> Iterator[bytes]:
    yield from resp.iter_lines()


def _check_body(kind: str, resp: requests.Response) -> Tuple[bool, str]:
    try:
        body = resp.json()
    except ValueError:
        return False, "not JSON"
    if kind == "generate":
        ok = isinstance(body, dict) and bool(str(body.get("text", "")).strip())
    else:
        ok = isinstance(body, dict) and bool(body.get("choices"))
    return (True, "") if ok else (False, "unexpected body")


def longest_gap(results: List[Result], start: Optional[float], stop: Optional[float]) -> float:
    """Longest time with no successful response ending, from the start of the load to its stop."""
    ends = sorted(r.end for r in results if r.ok)
    if start is None:
        return 0.0
    edges = [start] + ends + ([stop] if stop is not None else [])
    return max((b - a for a, b in zip(edges, edges[1:])), default=0.0)


def completions_over_time(results: List[Result], start: float, step: float = 1.0) -> List[Tuple[float, int, int]]:
    """(seconds since start, successes, failures) per `step` bucket, by end time."""
    if not results:
        return []
    last = max(r.end for r in results)
    buckets = int((last - start) / step) + 1
    out = [[i * step, 0, 0] for i in range(buckets)]
    for r in results:
        i = max(0, min(buckets - 1, int((r.end - start) / step)))
        out[i][1 if r.ok else 2] += 1
    return [tuple(row) for row in out]


class HealthSampler(threading.Thread):
    """Samples, every `interval` s: how many workers answer /health 200 themselves (capacity)
    and how many the router lists healthy. Loopback only, bounded by `max_seconds`."""

    def __init__(self, router_url: str, worker_urls: List[str], interval: float = 0.5,
                 max_seconds: float = 900.0) -> None:
        super().__init__(daemon=True)
        for url in [router_url] + worker_urls:
            _loopback_only(url)
        self.router_url = router_url.rstrip("/")
        self.worker_urls = [u.rstrip("/") for u in worker_urls]
        self.interval = interval
        self.max_seconds = max_seconds
        self.samples: List[Tuple[float, int, int]] = []  # (time, serving, router healthy)
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def run(self) -> None:
        session = requests.Session()
        session.trust_env = False
        started = time.time()
        while not self._halt.is_set() and time.time() - started < self.max_seconds:
            serving = 0
            for url in self.worker_urls:
                try:
                    serving += session.get(url + "/health", timeout=2).status_code == 200
                except requests.exceptions.RequestException:
                    pass
            try:
                body = session.get(self.router_url + "/workers", timeout=2).json()
                routed = sum(1 for w in body.get("workers", []) if w.get("is_healthy"))
            except (requests.exceptions.RequestException, ValueError, AttributeError):
                routed = -1
            self.samples.append((time.time(), serving, routed))
            self._halt.wait(self.interval)

    def min_serving(self) -> int:
        return min((s for _when, s, _routed in self.samples), default=0)
