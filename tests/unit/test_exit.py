"""The single module exit path: reasons come from where errors were raised, secrets never leave."""
from __future__ import annotations

import errno
from typing import Any, Dict, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


class FakeModule:
    def __init__(self) -> None:
        self.calls: List[Dict[str, Any]] = []

    def exit_json(self, **kw: Any) -> None:
        self.calls.append(dict(kw, _how="exit"))

    def fail_json(self, **kw: Any) -> None:
        self.calls.append(dict(kw, _how="fail"))


def _end(body, secrets=()) -> Dict[str, Any]:
    mod = FakeModule()
    _exit.run(mod, body, "sglang_x", secrets)
    assert len(mod.calls) == 1
    return mod.calls[0]


def test_success_is_redacted_deeply() -> None:
    out = _end(lambda m: {"changed": True, "cmd": ["--api-key", "s3cr3tvalue"], "info": {"api_key": "x"},
                          "msg": "started with s3cr3tvalue"}, secrets=["s3cr3tvalue"])
    assert out["_how"] == "exit"
    assert "s3cr3tvalue" not in repr(out)
    assert out["info"]["api_key"] == "********"


def test_sglang_error_keeps_its_reason_and_details() -> None:
    def body(m):
        raise SglangError("port 8000 is held by pid 7 (python3 -m http.server)", reason="port_busy", port=8000)
    out = _end(body)
    assert out == {"_how": "fail", "msg": "port 8000 is held by pid 7 (python3 -m http.server)",
                   "reason": "port_busy", "port": 8000}


def test_sglang_error_without_reason_gets_generic_one() -> None:
    def body(m):
        raise SglangError("something precise")
    assert _end(body)["reason"] == "error"


@pytest.mark.parametrize("code,reason", [(errno.ENOSPC, "no_space"), (errno.EACCES, "permission_denied"),
                                         (errno.EIO, "io_error")])
def test_os_error_names_its_path(code: int, reason: str) -> None:
    def body(m):
        raise OSError(code, "boom", "/var/log/sglang/x.log")
    out = _end(body)
    assert out["reason"] == reason
    assert out["path"] == "/var/log/sglang/x.log"
    assert out["msg"].startswith("sglang_x: /var/log/sglang/x.log: ")
    assert "exception" not in out


def test_unexpected_error_is_internal_with_traceback_not_in_message() -> None:
    def body(m):
        raise KeyError("pid")
    out = _end(body, secrets=["topsecretkey"])
    assert out["reason"] == "internal_error"
    assert "Traceback" in out["exception"]
    assert "Traceback" not in out["msg"]


def test_secret_in_failure_message_is_masked() -> None:
    def body(m):
        raise SglangError("holder argv: --api-key topsecretkey", reason="port_busy")
    assert "topsecretkey" not in repr(_end(body, secrets=["topsecretkey"]))
