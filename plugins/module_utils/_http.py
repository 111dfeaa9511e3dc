"""HTTP to a server on this host, through ansible.module_utils.urls (nothing extra on hosts)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ansible.module_utils.urls import open_url

from urllib.error import HTTPError, URLError  # ansible-core >= 2.17 targets Python 3 only


@dataclass
class Response:
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
    """Never raises for network trouble: status None + error text instead."""
    url = "http://%s:%d%s" % (url_host(host), port, path)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    data = json.dumps(payload).encode() if payload is not None else None
    try:
        resp = open_url(url, method=method, data=data, headers=headers, timeout=timeout,
                        use_proxy=False, validate_certs=False)
        raw = resp.read()
        status = resp.getcode()
    except HTTPError as exc:
        raw = exc.read() if hasattr(exc, "read") else b""
        return Response(exc.code, _decode(raw), "HTTP %d" % exc.code)
    except (URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Response(None, None, "%s: %s" % (url, reason))
    except Exception as exc:  # http.client errors (RemoteDisconnected, BadStatusLine, ...)
        return Response(None, None, "%s: %s" % (url, exc))
    return Response(status, _decode(raw))


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
