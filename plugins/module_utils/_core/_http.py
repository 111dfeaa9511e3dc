"""The one HTTP client of the collection (servers on this host, the router), through requests.

One short-lived Session per request with `trust_env=False`: no proxy (nor netrc, nor CA bundle)
from the environment reaches a loopback server. Redirects are not followed, so an api key sent
to this host never travels on. `requests` is imported on the first request, guarded: without it
every request is an answer-less Response naming the missing library (the modules fail earlier through _depsearch.require;
the probe reports what it could not read).

Every request ends by its `timeout`, counted from its start, and reads at most `max_bytes` of
body. requests' own timeout is per socket operation: a listener that trickles a byte a second
would hold a read forever. So the sockets a request opens are named as urllib3 creates them, and
a timer shuts them down at the deadline (from its thread: that wakes the read blocked in this one).
"""
from __future__ import annotations

import importlib.util
import json
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlencode

# Looked up, not imported: importing requests costs about 0.1 s (more where nothing is
# precompiled, as in a module's AnsiballZ run), and most module runs send no request.
HAS_REQUESTS = importlib.util.find_spec("requests") is not None
_LIB: Dict[str, Any] = {"requests": None, "error": None if HAS_REQUESTS else "No module named 'requests'",
                        "pools": None}
# The most a body may hold: /server_info, /metrics and a generate's answer are far below it.
MAX_BODY = 16 * 1024 * 1024
_CHUNK = 64 * 1024
_CURRENT = threading.local()  # the _Deadline of the request this thread is sending


def _requests() -> Any:
    """The requests module, imported on first use; None when it does not import."""
    if _LIB["requests"] is None and _LIB["error"] is None:
        try:
            import requests  # pylint: disable=import-outside-toplevel

            _LIB["pools"] = _pool_classes()
            _LIB["requests"] = requests
        except Exception as exc:  # a broken install raises anything: the request names it, never a traceback
            _LIB["error"] = "%s: %s" % (type(exc).__name__, exc)
    return _LIB["requests"]


