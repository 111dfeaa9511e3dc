"""module_utils/_router: the router's two worker APIs, matching, the last-healthy-worker guard,
waits, check mode - against an in-memory router that answers like sglang-router 0.3.2
("workers" API) and 0.1.9 ("legacy" API) did on this machine."""
from __future__ import annotations

import json
import uuid
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _router
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

ROUTER = "http://127.0.0.1:30000"
W1, W2, W3 = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


class Resp:
    def __init__(self, status: int, body: Any = None) -> None:
        self.status_code = status
        self._body = body
        self.text = body if isinstance(body, str) else json.dumps(body) if body is not None else ""

    def json(self) -> Any:
        if isinstance(self._body, (dict, list)):
            return self._body
        raise ValueError("not json")


def as_send(session: Any) -> _router.Send:
    """A `send` for RouterClient over a fake session's .request (the _http.Response contract)."""
    def send(method: str, url: str, api_key: Optional[str], payload: Any, timeout: float,
             params: Optional[Dict[str, str]]) -> _http.Response:
        headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
        resp = session.request(method, url, headers=headers, timeout=timeout, params=params, json=payload)
        if resp.status_code is None:
            return _http.Response(None, None, resp.text, resp.text == "timed out")
        return _http.Response(resp.status_code, resp._body, "HTTP %d" % resp.status_code
                              if resp.status_code >= 400 else None)
    return send


class FakeRouter:
    """A session whose .request answers like the real routers. Queued changes (the workers
    API answers 202) take effect after `delay` further reads of the worker list."""

    def __init__(self, api: str = "workers", workers: Optional[List[Tuple[str, bool]]] = None,
                 delay: int = 1, key: Optional[str] = None) -> None:
        self.api = api
        self.workers: Dict[str, Dict[str, Any]] = {}
        for url, healthy in workers or []:
            self.workers[url] = {"id": str(uuid.uuid4()), "url": url, "is_healthy": healthy, "load": 0}
        self.delay = delay
        self.key = key
        self.pending: List[Tuple[int, str, Any]] = []  # (reads left, op, arg)
        self.calls: List[Tuple[str, str]] = []
        self.never_healthy: set = set()

    # queued changes land after some reads, like the router's background jobs
    def _tick(self) -> None:
        still = []
        for left, op, arg in self.pending:
            if left > 0:
                still.append((left - 1, op, arg))
            elif op == "delete":
                self.workers.pop(arg, None)
            elif op == "add":
                self.workers[arg["url"]] = arg
        self.pending = still

    def request(self, method: str, url: str, headers: Optional[Dict[str, str]] = None,
                timeout: float = 0, params: Optional[Dict[str, str]] = None, json: Any = None) -> Resp:
        parts = urlsplit(url)
        path = parts.path
        query = dict(params or {})
        query.update({k: v[0] for k, v in parse_qs(parts.query).items()})
        self.calls.append((method, path + ("?url=" + query["url"] if "url" in query else "")))
        if self.key and (headers or {}).get("Authorization") != "Bearer %s" % self.key:
            return Resp(401, {"error": "Unauthorized"})
        if path == "/readiness":
            healthy = sum(1 for w in self.workers.values() if w["is_healthy"])
            return Resp(200, {"status": "ready" if healthy else "not ready",
                              "healthy_workers": healthy, "total_workers": len(self.workers)})
        if self.api == "workers":
            return self._new_api(method, path, json)
        if self.api == "legacy":
            return self._legacy(method, path, query)
        return Resp(404, {"detail": "Not Found"})  # some other HTTP server

    def _new_api(self, method: str, path: str, body: Any) -> Resp:
        if path == "/workers" and method == "GET":
            self._tick()
            return Resp(200, {"workers": list(self.workers.values()), "total": len(self.workers)})
        if path == "/workers" and method == "POST":
            entry = {"id": str(uuid.uuid4()), "url": body["url"],
                     "is_healthy": body["url"] not in self.never_healthy, "load": 0}
            if body["url"] not in self.never_healthy:
                self.pending.append((self.delay, "add", entry))
            return Resp(202, {"status": "accepted", "worker_id": entry["id"]})
        if path.startswith("/workers/"):
            wid = path.rsplit("/", 1)[1]
            try:
                uuid.UUID(wid)
            except ValueError:
                return Resp(400, {"error": "Invalid worker_id %r (expected UUID)" % wid})
            match = [u for u, w in self.workers.items() if w["id"] == wid]
            if method == "GET":
                return Resp(200, {"id": wid, "job_status": {"status": "processing"}})
            if not match:
                return Resp(404, {"error": "Worker %s not found" % wid, "code": "WORKER_NOT_FOUND"})
            self.pending.append((self.delay, "delete", match[0]))
            return Resp(202, {"status": "accepted", "worker_id": wid})
        return Resp(404, "")

    def _legacy(self, method: str, path: str, query: Dict[str, str]) -> Resp:
        if path == "/list_workers":
            return Resp(200, {"urls": list(self.workers)})
        if path == "/remove_worker" and method == "POST":
            self.workers.pop(query["url"], None)
            return Resp(200, "Successfully removed worker: %s" % query["url"])
        if path == "/add_worker" and method == "POST":
            if query["url"] in self.workers:
                return Resp(400, "Worker %s already exists" % query["url"])
            self.workers[query["url"]] = {"id": None, "url": query["url"], "is_healthy": True, "load": 0}
            return Resp(200, "Successfully added worker: %s" % query["url"])
        return Resp(404, "")

    def writes(self) -> List[Tuple[str, str]]:
        return [c for c in self.calls if c[0] in ("POST", "DELETE")]


