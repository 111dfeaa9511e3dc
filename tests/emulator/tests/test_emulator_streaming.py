"""Streaming, load reporting and the SIGTERM drain, as real SGLang 0.5.x does them.

- `"stream": true` on /generate and /v1/chat/completions answers server-sent events
  (`data: {...}` blank-line separated, ending with `data: [DONE]`), one event per token, each
  token taking SGLANG_EMULATOR_TOKEN_DELAY seconds.
- /get_load (0.5.6: a list per DP rank with num_reqs / num_waiting_reqs / num_tokens),
  /v1/loads (0.5.23: {"loads": [{num_running_reqs, num_waiting_reqs, ...}]}) and the /metrics
  gauges sglang:num_running_reqs / sglang:num_queue_reqs count the generations in progress.
- SIGTERM: /health answers 503 at once, running streams finish, then the server exits 0.
  New requests during the drain are still served (real sglang only fails /health; the router
  stops sending because of that).
"""

import http.client
import json
import os
import re
import signal
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from conftest import Launch, free_port

KEY = "stream-key"


class Stream:
    """One streaming request read event by event (http.client: no proxy, no buffering)."""

    def __init__(self, port: int, path: str, body: Dict[str, Any], key: Optional[str] = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.conn.request("POST", path, body=json.dumps(body), headers=headers)
        self.resp = self.conn.getresponse()

    def events(self) -> Iterator[str]:
        """The `data:` payloads, in order, until the server ends the response."""
        buf = b""
        while True:
            chunk = self.resp.read1(65536) if hasattr(self.resp, "read1") else self.resp.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.decode().splitlines():
                    if line.startswith("data: "):
                        yield line[len("data: "):]
        self.conn.close()


def get(port: int, path: str, key: Optional[str] = None) -> Tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers={"Authorization": f"Bearer {key}"} if key else {})
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    return resp.status, body


def post(port: int, path: str, body: Dict[str, Any], key: Optional[str] = None) -> Tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data or b"null")


def running(port: int, key: Optional[str] = None) -> Dict[str, float]:
    """What each load source reports as running + waiting."""
    _status, raw = get(port, "/get_load", key)
    old = json.loads(raw)
    _status, raw = get(port, "/v1/loads", key)
    new = json.loads(raw)["loads"]
    _status, metrics = get(port, "/metrics")
    gauges = {m.group(1): float(m.group(2)) for m in
              re.finditer(r"^sglang:(num_running_reqs|num_queue_reqs)\{[^}]*\} (\S+)$", metrics, re.M)}
    return {
        "get_load": float(sum(r["num_reqs"] for r in old)),
        "v1_loads": float(sum(r["num_running_reqs"] + r["num_waiting_reqs"] for r in new)),
        "metrics": gauges["num_running_reqs"] + gauges["num_queue_reqs"],
    }


@pytest.fixture
def streaming_server(launcher) -> Iterator[Dict[str, Any]]:
    port = free_port()
    launch: Launch = launcher("--model-path", "org/model", "--port", str(port), "--tp-size", "1",
                              "--enable-metrics", "--reasoning-parser", "kimi_k2", "--api-key", KEY,
                              env={"SGLANG_EMULATOR_TOKEN_DELAY": "0.2"})
    launch.wait_log("fired up and ready to roll")
    yield {"launch": launch, "port": port}


def test_generate_stream_is_server_sent_events(streaming_server: Dict[str, Any]) -> None:
    port = streaming_server["port"]
    stream = Stream(port, "/generate", {"text": "Hi", "stream": True,
                                        "sampling_params": {"max_new_tokens": 5}}, KEY)
    assert stream.resp.status == 200
    assert stream.resp.getheader("content-type", "").startswith("text/event-stream")
    payloads = list(stream.events())
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert len(chunks) == 5  # one event per generated token
    texts = [c["text"] for c in chunks]
    assert all(texts[i + 1].startswith(texts[i]) for i in range(4))  # cumulative, as in sglang
    assert chunks[-1]["meta_info"]["completion_tokens"] == 5
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    # the same request without stream answers one JSON body with the final text
    status, body = post(port, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 5}}, KEY)
    assert status == 200 and body["text"] == texts[-1]


def test_chat_stream_chunks(streaming_server: Dict[str, Any]) -> None:
    stream = Stream(streaming_server["port"], "/v1/chat/completions",
                    {"model": "org/model", "stream": True, "max_tokens": 256,
                     "messages": [{"role": "user", "content": "2 + 2?"}]}, KEY)
    assert stream.resp.status == 200
    payloads = list(stream.events())
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert reasoning.strip() and content.strip()  # the reasoning parser splits the stream too
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_stream_needs_the_api_key(streaming_server: Dict[str, Any]) -> None:
    stream = Stream(streaming_server["port"], "/generate", {"text": "Hi", "stream": True})
    assert stream.resp.status == 401


def test_load_sources_count_a_running_stream(streaming_server: Dict[str, Any]) -> None:
    port = streaming_server["port"]
    assert running(port, KEY) == {"get_load": 0.0, "v1_loads": 0.0, "metrics": 0.0}
    stream = Stream(port, "/generate", {"text": "Hi", "stream": True,
                                        "sampling_params": {"max_new_tokens": 6}}, KEY)
    events = stream.events()
    next(events)  # the stream is under way
    assert running(port, KEY) == {"get_load": 1.0, "v1_loads": 1.0, "metrics": 1.0}
    status, raw = get(port, "/get_load", KEY)
    entry = json.loads(raw)[0]
    assert status == 200 and {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"} <= set(entry)
    assert list(events)[-1] == "[DONE]"
    assert running(port, KEY) == {"get_load": 0.0, "v1_loads": 0.0, "metrics": 0.0}


def test_sigterm_drains_running_streams_then_exits(streaming_server: Dict[str, Any]) -> None:
    launch: Launch = streaming_server["launch"]
    port = streaming_server["port"]
    stream = Stream(port, "/generate", {"text": "Hi", "stream": True,
                                        "sampling_params": {"max_new_tokens": 10}}, KEY)
    events = stream.events()
    first = next(events)
    os.kill(launch.pid, signal.SIGTERM)
    launch.wait_log("Draining requests and shutting down")
    assert get(port, "/health")[0] == 503  # the router's health check sees it at once
    # real sglang keeps serving what still arrives while it drains (only /health fails)
    status, body = post(port, "/generate", {"text": "late", "sampling_params": {"max_new_tokens": 2}}, KEY)
    assert status == 200 and body["text"].strip()
    rest: List[str] = list(events)
    assert rest[-1] == "[DONE]"  # the running stream was not cut
    assert len(rest) == 10  # 9 more tokens + [DONE]
    assert json.loads(first)["meta_info"]["finish_reason"] is None
    assert launch.wait_exit(timeout=30) == 0
    assert "Finished server process" in launch.log()
