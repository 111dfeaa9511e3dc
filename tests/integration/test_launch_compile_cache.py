"""The persistent compile/JIT caches through the modules (issue 34), against the emulator: the
variables a launch gets (the operator's env winning), the directory created privately and shown
by the probe, an unsafe directory refused before the running server is touched, and the cache
surviving sglang_teardown (which removes the launch's TMPDIR) for the next start."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _compile_cache as cc
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, wait_for

READY = "The server is fired up and ready to roll!"
EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
KERNEL = os.path.join("inductor", "fxgraph", "compiled-kernel")


@pytest.fixture
def cache_root():
    """A private directory whose parents only root or this user can write (pytest's tmp_path lies
    under the sticky /tmp, which the cache check refuses by design)."""
    base = os.path.dirname(cc.default_dir())
    os.makedirs(base, mode=0o700, exist_ok=True)
    path = tempfile.mkdtemp(prefix="llmops-cc-itest-", dir=base)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _launch(emulator_python, model_dir, state_dir, log_dir, port, **extra):
    args = {"name": "cc", "venv": os.path.dirname(os.path.dirname(emulator_python)), "model_path": model_dir,
            "port": port, "state_dir": state_dir, "log_dir": log_dir, "gpu_backend": "none", "lock_timeout": 10}
    args.update(extra)
    return run_module("sglang_launch", args)


def test_caches_outlive_the_teardown_and_an_unsafe_dir_is_refused_first(emulator_python, model_dir, state_dir,
                                                                        log_dir, launched, cache_root):
    cache, mine = os.path.join(cache_root, "sglang"), os.path.join(cache_root, "my-triton")
    env = dict(EMU_ENV, TRITON_CACHE_DIR=mine)
    port = free_port()
    first = _launch(emulator_python, model_dir, state_dir, log_dir, port, cache_dir=cache, env=env)
    assert first["_rc"] == 0, first.get("msg")
    record = first["record"]
    launched.append(record)
    assert wait_for(lambda: READY in open(first["log_path"]).read(), 30)
    assert record["compile_cache"] == {"dir": cache, "source": "option", "set_by_env": ["TRITON_CACHE_DIR"],
                                       "variables": dict(cc.plan(cache, env).variables)}
    environ = _procs.read_environ(first["pid"])
    assert environ["SGLANG_CACHE_DIR"] == cache and environ["FLASHINFER_WORKSPACE_BASE"] == cache
    assert environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(cache, "inductor")
    assert environ["SGLANG_DG_CACHE_DIR"] == os.path.join(cache, "deep_gemm")
    assert environ["TRITON_CACHE_DIR"] == mine                     # the operator's value wins
    assert not any(environ[k].startswith(record["tmpdir"]) for k in cc.VARIABLES)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700           # created privately
    # what the server compiled (the emulator without torch compiles nothing: a stand-in kernel)
    os.makedirs(os.path.dirname(os.path.join(cache, KERNEL)))
    with open(os.path.join(cache, KERNEL), "wb") as fh:
        fh.write(b"k" * 4096)

    probe = run_module("sglang_probe", {"state_dir": state_dir, "gpu_backend": "none"})
    assert probe["_rc"] == 0, probe.get("msg")
    [mine_view] = [c for c in probe["compile_caches"] if c["instance"] == "cc"]
    rows = {r["variable"]: r for r in mine_view["caches"]}
    assert rows["TORCHINDUCTOR_CACHE_DIR"]["bytes"] == 4096 and rows["TORCHINDUCTOR_CACHE_DIR"]["set_by"] == "collection"
    assert rows["TRITON_CACHE_DIR"]["path"] == mine and rows["TRITON_CACHE_DIR"]["set_by"] == "env"

    # a replacement with an unsafe cache dir: refused in the preflight, the old server untouched
    shared = os.path.join(cache_root, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    refused = _launch(emulator_python, model_dir, state_dir, log_dir, port, cache_dir=os.path.join(shared, "c"),
                      env=env, args={"max-running-requests": 8}, teardown={})
    assert refused["_rc"] != 0 and refused["reason"] == "unsafe_dir", refused.get("msg")
    assert "writable by group or others" in refused["msg"]
    assert _procs.is_alive(first["pid"], record["start_time"])
    assert not os.path.exists(os.path.join(shared, "c"))

    gone = run_module("sglang_teardown", {"name": "cc", "state_dir": state_dir, "gpu_backend": "none"})
    assert gone["_rc"] == 0 and gone["changed"], gone.get("msg")
    assert wait_for(lambda: not _procs.is_alive(first["pid"], record["start_time"]), 10)
    assert not os.path.exists(record["tmpdir"])                     # the TMPDIR went with the server
    assert os.path.getsize(os.path.join(cache, KERNEL)) == 4096      # the cache did not

    # the next start finds it: a warm restart
    second = _launch(emulator_python, model_dir, state_dir, log_dir, free_port(), cache_dir=cache, env=env)
    assert second["_rc"] == 0, second.get("msg")
    launched.append(second["record"])
    assert _procs.read_environ(second["pid"])["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(cache, "inductor")
    assert os.path.getsize(os.path.join(cache, KERNEL)) == 4096