def client(fake: FakeRouter, api_key: Optional[str] = None) -> _router.RouterClient:
    return _router.RouterClient(ROUTER, api_key=api_key, send=as_send(fake))


def opts(**kw: Any) -> _router.Options:
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("timeout", 5)
    return _router.Options(**kw)


# -- URLs and matching -----------------------------------------------------------------------------
@pytest.mark.parametrize("given, normal", [
    ("http://GPU-Node-3:8000/", "http://gpu-node-3:8000"),
    (" http://10.0.0.1:8000 ", "http://10.0.0.1:8000"),
    ("https://h.example/v1/", "https://h.example/v1"),
    ("http://[::1]:30000", "http://[::1]:30000"),
])
def test_normalize_url(given: str, normal: str) -> None:
    assert _router.normalize_url(given) == normal


@pytest.mark.parametrize("bad", ["gpu-node-3:8000", "ftp://h:1", "", "http://h:99999"])
def test_normalize_url_refuses_what_is_not_a_url(bad: str) -> None:
    with pytest.raises(SglangError) as err:
        _router.normalize_url(bad)
    assert err.value.details["reason"] == "invalid_argument"


def test_find_matches_a_host_name_that_resolves_to_the_listed_address() -> None:
    workers = [_router.Worker(url=W1), _router.Worker(url=W2)]

    def resolve(host: str, port: int) -> List[str]:
        return {"gpu-2": ["10.0.0.2"], "10.0.0.1": ["10.0.0.1"], "10.0.0.2": ["10.0.0.2"]}.get(host, [])

    assert _router.find(workers, "http://gpu-2:8000", resolve) is workers[1]
    assert _router.find(workers, "http://gpu-2:9000", resolve) is None  # another port
    assert _router.find(workers, "https://gpu-2:8000", resolve) is None  # another scheme
    assert _router.find(workers, "http://gpu-2:8000", None) is None


# -- API detection and transport errors ------------------------------------------------------------
def test_detects_the_workers_api_and_the_legacy_api() -> None:
    assert client(FakeRouter("workers")).api == "workers"
    assert client(FakeRouter("legacy")).api == "legacy"


def test_something_else_on_the_port_is_refused_as_not_a_router() -> None:
    fake = FakeRouter("none")
    with pytest.raises(SglangError) as err:
        client(fake).workers()
    assert err.value.details["reason"] == "router_refused"
    assert "does not look like an SGLang router" in err.value.msg


def test_wrong_api_key_is_router_refused_with_a_hint() -> None:
    fake = FakeRouter("workers", [(W1, True)], key="k-good-123")
    with pytest.raises(SglangError) as err:
        client(fake, api_key="k-bad-456").workers()
    assert err.value.details["reason"] == "router_refused" and "router_api_key" in err.value.msg
    assert "k-good-123" not in str(err.value.details) + err.value.msg
    assert "k-bad-456" not in str(err.value.details) + err.value.msg
    assert [w.url for w in client(fake, api_key="k-good-123").workers()] == [W1]


def test_unreachable_router() -> None:
    class Down:
        def request(self, *a: Any, **kw: Any) -> Resp:
            return Resp(None, "[Errno 111] Connection refused")  # type: ignore[arg-type]

    with pytest.raises(SglangError) as err:
        _router.ensure(_router.RouterClient(ROUTER, send=as_send(Down())), opts(worker_url=W1, state="absent"))
    assert err.value.details["reason"] == "router_unreachable" and "Connection refused" in err.value.msg


