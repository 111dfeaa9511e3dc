"""HTTP to a server on this host, through requests.

One short-lived Session per request with `trust_env=False`: no proxy (nor netrc, nor CA bundle)
from the environment reaches a loopback server. Redirects are not followed, so an api key sent
to this host never travels on. `requests` is imported on the first request, guarded: without it
every request is an answer-less Response naming the missing library (the modules fail earlier through _depsearch.require;
the probe reports what it could not read).
"""
from __future__ import annotations

import importlib.util
import json
import socket
import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

# Looked up, not imported: importing requests costs about 0.1 s (more where nothing is
# precompiled, as in a module's AnsiballZ run), and most module runs send no request.
HAS_REQUESTS = importlib.util.find_spec("requests") is not None
_LIB: Dict[str, Any] = {"requests": None, "error": None if HAS_REQUESTS else "No module named 'requests'"}


def _requests() -> Any:
    """The requests module, imported on first use; None when it does not import."""
    if _LIB["requests"] is None and _LIB["error"] is None:
        try:
            import requests  # pylint: disable=import-outside-toplevel

            _LIB["requests"] = requests
        except Exception as exc:  # a broken install raises anything: the request names it, never a traceback
            _LIB["error"] = "%s: %s" % (type(exc).__name__, exc)
    return _LIB["requests"]


@dataclass
class Response:
    """An HTTP answer: status None (and the error text) when there was none."""
    status: Optional[int]
    body: Any
    error: Optional[str] = None


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
            payload: Optional[Dict[str, Any]] = None, timeout: float = 5.0) -> Response:
    """Never raises for network trouble: status None + error text instead. A 4xx/5xx is an
    answer: its status, its body and the error `HTTP <status>`."""
    url = "http://%s:%d%s" % (url_host(host), port, path)
    requests = _requests()
    if requests is None:
        return Response(None, None, "%s: not asked: the Python library requests is not installed for %s (%s)"
                        % (url, sys.executable, _LIB["error"]))
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    data = json.dumps(payload).encode() if payload is not None else None
    session = requests.Session()
    session.trust_env = False
    try:
        resp = session.request(method, url, data=data, headers=headers, timeout=timeout,
                               allow_redirects=False)
        raw = resp.content
        status = resp.status_code
    except Exception as exc:  # requests/urllib3 errors, OSError, bad URLs: all "no answer"
        return Response(None, None, "%s: %s" % (url, _reason(exc, timeout)))
    finally:
        session.close()
    return Response(status, _decode(raw), "HTTP %d" % status if status >= 400 else None)


def _reason(exc: BaseException, timeout: float) -> str:
    """The cause an operator reads (`[Errno 111] Connection refused`, `timed out after 5 s`),
    not urllib3's wrapper chain (`HTTPConnectionPool(...): Max retries exceeded ...`)."""
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
