"""When a generation stops counting in /get_load, /v1/loads and /metrics.

Real sglang frees a request in the scheduler before its last chunk reaches the client, so a
client (the router, a drain) that holds the whole response never sees it still counted. The
handler runs in-process here with a recording socket file: which count each write saw is
exact, where a live server only shows it when a thread switch lands in the gap.
"""

import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang.srt.entrypoints.http_server import Handler  # noqa: E402


class Recorder:
    """A socket file that notes the running count at each write."""

    def __init__(self, state: SimpleNamespace) -> None:
        self.state = state
        self.writes: List[Tuple[int, bytes]] = []

    def write(self, data: bytes) -> int:
        self.writes.append((self.state.running, bytes(data)))
        return len(data)

    def flush(self) -> None:
        pass


def handler() -> Tuple[Any, Recorder]:
    state = SimpleNamespace(lock=threading.Lock(), running=0,
                            dump_hidden_states=lambda: None, uvicorn_log=lambda *a, **k: None)
    cls = type("TestHandler", (Handler,), {"state": state})
    obj = cls.__new__(cls)
    obj.wfile = Recorder(state)
    obj.request_version, obj.command, obj.path = "HTTP/1.1", "POST", "/generate"
    obj.client_address = ("127.0.0.1", 40000)
    return obj, obj.wfile


def test_a_stream_counts_until_its_last_token_and_not_at_done() -> None:
    obj, rec = handler()
    obj._generation(True, [(0, {"text": "a"}), (0, {"text": "ab"})], 0, None)
    tokens = [n for n, data in rec.writes if b'"text"' in data]
    done = [n for n, data in rec.writes if b"[DONE]" in data]
    terminal = [n for n, data in rec.writes if data == b"0\r\n\r\n"]
    assert tokens == [1, 1]  # counted while it generates
    assert done == [0] and terminal == [0]  # not counted once the client can have it all
    assert obj.state.running == 0


def test_a_plain_request_is_not_counted_when_its_body_goes_out() -> None:
    obj, rec = handler()
    obj._generation(False, [], 0, {"text": "ab"})
    body = [n for n, data in rec.writes if b'"text"' in data]
    assert body == [0] and obj.state.running == 0


def test_a_client_that_goes_away_is_counted_out_once() -> None:
    obj, rec = handler()
    write = rec.write

    def broken(data: bytes) -> int:
        if b"data: " in data:  # the headers went out, then the client is gone
            raise BrokenPipeError
        return write(data)

    rec.write = broken
    obj._generation(True, [(0, {"text": "a"})], 0, None)
    assert obj.state.running == 0