def test_a_redirect_is_refused_never_followed() -> None:
    class Moved:
        calls: List[str] = []

        def request(self, method: str, url: str, **kw: Any) -> Resp:
            self.calls.append(url)
            return Resp(307, "")

    moved = Moved()
    with pytest.raises(SglangError) as err:
        client(moved, api_key="k-123").workers()  # type: ignore[arg-type]
    assert err.value.details["reason"] == "router_refused" and "redirect" in err.value.msg
    assert moved.calls == [ROUTER + "/workers"]


def test_the_router_is_asked_through_the_one_http_client(monkeypatch) -> None:
    seen: List[Tuple[str, str, Any]] = []

    def fetch(url: str, api_key: Any = None, method: str = "GET", payload: Any = None, timeout: float = 5.0,
              max_bytes: int = _http.MAX_BODY, params: Any = None) -> _http.Response:
        seen.append((method, url, params))
        return _http.Response(200, {"workers": []})

    monkeypatch.setattr(_http, "fetch", fetch)
    assert _router.RouterClient(ROUTER).workers() == []
    assert seen == [("GET", ROUTER + "/workers", None), ("GET", ROUTER + "/workers", None)]


# -- absent -----------------------------------------------------------------------------------------
def test_absent_deletes_by_uuid_and_waits_until_unlisted() -> None:
    fake = FakeRouter("workers", [(W1, True), (W2, True)], delay=3)
    wid = fake.workers[W1]["id"]
    res = _router.ensure(client(fake), opts(worker_url=W1, state="absent"))
    assert res["changed"] and res["action"] == "remove"
    assert fake.writes() == [("DELETE", "/workers/%s" % wid)]  # the UUID, never the URL
    assert [w["url"] for w in res["workers"]] == [W2] and res["worker"] is None


def test_absent_is_idempotent_for_an_unlisted_worker() -> None:
    fake = FakeRouter("workers", [(W2, True)])
    res = _router.ensure(client(fake), opts(worker_url=W1, state="absent"))
    assert not res["changed"] and fake.writes() == []


def test_absent_never_takes_out_the_last_healthy_worker() -> None:
    fake = FakeRouter("workers", [(W1, True), (W2, False)])
    with pytest.raises(SglangError) as err:
        _router.ensure(client(fake), opts(worker_url=W1, state="absent"))
    assert err.value.details["reason"] == "last_healthy_worker"
    assert "Nothing was changed" in err.value.msg
    assert fake.writes() == []


def test_min_healthy_zero_allows_the_last_one_out() -> None:
    fake = FakeRouter("workers", [(W1, True)])
    res = _router.ensure(client(fake), opts(worker_url=W1, state="absent", min_healthy=0))
    assert res["changed"] and res["total_workers"] == 0


def test_an_unhealthy_worker_may_leave_while_one_healthy_other_serves() -> None:
    fake = FakeRouter("workers", [(W1, False), (W2, True)])
    assert _router.ensure(client(fake), opts(worker_url=W1, state="absent"))["changed"]


def test_min_healthy_two_needs_two_healthy_others() -> None:
    fake = FakeRouter("workers", [(W1, True), (W2, True), (W3, False)])
    with pytest.raises(SglangError) as err:
        _router.ensure(client(fake), opts(worker_url=W1, state="absent", min_healthy=2))
    assert err.value.details["healthy_others"] == 1


def test_min_healthy_timeout_waits_for_another_worker_to_come_back() -> None:
    fake = FakeRouter("workers", [(W1, True), (W2, False)])
    reads = {"n": 0}
    original = fake._tick

    def heal() -> None:
        original()
        reads["n"] += 1
        if reads["n"] == 4:
            fake.workers[W2]["is_healthy"] = True

    fake._tick = heal  # type: ignore[method-assign]
    res = _router.ensure(client(fake), opts(worker_url=W1, state="absent", min_healthy_timeout=5))
    assert res["changed"] and reads["n"] >= 4


def test_absent_times_out_when_the_router_keeps_listing_it() -> None:
    fake = FakeRouter("workers", [(W1, True), (W2, True)], delay=10 ** 6)
    with pytest.raises(SglangError) as err:
        _router.ensure(client(fake), opts(worker_url=W1, state="absent", timeout=0.3))
    assert err.value.details["reason"] == "timeout" and "still lists" in err.value.msg


