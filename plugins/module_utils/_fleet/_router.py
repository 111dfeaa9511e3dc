"""PRIVATE to llmops.sglang. The SGLang router's worker API over HTTP (the one client, _http), both generations.

Checked against the real routers (python -m sglang_router.launch_router, emulator workers):

- sglang-router 0.3.2 ("workers" API): GET /workers -> {workers: [{id (UUID), url, is_healthy,
  load, ...}], total, stats}; POST /workers {"url": ...} -> 202 {worker_id} (queued: the worker
  appears once the router has checked it); DELETE /workers/{id} -> 202 (queued; a URL instead
  of the UUID is a 400, an unknown UUID a 404); GET /workers/{id} also shows a queued addition
  with its job_status. A removed worker's in-flight requests (streams too) run to their end.
- sglang-router 0.1.x ("legacy" API): GET /list_workers -> {urls: [...]}; POST
  /add_worker?url= answers 200 only once the worker is healthy (400 when it is already there);
  POST /remove_worker?url= answers 200 even for a URL it does not know. No per-worker health:
  a listed worker is one the router found healthy when it was added.
- Both: GET /readiness -> {status, healthy_workers, total_workers}.

HTTP goes through the collection's one client (_core/_http): no proxy from the environment, a
total deadline and a bounded body for every request, and no redirect followed - the api key goes
only to the router URL the operator named (a 3xx is the router refusing, never a new address).
A host without requests gets Ansible's missing_required_lib message from the module.
"""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple
from urllib.parse import quote, urlsplit

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

# Sends one request: (method, url, api_key, json payload, timeout, query params) -> answer.
Send = Callable[[str, str, Optional[str], Any, float, Optional[Mapping[str, str]]], _http.Response]

API_WORKERS = "workers"
API_LEGACY = "legacy"
API_CHOICES = ("auto", API_WORKERS, API_LEGACY)


@dataclass
class Worker:
    """One worker as the router lists it. `healthy` is None where the API does not say."""

    url: str
    id: Optional[str] = None
    healthy: Optional[bool] = None
    load: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        return {"url": self.url, "id": self.id, "is_healthy": self.healthy, "load": self.load}


def normalize_url(url: str) -> str:
    """scheme://host:port[/path] in lower case, no trailing slash: how URLs are compared."""
    text = (url or "").strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SglangError("%r is not an http(s)://host:port URL" % url, reason="invalid_argument")
    try:
        port = parts.port
    except ValueError:
        raise SglangError("%r has an invalid port" % url, reason="invalid_argument") from None
    host = parts.hostname.lower()
    if ":" in host:
        host = "[%s]" % host
    netloc = host if port is None else "%s:%d" % (host, port)
    return "%s://%s%s" % (parts.scheme, netloc, parts.path.rstrip("/"))


def _endpoints(url: str, resolve: Callable[[str, int], List[str]]) -> Set[Tuple[str, str, int]]:
    """(scheme, address, port) for every address the URL's host resolves to."""
    parts = urlsplit(normalize_url(url))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {(parts.scheme, addr, port) for addr in resolve(parts.hostname or "", port)}


def _resolve(host: str, port: int) -> List[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})
    except (OSError, UnicodeError):
        return []


def find(workers: List[Worker], url: str,
         resolve: Optional[Callable[[str, int], List[str]]] = _resolve) -> Optional[Worker]:
    """The listed worker that is `url`: the same normalised URL, else (with `resolve`) the same
    scheme and port on a host name that resolves to the same address (a router that lists
    http://10.0.0.5:8000 for an inventory's http://gpu-node-05:8000)."""
    want = normalize_url(url)
    for worker in workers:
        try:
            if normalize_url(worker.url) == want:
                return worker
        except SglangError:
            continue
    if resolve is None:
        return None
    mine = _endpoints(url, resolve)
    for worker in workers:
        try:
            if mine & _endpoints(worker.url, resolve):
                return worker
        except SglangError:
            continue
    return None


def healthy_others(workers: List[Worker], url: str) -> int:
    """Workers other than `url` that serve: healthy, or listed where the API has no health."""
    target = find(workers, url)
    return sum(1 for w in workers if w is not target and w.healthy is not False)


def _excerpt(resp: _http.Response) -> str:
    body = resp.body
    text = body if isinstance(body, str) else json.dumps(body) if body is not None else ""
    return text.strip().replace("\n", " ")[:300]


def _send(method: str, url: str, api_key: Optional[str], payload: Any, timeout: float,
          params: Optional[Mapping[str, str]]) -> _http.Response:
    return _http.fetch(url, api_key, method, payload, timeout, params=params)