class _Deadline:
    """The sockets of one request, shut down when its time is up."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sockets: List[socket.socket] = []
        self.expired = False

    def watch(self, sock: socket.socket) -> None:
        # A duplicate of the descriptor: TLS takes the original over, shutdown() acts on the socket.
        dup = sock.dup()
        with self.lock:
            self.sockets.append(dup)
            if self.expired:
                _shut(dup)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            for sock in self.sockets:
                _shut(sock)

    def close(self) -> None:
        with self.lock:
            for sock in self.sockets:
                sock.close()
            self.sockets = []


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _pool_classes() -> Dict[str, Any]:
    """urllib3's pools whose connections tell the current request's _Deadline each new socket."""
    from urllib3 import connection, connectionpool  # pylint: disable=import-outside-toplevel

    class Watched:
        def _new_conn(self) -> Any:
            sock = super()._new_conn()  # type: ignore[misc]
            deadline = getattr(_CURRENT, "deadline", None)
            if deadline is not None:
                deadline.watch(sock)
            return sock

    class HTTPConnection(Watched, connection.HTTPConnection):
        pass

    class HTTPSConnection(Watched, connection.HTTPSConnection):
        pass

    class HTTPPool(connectionpool.HTTPConnectionPool):
        ConnectionCls = HTTPConnection

    class HTTPSPool(connectionpool.HTTPSConnectionPool):
        ConnectionCls = HTTPSConnection

    return {"http": HTTPPool, "https": HTTPSPool}


@dataclass
class Response:
    """An HTTP answer: status None (and the error text) when there was none. `timed_out`: the
    request ran out of its time (no answer, or not all of it, within `timeout`)."""
    status: Optional[int]
    body: Any
    error: Optional[str] = None
    timed_out: bool = False


def url_host(host: str) -> str:
    """A host for a URL to reach a server bound to `host` (wildcards -> loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    if ":" in host and not host.startswith("["):
        return "[%s]" % host
    return host


def request(host: str, port: int, path: str, api_key: Optional[str] = None, method: str = "GET",
            payload: Optional[Dict[str, Any]] = None, timeout: float = 5.0, max_bytes: int = MAX_BODY) -> Response:
    """A request to a server on this host (see fetch)."""
    return fetch("http://%s:%d%s" % (url_host(host), port, path), api_key, method, payload, timeout, max_bytes)


def fetch(url: str, api_key: Optional[str] = None, method: str = "GET", payload: Optional[Any] = None,
          timeout: float = 5.0, max_bytes: int = MAX_BODY, params: Optional[Mapping[str, str]] = None) -> Response:
    """Never raises for network trouble: status None + error text instead. A 4xx/5xx is an
    answer: its status, its body and the error `HTTP <status>`. Done within `timeout` seconds
    in all (connect, headers, body); a body over `max_bytes` is no answer."""
    if params:
        url += ("&" if "?" in url else "?") + urlencode(params)
    requests = _requests()
    if requests is None:
        return Response(None, None, "%s: not asked: the Python library requests is not installed for %s (%s)"
                        % (url, sys.executable, _LIB["error"]))
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    data = json.dumps(payload).encode() if payload is not None else None
    session = _session(requests)
    deadline = _Deadline()
    timer = threading.Timer(max(0.0, timeout), deadline.expire)
    timer.daemon = True
    _CURRENT.deadline = deadline
    timer.start()
    try:
        resp = session.request(method, url, data=data, headers=headers, timeout=timeout,
                               allow_redirects=False, stream=True)
        status = resp.status_code
        raw, problem = _body(resp, max_bytes)
    except Exception as exc:  # requests/urllib3 errors, OSError, bad URLs: all "no answer"
        timed_out = deadline.expired or _is_timeout(exc)
        return Response(None, None, "%s: %s" % (url, _reason(exc, timeout, deadline.expired)), timed_out)
    finally:
        timer.cancel()
        _CURRENT.deadline = None
        session.close()
        deadline.close()
    if problem is not None:
        return Response(None, None, "%s: %s" % (url, problem))
    return Response(status, _decode(raw), "HTTP %d" % status if status >= 400 else None)


def _session(requests: Any) -> Any:
    session = requests.Session()
    session.trust_env = False
    adapter = requests.adapters.HTTPAdapter(max_retries=0)
    adapter.poolmanager.pool_classes_by_scheme = dict(_LIB["pools"])
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _body(resp: Any, max_bytes: int) -> Tuple[bytes, Optional[str]]:
    """(the body as sent, None), or (b"", why it was not read): larger than `max_bytes`, or
    encoded although identity was asked (a compressed body could expand past any bound)."""
    encoding = (resp.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding != "identity":
        return b"", "answered HTTP %d with Content-Encoding %s (identity was asked): not read" % (
            resp.status_code, encoding[:40])
    chunks: List[bytes] = []
    size = 0
    for chunk in resp.raw.stream(_CHUNK, decode_content=False):
        size += len(chunk)
        if size > max_bytes:
            return b"", "answered HTTP %d with a body over %d bytes: not read" % (resp.status_code, max_bytes)
        chunks.append(chunk)
    return b"".join(chunks), None


def _is_timeout(exc: BaseException) -> bool:
    requests = _requests()
    timeouts = (requests.exceptions.Timeout, socket.timeout) if requests is not None else (socket.timeout,)
    return isinstance(exc, timeouts) or "timed out" in str(exc)


def _reason(exc: BaseException, timeout: float, expired: bool = False) -> str:
    """The cause an operator reads (`[Errno 111] Connection refused`, `timed out after 5 s`),
    not urllib3's wrapper chain (`HTTPConnectionPool(...): Max retries exceeded ...`)."""
    if expired:
        return "timed out after %g s (the whole request: connect, headers and body)" % timeout
    requests = _requests()
    timeouts = (requests.exceptions.Timeout, socket.timeout) if requests is not None else (socket.timeout,)
    seen = set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, timeouts) or "timed out" in str(cur):
            return "timed out after %g s" % timeout
        if isinstance(cur, OSError) and cur.errno is not None:
            return "[Errno %d] %s" % (cur.errno, cur.strerror or cur)
        nxt = getattr(cur, "reason", None)  # urllib3's MaxRetryError/NewConnectionError
        if not isinstance(nxt, BaseException):
            nxt = next((a for a in getattr(cur, "args", ()) if isinstance(a, BaseException)), None)
        cur = nxt or cur.__cause__ or cur.__context__
    text = str(exc).splitlines()[0] if str(exc) else ""
    return "%s: %s" % (type(exc).__name__, text[:300]) if text else type(exc).__name__


def _decode(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace") if raw else ""
    try:
        return json.loads(text)
    except ValueError:
        return text


def server_info(host: str, port: int, api_key: Optional[str] = None,
                timeout: float = 5.0) -> Tuple[Optional[Dict[str, Any]], Optional[str], str]:
    """(/server_info data, error, endpoint used); falls back to the deprecated /get_server_info."""
    last_error = None
    for path in ("/server_info", "/get_server_info"):
        resp = request(host, port, path, api_key, timeout=timeout)
        if resp.status == 200 and isinstance(resp.body, dict):
            return resp.body, None, path
        last_error = resp.error or "HTTP %s" % resp.status
        if resp.status in (401, 403):
            return None, "%s: unauthorized (api_key missing or wrong)" % path, path
        if resp.status is None:
            break
    return None, last_error, "/server_info"


def model_info(host: str, port: int, api_key: Optional[str] = None,
               timeout: float = 5.0) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    for path in ("/model_info", "/get_model_info"):
        resp = request(host, port, path, api_key, timeout=timeout)
        if resp.status == 200 and isinstance(resp.body, dict):
            return resp.body, None
        if resp.status is None:
            return None, resp.error
    return None, resp.error


# Served by the HTTP layer of the main process without a scheduler round trip (`/health` runs a
# generation and may take seconds on a busy server). Any HTTP status is an answer.
LIVENESS_PATH = "/v1/models"


def answers(host: str, port: int, timeout: float) -> Dict[str, Any]:
    """Does the server on host:port answer HTTP at all within `timeout`? No credentials are
    sent: a 401 is an answer too. {endpoint, timeout, answered, status, error}."""
    resp = request(host, port, LIVENESS_PATH, timeout=timeout)
    return {"endpoint": LIVENESS_PATH, "timeout": timeout, "answered": resp.status is not None,
            "status": resp.status, "error": None if resp.status is not None else resp.error}