def test_check_mode_changes_nothing_and_shows_the_diff() -> None:
    fake = FakeRouter("workers", [(W1, True), (W2, True)])
    res = _router.ensure(client(fake), opts(worker_url=W1, state="absent", check_mode=True))
    assert res["changed"] and fake.writes() == []
    assert res["diff"]["before"] == "%s\n%s\n" % (W1, W2) and res["diff"]["after"] == "%s\n" % W2
    res = _router.ensure(client(fake), opts(worker_url=W3, state="present", check_mode=True))
    assert res["changed"] and fake.writes() == [] and W3 in res["diff"]["after"]


def test_check_mode_still_refuses_the_last_healthy_worker() -> None:
    fake = FakeRouter("workers", [(W1, True)])
    with pytest.raises(SglangError) as err:
        _router.ensure(client(fake), opts(worker_url=W1, state="absent", check_mode=True,
                                          min_healthy_timeout=60))
    assert err.value.details["reason"] == "last_healthy_worker"


# -- present ----------------------------------------------------------------------------------------
def test_present_adds_and_waits_until_listed_healthy() -> None:
    fake = FakeRouter("workers", [(W2, True)], delay=3)
    res = _router.ensure(client(fake), opts(worker_url=W1, state="present"))
    assert res["changed"] and fake.writes() == [("POST", "/workers")]
    assert res["worker"]["url"] == W1 and res["worker"]["is_healthy"] is True


def test_present_is_idempotent() -> None:
    fake = FakeRouter("workers", [(W1, True)])
    res = _router.ensure(client(fake), opts(worker_url="http://10.0.0.1:8000/", state="present"))
    assert not res["changed"] and fake.writes() == []


def test_present_times_out_with_the_routers_job_status() -> None:
    fake = FakeRouter("workers", [(W2, True)])
    fake.never_healthy.add(W1)
    with pytest.raises(SglangError) as err:
        _router.ensure(client(fake), opts(worker_url=W1, state="present", timeout=0.3))
    assert err.value.details["reason"] == "timeout"
    assert err.value.details["job"] == {"status": "processing"}


def test_listed_reads_only() -> None:
    fake = FakeRouter("workers", [(W1, True), (W2, False)])
    res = _router.ensure(client(fake), opts(worker_url=W2))
    assert not res["changed"] and fake.writes() == []
    assert res["worker"]["is_healthy"] is False and res["healthy_workers"] == 1


def test_state_absent_needs_a_worker_url() -> None:
    with pytest.raises(SglangError) as err:
        _router.ensure(client(FakeRouter()), opts(worker_url=None, state="absent"))
    assert err.value.details["reason"] == "invalid_argument"


# -- the legacy API ---------------------------------------------------------------------------------
def test_legacy_remove_and_add_by_url() -> None:
    fake = FakeRouter("legacy", [(W1, True), (W2, True)])
    res = _router.ensure(client(fake), opts(worker_url=W1, state="absent"))
    assert res["changed"] and res["api"] == "legacy"
    assert fake.writes() == [("POST", "/remove_worker?url=%s" % W1)]
    res = _router.ensure(client(fake), opts(worker_url=W1, state="present"))
    assert res["changed"] and fake.writes()[-1] == ("POST", "/add_worker?url=%s" % W1)
    assert res["worker"]["is_healthy"] is None  # the legacy API says nothing about health
    res = _router.ensure(client(fake), opts(worker_url=W1, state="present"))
    assert not res["changed"]


def test_legacy_capacity_uses_the_routers_healthy_count() -> None:
    fake = FakeRouter("legacy", [(W1, True), (W2, False)])  # listed, but the router knows W2 is down
    with pytest.raises(SglangError) as err:
        _router.ensure(client(fake), opts(worker_url=W1, state="absent"))
    assert err.value.details["reason"] == "last_healthy_worker"
    assert fake.writes() == []


# -- the module on a host without requests ------------------------------------------------------------
def test_module_names_the_missing_library(tmp_path) -> None:
    from helpers.fixtures import COLLECTIONS, run_module

    stub = tmp_path / "stub" / "requests"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('No module named requests')\n")
    out = run_module("sglang_router", {"router_url": ROUTER},
                     env={"PYTHONPATH": "%s:%s" % (tmp_path / "stub", COLLECTIONS)})
    assert out["failed"] and out["reason"] == "missing_library", out
    assert "requests" in out["msg"] and "Traceback" not in out["msg"]