class RouterClient:
    """One router. Every failure is an SglangError with a reason code."""

    def __init__(self, url: str, api_key: Optional[str] = None, timeout: float = 10.0,
                 api: str = "auto", send: Optional[Send] = None) -> None:
        if send is None and not _http.HAS_REQUESTS:
            raise SglangError("the Python library requests is needed on the host that talks to "
                              "the router", reason="missing_library")
        self.url = normalize_url(url)
        self.timeout = timeout
        self.send: Send = send or _send
        self._api_key = api_key
        if api not in API_CHOICES:
            raise SglangError("api must be one of %s" % ", ".join(API_CHOICES), reason="invalid_argument")
        self._api: Optional[str] = None if api == "auto" else api

    # -- transport ------------------------------------------------------------------------------
    def _call(self, method: str, path: str, timeout: Optional[float] = None, payload: Any = None,
              params: Optional[Mapping[str, str]] = None) -> _http.Response:
        """One request to the router URL as named (never a redirect's target: a 3xx is refused)."""
        wait = timeout or self.timeout
        resp = self.send(method, self.url + path, self._api_key, payload, wait, params)
        if resp.status is None and resp.timed_out:
            raise SglangError("the router at %s did not answer %s %s within %.0f s"
                              % (self.url, method, path, wait), reason="router_unreachable")
        if resp.status is None:
            raise SglangError("cannot reach the router at %s: %s" % (self.url, (resp.error or "no answer")[:300]),
                              reason="router_unreachable", error=(resp.error or "")[:300])
        if 300 <= resp.status < 400:
            raise SglangError("the router at %s answered %s %s with a redirect (HTTP %d): not followed, the "
                              "api key goes only to the router URL given" % (self.url, method, path, resp.status),
                              reason="router_refused", status=resp.status)
        return resp

    def _refused(self, resp: _http.Response, what: str) -> SglangError:
        if resp.status in (401, 403):
            return SglangError("the router at %s refused %s: HTTP %d (router_api_key missing or wrong: the router's key, not a server's api_key)"
                               % (self.url, what, resp.status), reason="router_refused",
                               status=resp.status)
        return SglangError("the router at %s refused %s: HTTP %s %s"
                           % (self.url, what, resp.status, _excerpt(resp)),
                           reason="router_refused", status=resp.status, body=_excerpt(resp))

    @staticmethod
    def _json(resp: _http.Response) -> Any:
        return resp.body if isinstance(resp.body, (dict, list)) else None

    # -- API detection ------------------------------------------------------------------------
    @property
    def api(self) -> str:
        if self._api is None:
            self._api = self._detect()
        return self._api

    def _detect(self) -> str:
        resp = self._call("GET", "/workers")
        body = self._json(resp)
        if resp.status == 200 and isinstance(body, dict) and isinstance(body.get("workers"), list):
            return API_WORKERS
        if resp.status in (401, 403):
            raise self._refused(resp, "GET /workers")
        legacy = self._call("GET", "/list_workers")
        body = self._json(legacy)
        if legacy.status == 200 and isinstance(body, dict) and isinstance(body.get("urls"), list):
            return API_LEGACY
        if legacy.status in (401, 403):
            raise self._refused(legacy, "GET /list_workers")
        raise SglangError("%s does not look like an SGLang router: GET /workers answered HTTP %d and "
                          "GET /list_workers HTTP %d" % (self.url, resp.status, legacy.status),
                          reason="router_refused", status=legacy.status)

    # -- reads ------------------------------------------------------------------------------------
    def workers(self) -> List[Worker]:
        if self.api == API_WORKERS:
            resp = self._call("GET", "/workers")
            body = self._json(resp)
            if resp.status != 200 or not isinstance(body, dict):
                raise self._refused(resp, "GET /workers")
            return [Worker(url=str(w.get("url", "")), id=w.get("id"), healthy=w.get("is_healthy"),
                           load=w.get("load"), raw=w)
                    for w in body.get("workers") or [] if isinstance(w, dict)]
        resp = self._call("GET", "/list_workers")
        body = self._json(resp)
        if resp.status != 200 or not isinstance(body, dict):
            raise self._refused(resp, "GET /list_workers")
        return [Worker(url=str(u)) for u in body.get("urls") or []]

    def readiness(self) -> Optional[Dict[str, Any]]:
        """{status, healthy_workers, total_workers}, or None where the router has no /readiness."""
        resp = self._call("GET", "/readiness")
        body = self._json(resp)
        return body if isinstance(body, dict) and "healthy_workers" in body else None

    def job(self, worker_id: str) -> Optional[Dict[str, Any]]:
        """GET /workers/{id}: a queued addition's job_status (workers API only)."""
        resp = self._call("GET", "/workers/%s" % quote(worker_id, safe=""))
        body = self._json(resp)
        return body if resp.status == 200 and isinstance(body, dict) else None

    # -- writes -----------------------------------------------------------------------------------
    def remove(self, worker: Worker) -> Dict[str, Any]:
        if self.api == API_WORKERS:
            if not worker.id:
                raise SglangError("the router lists %s without an id: cannot remove it" % worker.url,
                                  reason="router_refused")
            resp = self._call("DELETE", "/workers/%s" % quote(worker.id, safe=""))
            if resp.status == 404:
                return {"status": 404, "note": "already gone"}
        else:
            resp = self._call("POST", "/remove_worker", params={"url": worker.url})
        if resp.status not in (200, 202, 204):
            raise self._refused(resp, "the removal of %s" % worker.url)
        return {"status": resp.status, "body": self._json(resp) or _excerpt(resp)}

    def add(self, url: str, timeout: float) -> Dict[str, Any]:
        """Ask the router to add `url`. The legacy API answers only once the worker is healthy
        (so it gets the whole `timeout`); the workers API queues it (202)."""
        if self.api == API_WORKERS:
            resp = self._call("POST", "/workers", payload={"url": url})
        else:
            resp = self._call("POST", "/add_worker", params={"url": url}, timeout=max(timeout, self.timeout))
            if resp.status == 400 and "already exists" in _excerpt(resp):
                return {"status": 400, "note": "already listed"}
        if resp.status not in (200, 201, 202):
            raise self._refused(resp, "the addition of %s" % url)
        return {"status": resp.status, "body": self._json(resp) or _excerpt(resp)}


