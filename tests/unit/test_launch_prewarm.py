"""The plan's prewarm (sglang_launch `prewarm`) never fails the plan: whatever stops it is said in
its result, so an operation lock the same call took stays in the call's result and is given back."""
from __future__ import annotations

import errno

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._prewarm import _prewarm
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

SPEC = {"threads": 1, "min_available": "10%", "timeout": 60, "check_only": False}


@pytest.mark.parametrize("exc,reason", [
    (OSError(errno.EIO, "Input/output error", "/models/m/model-00001.safetensors"), "io_error"),
    (OSError(errno.EACCES, "Permission denied", "/models/m/model-00001.safetensors"), "permission_denied"),
    (SglangError("no weight files in /models/m", reason="no_weights"), "no_weights"),
])
def test_a_failed_prewarm_is_a_result_not_an_exception(monkeypatch, exc, reason):
    def fail(*_args, **_kwargs):
        raise exc
    monkeypatch.setattr(_prewarm, "run", fail)
    res = _launch_exec.prewarm("/models/m", SPEC)
    assert res["failed"] and res["reason"] == reason, res
    assert res["msg"]


def test_check_only_reads_nothing(monkeypatch, tmp_path):
    seen = {}

    def run(path, opts, *_args):
        seen["check_mode"] = opts.check_mode
        raise SglangError("stop here", reason="no_weights")
    monkeypatch.setattr(_prewarm, "run", run)
    _launch_exec.prewarm(str(tmp_path), dict(SPEC, check_only=True))
    assert seen == {"check_mode": True}