def poll(read: Callable[[], Any], done: Callable[[Any], bool], timeout: float, interval: float,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Any:
    """Call `read` until `done(value)` or the deadline; returns the last value either way."""
    deadline = clock() + max(0.0, timeout)
    value = read()
    while not done(value) and clock() < deadline:
        sleep(max(0.01, min(interval, deadline - clock())))
        value = read()
    return value


# -- the desired state of one worker in the router (the module's engine) ------------------------
STATES = ("present", "absent", "listed")


@dataclass
class Options:
    """What the router module is asked to make true, and how long it may wait."""

    worker_url: Optional[str]
    state: str = "listed"
    wait: bool = True
    timeout: float = 600.0
    min_healthy: int = 1
    min_healthy_timeout: float = 0.0
    poll_interval: float = 0.5
    check_mode: bool = False


def validate(opts: Options) -> None:
    if opts.state not in STATES:
        raise SglangError("state must be one of %s" % ", ".join(STATES), reason="invalid_argument")
    if opts.state != "listed" and not opts.worker_url:
        raise SglangError("worker_url is required with state=%s" % opts.state, reason="invalid_argument")
    if opts.worker_url:
        normalize_url(opts.worker_url)
    if opts.timeout <= 0 or opts.min_healthy_timeout < 0 or opts.min_healthy < 0:
        raise SglangError("timeout must be > 0, min_healthy and min_healthy_timeout >= 0",
                          reason="invalid_argument")
    if not 0.05 <= opts.poll_interval <= 60:
        raise SglangError("poll_interval must be between 0.05 and 60 s", reason="invalid_argument")


def _worker_url(opts: Options) -> str:
    """The worker URL of a present/absent change (validate() already refused one without)."""
    if not opts.worker_url:
        raise SglangError("worker_url is required with state=%s" % opts.state, reason="invalid_argument")
    return opts.worker_url


def _serving_others(client: RouterClient, workers: List[Worker], url: str) -> int:
    """Workers that keep serving once `url` is out. The legacy API has no per-worker health:
    there the router's own healthy count minus this worker (as if it were healthy) caps it."""
    others = healthy_others(workers, url)
    if client.api == API_LEGACY:
        ready = client.readiness()
        if ready is not None:
            others = min(others, max(0, int(ready.get("healthy_workers") or 0) - 1))
    return others


def _urls(workers: List[Worker]) -> str:
    return "".join("%s\n" % w.url for w in sorted(workers, key=lambda w: w.url))


def _result(client: RouterClient, opts: Options, changed: bool, action: str, msg: str,
            before: List[Worker], after: List[Worker], started: float,
            after_text: Optional[str] = None) -> Dict[str, Any]:
    worker = find(after, opts.worker_url) if opts.worker_url else None
    return {
        "changed": changed, "action": action, "msg": msg, "api": client.api,
        "router_url": client.url, "worker_url": opts.worker_url,
        "worker": worker.as_dict() if worker else None,
        "workers": [w.as_dict() for w in after],
        "healthy_workers": sum(1 for w in after if w.healthy is not False),
        "total_workers": len(after),
        "elapsed": round(time.monotonic() - started, 3),
        "diff": {"before": _urls(before), "after": after_text if after_text is not None else _urls(after),
                 "before_header": "%s workers" % client.url, "after_header": "%s workers" % client.url},
    }


def _ensure_capacity(client: RouterClient, opts: Options, workers: List[Worker]) -> List[Worker]:
    """Never take out the last healthy worker: `min_healthy` others must keep serving. Waits up
    to min_healthy_timeout for them (a host of the previous batch coming back), then refuses."""
    url = _worker_url(opts)

    def enough(ws: List[Worker]) -> bool:
        return _serving_others(client, ws, url) >= opts.min_healthy

    if not enough(workers) and opts.min_healthy_timeout > 0 and not opts.check_mode:
        workers = poll(client.workers, enough, opts.min_healthy_timeout, opts.poll_interval)
    if not enough(workers):
        others = _serving_others(client, workers, url)
        raise SglangError(
            "refusing to take %s out of the router %s: only %d other healthy worker(s) would serve "
            "(min_healthy=%d)%s. Nothing was changed." % (
                url, client.url, others, opts.min_healthy,
                "" if opts.min_healthy_timeout <= 0 else
                " after waiting %.0f s (min_healthy_timeout)" % opts.min_healthy_timeout),
            reason="last_healthy_worker", healthy_others=others,
            workers=[w.as_dict() for w in workers])
    return workers


def _absent(client: RouterClient, opts: Options, before: List[Worker], started: float) -> Dict[str, Any]:
    url = _worker_url(opts)
    target = find(before, url)
    if target is None:
        return _result(client, opts, False, "none", "%s is not in the router" % url, before, before, started)
    before = _ensure_capacity(client, opts, before)
    target = find(before, url) or target
    if opts.check_mode:
        rest = [w for w in before if w is not target]
        return _result(client, opts, True, "remove", "%s would be taken out of the router" % url,
                       before, before, started, after_text=_urls(rest))
    client.remove(target)
    after = client.workers()
    if opts.wait:
        after = poll(client.workers, lambda ws: find(ws, url) is None, opts.timeout, opts.poll_interval)
        if find(after, url) is not None:
            raise SglangError("the router %s still lists %s %.0f s after its removal was accepted"
                              % (client.url, url, opts.timeout), reason="timeout",
                              workers=[w.as_dict() for w in after])
    return _result(client, opts, True, "remove", "%s taken out of the router" % url, before, after, started)


def _listed_healthy(api: str, worker: Optional[Worker]) -> bool:
    return worker is not None and (worker.healthy is True or (api == API_LEGACY and worker.healthy is None))


def _present(client: RouterClient, opts: Options, before: List[Worker], started: float) -> Dict[str, Any]:
    url = _worker_url(opts)
    target = find(before, url)
    changed, answer = False, {}
    if target is None:
        if opts.check_mode:
            return _result(client, opts, True, "add", "%s would be added to the router" % url,
                           before, before, started, after_text=_urls(before + [Worker(url=url)]))
        answer = client.add(url, opts.timeout)
        changed = True
    after = client.workers()
    if opts.wait and not opts.check_mode:
        after = poll(client.workers, lambda ws: _listed_healthy(client.api, find(ws, url)),
                     opts.timeout, opts.poll_interval)
        worker = find(after, url)
        if not _listed_healthy(client.api, worker):
            body = answer.get("body") if isinstance(answer.get("body"), dict) else {}
            job = client.job(body["worker_id"]) if client.api == API_WORKERS and body.get("worker_id") else None
            state = "listed but not healthy" if worker else "not listed"
            raise SglangError("%s is %s in the router %s after %.0f s%s" % (
                url, state, client.url, opts.timeout,
                (": router job %s" % (job.get("job_status") or {}).get("status")) if job else ""),
                reason="timeout", worker=worker.as_dict() if worker else None,
                job=(job or {}).get("job_status"), workers=[w.as_dict() for w in after])
    msg = "%s added to the router" % url if changed else "%s is in the router" % url
    return _result(client, opts, changed, "add" if changed else "none", msg, before, after, started)


def ensure(client: RouterClient, opts: Options) -> Dict[str, Any]:
    """List, add or remove one worker; the result carries the router's workers and a diff."""
    validate(opts)
    started = time.monotonic()
    before = client.workers()
    if opts.state == "absent":
        return _absent(client, opts, before, started)
    if opts.state == "present":
        return _present(client, opts, before, started)
    return _result(client, opts, False, "none", "%d workers in the router" % len(before), before, before, started)
