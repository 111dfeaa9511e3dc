"""The readiness state machine with trivial processes (sleep, http.server) and hand-written logs."""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import uuid

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns as lp
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _loganalysis
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from helpers.fixtures import free_port, wait_for

READY = "[2025-01-01 10:00:09] The server is fired up and ready to roll!"
STARTUP = [
    "[2025-01-01 10:00:00] server_args=ServerArgs(model_path='/m', api_key='sk-secret-123', port=1)",
    "[2025-01-01 10:00:01 TP0] Init torch distributed begin.",
    "[2025-01-01 10:00:02 TP0] Load weight begin. avail mem=78.50 GB",
    "[2025-01-01 10:00:03 TP0] Load weight end. type=X, avail mem=60 GB",
    "[2025-01-01 10:00:04 TP0] KV Cache is allocated. #tokens: 1000",
    "[2025-01-01 10:00:05 TP0] Memory pool end. avail mem=10 GB",
    "[2025-01-01 10:00:05 TP0] Capture cuda graph begin. This can take up to several minutes.",
    "[2025-01-01 10:00:06 TP0] Capture cuda graph end. Time elapsed: 1.00 s.",
    "[2025-01-01 10:00:07] INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)",
    '[2025-01-01 10:00:08] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK',
]
SCHEDULER_CRASH = [
    "[2025-01-01 10:00:02 TP0] Load weight begin. avail mem=78.50 GB",
    "[2025-01-01 10:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "scheduler.py", line 10, in run',
    "    raise RuntimeError('Not enough memory. Please try to increase --mem-fraction-static.')",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "",
    "[2025-01-01 10:00:03] Received sigquit from a child process. It usually means the child failed.",
]


def _compile(patterns):
    return lp.compile_patterns(patterns, "test")


def _analyzer(port=30000):
    return _loganalysis.LogAnalyzer(_compile(lp.READY_PATTERNS), _compile(lp.FATAL_PATTERNS), port,
                                    launched_at=time.mktime(time.strptime("2025-01-01 10:00:00",
                                                                          "%Y-%m-%d %H:%M:%S")),
                                    benign=_compile(lp.BENIGN_PATTERNS))


# --- pure parts --------------------------------------------------------------------------

def test_timeline_in_canonical_order_and_phase():
    log = _analyzer(1234)
    log.feed(_startup(1234) + [READY], time.time())
    phases = [t["phase"] for t in log.timeline]
    assert phases == ["init distributed", "weight load begin", "weight load end", "kv cache",
                      "memory pool", "cuda graph begin", "cuda graph end", "http up", "warmup", "ready"]
    assert log.phase == "ready" and log.uvicorn_line and log.ready_line and not log.fatal
    seconds = [t["seconds"] for t in log.timeline]
    assert seconds == sorted(seconds) and seconds[0] > 0


def test_uvicorn_for_another_port_does_not_count():
    log = _analyzer(1234)
    log.feed(["[x] INFO:     Uvicorn running on http://0.0.0.0:9999 (Press CTRL+C to quit)"], time.time())
    assert log.uvicorn_line is None and log.other_uvicorn


def test_decisive_lines_follow_the_traceback_to_the_exception():
    log = _analyzer()
    log.feed(SCHEDULER_CRASH, time.time())
    lines = log.decisive_lines()
    assert lines[0].endswith("Traceback (most recent call last):")
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in lines
    assert lines[-1].startswith("[2025-01-01 10:00:03] Received sigquit")


def test_decisive_lines_look_back_for_the_traceback_start():
    log = _analyzer()
    log.feed(["noise"] * 5 + ["Traceback (most recent call last):", '  File "x.py", line 1',
                              "ModuleNotFoundError: No module named 'sglang.srt.foo'"], time.time())
    assert log.decisive_lines() == ["Traceback (most recent call last):", '  File "x.py", line 1',
                                    "ModuleNotFoundError: No module named 'sglang.srt.foo'"]


def test_decisive_lines_are_capped():
    log = _analyzer()
    log.feed(["Traceback (most recent call last):"] + ['  File "f%d.py"' % i for i in range(100)]
             + ["ModuleNotFoundError: No module named 'x'"], time.time())
    lines = log.decisive_lines()
    assert len(lines) <= _loganalysis.DECISIVE_MAX
    assert lines[0].startswith("Traceback") and lines[-1].startswith("ModuleNotFoundError")
    assert any("omitted" in line for line in lines)


def test_bind_error_is_always_fatal_even_with_custom_patterns():
    log = _loganalysis.LogAnalyzer(_compile(lp.READY_PATTERNS), _compile(["never"]), 8000, time.time())
    log.feed(["[x] ERROR:    [Errno 98] error while attempting to bind on address "
              "('127.0.0.1', 8000): address already in use"], time.time())
    assert log.bind_error and log.fatal


@pytest.mark.parametrize("expect,info,ok", [
    ({"tp_size": 8}, {"tp_size": 8}, True),
    ({"tp_size": "8"}, {"tp_size": 8}, True),
    ({"tp_size": 8}, {"tp_size": 2}, False),
    ({"model_path": "/models/x/"}, {"model_path": "/models/x"}, True),
    ({"disable_cuda_graph": "true"}, {"disable_cuda_graph": True}, True),
    ({"reasoning_parser": "kimi_k2"}, {"reasoning_parser": None}, False),
    ({"reasoning_parser": "kimi_k2"}, {}, False),
    ({"mem_fraction_static": 0.88}, {"mem_fraction_static": "0.88"}, True),
])
def test_compare_expected_normalises(expect, info, ok):
    matched, mismatches = _readiness.compare_expected(expect, info)
    assert (not mismatches) is ok
    if not ok:
        assert mismatches[0]["field"] in expect and "expected" in mismatches[0]


def test_quiet_log_levels():
    assert lp.quiet_log_levels(["--model-path", "m"]) == (None, None)
    assert lp.quiet_log_levels(["--log-level", "warning"]) == ("warning", "warning")
    assert lp.quiet_log_levels(["--log-level=error", "--log-level-http", "info"]) == ("error", None)
    assert lp.quiet_log_levels(["--log-level", "warning", "--log-level", "info"]) == (None, None)


def test_record_validation_is_precise():
    with pytest.raises(SglangError) as exc:
        _readiness.instance_from_record({"log_path": "/x"})
    assert exc.value.details["reason"] == "record_invalid" and "pid" in exc.value.msg
    with pytest.raises(SglangError):
        _readiness.instance_from_record({"pid": 5})
    with pytest.raises(SglangError) as exc:
        lp.compile_patterns(["("], "fatal_patterns")
    assert "fatal_patterns" in exc.value.msg


# --- the state machine with trivial processes ----------------------------------------------

def _record(proc, log_path, offset=0, port=None, **extra):
    info = _procs.read_proc(proc.pid)
    rec = {"name": "t", "pid": proc.pid, "start_time": info.start_time, "pgid": info.pgid,
           "sid": info.sid, "launch_id": uuid.uuid4().hex, "log_path": log_path,
           "log_offset": offset, "host": "127.0.0.1", "port": port or free_port(),
           "launched_at": time.time(), "argv": [], "expect": {}}
    rec.update(extra)
    return rec


def _opts(**kw):
    kw.setdefault("timeout", 2.0)
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("settle", 0.2)  # short: the settle window has tests of its own
    return _readiness.Options(**kw)


def _startup(port, lines=None):
    """The startup lines (STARTUP unless given) with this launch's port in its Uvicorn line."""
    return [line % port if "%d" in line else line for line in (STARTUP if lines is None else lines)]


def _starting(spawn, tmp_path, script, *args, ready=True):
    """A starting launch: `script` (binds its port after the wait began) and its log, written
    up to the ready line (or without it)."""
    port = free_port()
    log = str(tmp_path / "l.log")
    proc = spawn.start([sys.executable, "-c", script, str(port)] + [str(a) for a in args])
    rec = _record(proc, log, port=port)
    _write(log, _startup(port) + ([READY] if ready else []))
    return rec


def _write(path, lines):
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


@pytest.fixture
def sleeper(spawn):
    return lambda: spawn.start(["sleep", "60"])


def test_fatal_line_fails_with_the_traceback_and_redacts(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    _write(log, [STARTUP[0]] + SCHEDULER_CRASH)
    out = _readiness.wait_ready(_record(sleeper(), log), _opts(api_key="sk-secret-123"))
    assert not out.ready and out.reason == "fatal_log"
    assert "Scheduler hit an exception" in out.msg
    assert any("Not enough memory" in line for line in out.details["decisive_lines"])
    assert "sk-secret-123" not in json.dumps(out.details) + out.msg


def test_exited_reads_this_launchs_exit_file(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    _write(log, STARTUP[:3])
    proc = sleeper()
    rec = _record(proc, log, exit_path=str(tmp_path / "t.exit.json"))
    with open(rec["exit_path"], "w") as fh:
        json.dump({"launch_id": rec["launch_id"], "pid": proc.pid, "returncode": 1, "signal": None}, fh)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = _readiness.wait_ready(rec, _opts())
    assert out.reason == "exited" and out.details["exit_status"]["returncode"] == 1
    assert out.details["phase"] == "weight load begin" and "weight load" in out.msg


def test_exit_file_of_another_launch_is_unknown(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    _write(log, STARTUP[:2])
    proc = sleeper()
    rec = _record(proc, log, exit_path=str(tmp_path / "t.exit.json"))
    with open(rec["exit_path"], "w") as fh:
        json.dump({"launch_id": "someone-else", "returncode": 0}, fh)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = _readiness.wait_ready(rec, _opts())
    assert out.reason == "exited" and out.details["exit_status"] == "unknown"


def test_old_ready_line_before_offset_does_not_count(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    port = free_port()
    _write(log, _startup(port) + [READY])
    offset = os.path.getsize(log)
    _write(log, STARTUP[1:3])  # the new launch hangs in weight loading
    out = _readiness.wait_ready(_record(sleeper(), log, offset=offset, port=port), _opts(timeout=0.6))
    assert not out.ready and out.reason == "timeout"
    assert out.details["phase"] == "weight load begin" and "weight load" in out.msg


def test_hidden_ready_line_fails_at_once(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    _write(log, [])
    rec = _record(sleeper(), log, argv=["-m", "sglang.launch_server", "--log-level", "warning"])
    out = _readiness.wait_ready(rec, _opts(timeout=60))
    assert out.reason == "ready_line_hidden" and "require_ready_line" in out.msg


def test_missing_log(tmp_path, sleeper):
    out = _readiness.wait_ready(_record(sleeper(), str(tmp_path / "none.log")), _opts(timeout=0.3))
    assert out.reason == "log_missing"


def test_truncated_log_is_reported_at_timeout(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    _write(log, STARTUP[:2])
    out = _readiness.wait_ready(_record(sleeper(), log, offset=10_000), _opts(timeout=0.3))
    assert out.reason == "log_truncated"
    assert [e["kind"] for e in out.details["log_events"]] == ["truncated"]


LISTENER = ("import socket,sys,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(60)\n")


def test_foreign_listener_on_the_port_is_a_stale_server(tmp_path, spawn, sleeper):
    port = free_port()
    stale = spawn.start([sys.executable, "-c", LISTENER, str(port)])
    assert wait_for(lambda: bool(_readiness._ports.has_listener(port)), 10)
    log = str(tmp_path / "l.log")
    _write(log, STARTUP[:3])
    out = _readiness.wait_ready(_record(sleeper(), log, port=port), _opts())
    assert out.reason == "stale_server"
    assert "pid %d" % stale.pid in out.msg
    assert [o["pid"] for o in out.details["stale_owners"]] == [stale.pid]


def _http_launch(spawn, tmp_path, info, before_ready=(), after_ready=()):
    """A 'server' that is really http.server over a directory with server_info and health."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "server_info").write_text(json.dumps(info))
    (root / "health").write_text("")
    port = free_port()
    proc = spawn.start([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                        "--directory", str(root)])
    assert wait_for(lambda: bool(_readiness._ports.has_listener(port)), 10)
    log = str(tmp_path / "l.log")
    _write(log, _startup(port) + list(before_ready)
           + [READY] + list(after_ready))
    return proc, port, log


def test_ready_when_every_proof_holds(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"tp_size": 2, "port": 0, "version": "0.5.6"})
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts(expect={"tp_size": "2"}))
    assert out.ready and out.reason == "ready", out.msg
    assert out.details["server_version"] == "0.5.6" and out.details["matched"] == {"tp_size": 2}
    assert out.details["health"]["status"] == 200
    owners = [o for lst in out.details["listeners"] for o in lst["owners"]]
    assert owners and all(o["ours"] for o in owners)


def test_config_mismatch_shows_expected_and_actual(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"tp_size": 2, "version": "0.5.6"})
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts(expect={"tp_size": 8}))
    assert out.reason == "config_mismatch"
    assert out.details["mismatches"] == [{"field": "tp_size", "expected": 8, "actual": 2}]
    assert re.search(r"tp_size: expected 8, server reports 2", out.msg)


def test_a_phase_echoed_after_a_later_one_keeps_the_timeline_in_order():
    log = _analyzer(1234)
    log.feed([STARTUP[8] % 1234, READY, STARTUP[9]], time.time())
    assert [t["phase"] for t in log.timeline] == ["http up", "ready"]


# --- harmless lines that carry a fatal pattern's words ---------------------------------------
# Every warning of the real sglang 0.5.23 source (python/sglang/srt/...) whose text contains the
# words of a default fatal pattern, as it appears in a log. They are printed by healthy servers:
# an optional dependency missing on the host is reported and skipped.
T = "[2025-01-01 10:00:01 TP0] "
BENIGN_0523 = [
    pytest.param(T + "Ignore import error when loading sglang.srt.models.glm_ocr: "
                 "No module named 'transformers.models.glm_ocr'", id="models/registry.py"),
    pytest.param("[2025-01-01 10:00:01] Ignore import error when loading "
                 "sglang.srt.multimodal.processors.glm_ocr: No module named 'transformers.models.glm_ocr'",
                 id="managers/multimodal_processor.py"),
    pytest.param(T + "Ignore import error when loading sglang.srt.dllm.algorithm.joint_threshold: "
                 "No module named 'sgl_kernel.dllm'", id="dllm/algorithm/__init__.py"),
    pytest.param(T + "Failed to import from custom_ar with ModuleNotFoundError(\"No module named "
                 "'sgl_kernel.allreduce'\")", id="custom_all_reduce_ops.py"),
    pytest.param(T + "Failed to import pynvml with ModuleNotFoundError(\"No module named 'pynvml'\")",
                 id="custom_all_reduce_utils.py-pynvml"),
    pytest.param(T + "Failed to import amdsmi with ModuleNotFoundError(\"No module named 'amdsmi'\")",
                 id="custom_all_reduce_utils.py-amdsmi"),
    pytest.param(T + "Failed to import pymtml with ModuleNotFoundError(\"No module named 'pymtml'\")",
                 id="custom_all_reduce_utils.py-pymtml"),
    pytest.param(T + "[AR] Aiter custom all-reduce not available; falling back to sglang "
                 "CustomAllreduce. Details: No module named 'aiter'", id="custom_all_reduce.py"),
    pytest.param(T + "PyMscclpp is unavailable because its dependencies failed to import: "
                 "No module named 'mscclpp'", id="pymscclpp.py"),
    pytest.param(T + "Failed to import mooncake allocator for nvlink: No module named 'mooncake'. "
                 "Falling back to default memory pool.", id="mooncake/utils.py"),
    pytest.param(T + "NPU custom kernel packages unavailable: No module named 'sgl_kernel_npu'",
                 id="npu/utils.py"),
    pytest.param(T + "torchcodec is unavailable; video audio-track detection and audio decoding via "
                 "AudioDecoder are disabled: No module named 'torchcodec'", id="mimo_audio.py"),
    pytest.param(T + "V4.1 Rust image processor unavailable; using PIL: No module named "
                 "'sglang_image_rs'", id="deepseek_v41.py"),
    pytest.param(T + "flashinfer.comm allreduce_fusion API is not available (No module named "
                 "'flashinfer.comm'), falling back to standard implementation", id="flashinfer_comm_fusion.py"),
    pytest.param(T + "aiter mla gluon import error message: No module named 'aiter'", id="aiter_mla_gluon.py"),
    pytest.param(T + "FlashInfer GDN kernels not available: No module named 'flashinfer.gdn'",
                 id="gdn_flashinfer.py"),
    pytest.param(T + "FlashInfer KDA kernel not available: No module named 'flashinfer.kda'",
                 id="kda_flashinfer.py"),
    pytest.param(T + "SGLANG_OPT_HIP_FLYDSL_MXFP8 ignored, FlyDSL unavailable: No module named 'flydsl'",
                 id="fp8_hip.py"),
    pytest.param(T + "UMBPHostTensorAllocator unavailable (No module named 'umbp'). Falling back to "
                 "torch.empty-based allocator.", id="pool_host/common.py"),
    pytest.param(T + "Direct load as TikTokenTokenizer failed for /models/x: No module named "
                 "'tiktoken'. Falling back to AutoTokenizer result.", id="hf_transformers/tokenizer.py"),
    pytest.param("Warning: Multi-backend fused metadata copy kernel failed with error: CUDA error: "
                 "out of memory, falling back to loop.", id="dsa_backend.py-print"),
    pytest.param([T + "Ignore <module 'triton.compiler'> reports ImportError with:",
                  "No module named 'triton.compiler.compiler'"], id="utils/common.py-two-lines"),
]


def _lines(entry):
    return entry if isinstance(entry, list) else [entry]


@pytest.mark.parametrize("entry", BENIGN_0523)
def test_a_real_benign_warning_is_not_fatal(entry):
    log = _analyzer()
    log.feed(STARTUP[:3] + _lines(entry) + STARTUP[3:5], time.time())
    assert not log.fatal, log.fatal
    assert not log.decisive


def test_a_benign_line_of_another_rank_inside_a_traceback_does_not_hide_it():
    log = _analyzer()
    log.feed(["[2025-01-01 10:00:02 TP0] Load weight begin. avail mem=78.50 GB",
              "Traceback (most recent call last):",
              '  File "sglang/launch_server.py", line 14, in run_server',
              str(BENIGN_0523[0].values[0]),  # TP1 writes its warning in the middle
              '  File "sglang/srt/entrypoints/http_server.py", line 3, in <module>',
              "ModuleNotFoundError: No module named 'sgl_kernel'"], time.time())
    assert [line for _i, line in log.decisive] == ["ModuleNotFoundError: No module named 'sgl_kernel'"]
    assert log.cause() == "ModuleNotFoundError: No module named 'sgl_kernel'"


def test_benign_warnings_at_start_never_fail_a_healthy_server(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"}, before_ready=[
        line for entry in BENIGN_0523 for line in _lines(entry.values[0])])
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts())
    assert out.ready and out.reason == "ready", out.msg


# A per-request error the server recovered from (openai/serving_base.py: logger.exception).
REQUEST_OOM = [
    "[2025-01-01 11:30:00] Error in request: CUDA out of memory. Tried to allocate 2.00 GiB",
    "Traceback (most recent call last):",
    '  File "sglang/srt/entrypoints/openai/serving_base.py", line 120, in handle_request',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    '[2025-01-01 11:30:00] INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 500',
]


def test_a_fatal_line_outside_a_traceback_decides_only_at_exit(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    warning = "[2025-01-01 10:00:03 TP0] retrying the batch: CUDA out of memory on a probe allocation"
    _write(log, STARTUP[:3] + [warning])
    proc = sleeper()
    rec = _record(proc, log)
    out = _readiness.wait_ready(rec, _opts(timeout=0.8))
    assert out.reason == "timeout", out.msg  # alive: the line alone decides nothing
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = _readiness.wait_ready(rec, _opts())
    assert out.reason == "fatal_log" and "CUDA out of memory" in out.msg
    assert warning in out.details["decisive_lines"]


def test_recheck_of_a_running_server_ignores_a_recovered_request_oom(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"}, after_ready=REQUEST_OOM)
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts())
    assert out.ready and out.reason == "ready", out.msg


def test_recheck_of_a_running_server_does_not_read_its_old_lines(tmp_path, spawn):
    access = '[2025-01-01 11:00:00] INFO:     127.0.0.1:5 - "POST /generate HTTP/1.1" 200 OK'
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"},
                                   after_ready=[access] * 60_000 + REQUEST_OOM)
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts())
    assert out.ready, out.msg
    assert out.details["log_bytes_read"] < (1 << 20), out.details["log_bytes_read"]


# --- a rotated or deleted log does not fail a running server ---------------------------------

def _copytruncate(path):
    with open(path, "rb") as src, open(path + ".1", "wb") as dst:
        dst.write(src.read())
    os.truncate(path, 0)


def _rename(path):
    os.rename(path, path + ".1")
    open(path, "w").close()  # logrotate's `create`


@pytest.mark.parametrize("rotate", [_copytruncate, _rename, os.unlink], ids=["copytruncate", "rename", "delete"])
def test_running_server_is_ready_after_its_log_was_rotated(tmp_path, spawn, rotate):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"})
    rotate(log)
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts(timeout=3))
    assert out.ready and out.reason == "ready", out.msg
    assert out.details["health"]["status"] == 200


# --- a listener on another address of the same port is not ours to judge ----------------------

V6_LISTENER = ("import socket,sys,time\n"
               "s=socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
               "s.bind(('::1', int(sys.argv[1]))); s.listen(); time.sleep(60)\n")


def test_a_listener_on_another_address_is_not_a_stale_server(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"})
    other = spawn.start([sys.executable, "-c", V6_LISTENER, str(port)])
    assert wait_for(lambda: len(_readiness._ports.listeners([port])) == 2, 10)
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts())
    assert out.ready and out.reason == "ready", out.msg
    assert other.poll() is None


# --- an exit after the ready line is described as such ---------------------------------------

def test_a_server_that_died_after_its_ready_line_is_not_said_to_die_before(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    port = free_port()
    _write(log, _startup(port) + [READY])
    proc = sleeper()
    rec = _record(proc, log, port=port)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = _readiness.wait_ready(rec, _opts())
    assert out.reason == "exited" and not out.ready
    assert "before becoming ready" not in out.msg
    assert "after its ready line" in out.msg, out.msg


# --- ready holds for the settle window ------------------------------------------------------

DYING_SERVER = r'''
import http.server, json, os, sys, threading, time
port, log, info = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def crash():
    time.sleep(0.4)
    with open(log, "a") as fh:
        fh.write("[2025-01-01 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                 '  File "scheduler.py", line 1, in event_loop\n'
                 "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                 "[2025-01-01 10:00:10] Received sigquit from a child process. It usually means the child failed.\n")
    os._exit(1)

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = info.encode() if self.path == "/server_info" else b""
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
        if self.path == "/health":
            threading.Thread(target=crash, daemon=True).start()
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_a_death_right_after_the_proofs_is_a_crash_not_ready(tmp_path, spawn):
    port = free_port()
    log = str(tmp_path / "l.log")
    _write(log, _startup(port) + [READY])
    proc = spawn.start([sys.executable, "-c", DYING_SERVER, str(port), log, json.dumps({"version": "0.5.23"})])
    assert wait_for(lambda: bool(_readiness._ports.has_listener(port)), 10)
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts(timeout=10, settle=2.0))
    assert not out.ready and out.reason == "fatal_log", out.msg
    assert "illegal memory access" in out.msg and "before becoming ready" not in out.msg
    assert any("Scheduler hit an exception" in line for line in out.details["decisive_lines"])


@pytest.mark.parametrize("family,address,host,clash", [
    ("ipv6", "::1", "127.0.0.1", False),
    ("ipv4", "127.0.0.1", "::1", False),
    ("ipv4", "127.0.0.2", "127.0.0.1", False),
    ("ipv4", "127.0.0.1", "127.0.0.1", True),
    ("ipv4", "0.0.0.0", "127.0.0.1", True),
    ("ipv4", "127.0.0.1", "0.0.0.0", True),
    ("ipv6", "::", "127.0.0.1", True),  # dual-stack wildcard takes IPv4 too
    ("ipv4", "0.0.0.0", "::", True),
    ("ipv4", "0.0.0.0", "::1", False),
    ("ipv6", "::ffff:127.0.0.1", "127.0.0.1", True),  # IPv4-mapped
    ("ipv6", "::1", "::1", True),
    ("ipv4", "127.0.0.1", "localhost", True),  # a name: what it resolves to
])
def test_address_conflict_compares_family_and_address(family, address, host, clash):
    assert _readiness.address_conflict(family, address, host) is clash


def test_ready_holds_for_the_settle_window(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"})
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts(settle=0.5))
    assert out.ready and "settle window" in out.msg
    assert out.details["settle"] == 0.5 and out.details["proven_at"] is not None


SLOW_INFO_SERVER = r'''
import http.server, os, sys, time
port, delay = int(sys.argv[1]), float(sys.argv[2])
flag = sys.argv[3] if len(sys.argv) > 3 else None

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/server_info":
            time.sleep(delay)  # a slow proof: the settle window's clock runs meanwhile
            if flag:
                open(flag, "w").close()
        body = b'{"version": "0.5.23"}' if self.path == "/server_info" else b""
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

time.sleep(0.3)  # bound after the wait began: a starting launch, not a re-check
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_the_settle_window_of_a_starting_launch_counts_from_its_ready_line(tmp_path, spawn):
    """The proofs' own time is inside the window: a launch alive since its ready line is not
    held for the whole window again once the (slow) proofs are done."""
    rec = _starting(spawn, tmp_path, SLOW_INFO_SERVER, 1.2)
    out = _readiness.wait_ready(rec, _opts(settle=1.0, timeout=10))
    assert out.ready and out.details["already_running"] is False, out.msg
    assert "settle window since its ready line" in out.msg
    d = out.details
    assert d["settle_from"] < d["proven_at"] - 1.0  # the window began before /server_info answered
    assert d["since_launch"] - d["settle_from"] >= 1.0  # and lasted its full length
    assert d["since_launch"] - d["proven_at"] < 1.0  # not a second full window after the proofs


def test_proofs_that_end_after_the_timeout_still_get_the_verdict(tmp_path, spawn):
    """The proofs held after the timeout, and the window (from the ready line) had ended by
    then: the end-of-window check runs at once instead of the timeout."""
    flag = str(tmp_path / "info-answered")
    rec = _starting(spawn, tmp_path, SLOW_INFO_SERVER, 0, flag)

    def clock():  # /server_info answering took the wait 20 s past its timeout (a stalled host)
        return time.monotonic() + (20.0 if os.path.exists(flag) else 0.0)
    out = _readiness.wait_ready(rec, _opts(settle=1.0, timeout=10), clock=clock)
    assert out.ready and out.reason == "ready", out.msg
    assert out.details["elapsed"] > 20


def test_without_a_ready_line_the_settle_window_counts_from_the_proofs(tmp_path, spawn):
    rec = _starting(spawn, tmp_path, SLOW_INFO_SERVER, 0, ready=False)
    out = _readiness.wait_ready(rec, _opts(settle=0.5, timeout=10, require_ready_line=False))
    assert out.ready and out.details["already_running"] is False, out.msg
    assert "since its ready line" not in out.msg
    d = out.details
    assert d["settle_from"] == d["proven_at"] and d["since_launch"] - d["proven_at"] >= 0.5


def test_after_a_lost_port_the_settle_window_counts_from_the_new_proofs(tmp_path, spawn):
    # The window (from the ready line, written before the server even binds) outlasts a slow start
    # on a loaded host, so the port is lost inside it; back well after it.
    rec = _starting(spawn, tmp_path, PORT_DROPPING_SERVER, 0.3, 4.0)
    out = _readiness.wait_ready(rec, _opts(settle=3.0, timeout=20))
    assert out.ready, out.msg
    d = out.details
    assert d["settle_from"] == d["proven_at"], d  # not the poll that saw the loss
    assert d["since_launch"] - d["proven_at"] >= 3.0  # held a full window after getting it back


def test_a_re_check_counts_its_settle_window_from_the_proofs(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"})
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts(settle=0.5))
    assert out.ready and out.details["already_running"] is True
    assert out.details["settle_from"] == out.details["proven_at"]
    assert out.details["since_launch"] - out.details["proven_at"] >= 0.5


PORT_DROPPING_SERVER = r'''
import http.server, sys, threading, time
port = int(sys.argv[1])
bind_after = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0   # > 0: a starting launch
back_after = float(sys.argv[3]) if len(sys.argv) > 3 else None  # the port back after that long

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"version": "0.5.23"}' if self.path == "/server_info" else b""
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
        if self.path == "/health" and not dropped.is_set():
            dropped.set()
            threading.Thread(target=lambda: (time.sleep(0.2), server.socket.close()), daemon=True).start()
    def log_message(self, *a):
        pass

dropped = threading.Event()
time.sleep(bind_after)
server = http.server.HTTPServer(("127.0.0.1", port), H)
threading.Thread(target=server.serve_forever, daemon=True).start()
dropped.wait()
if back_after is None:
    time.sleep(120)  # alive, but no longer listening
time.sleep(back_after or 0)  # gone for longer than the settle window, then back
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_a_port_released_inside_the_settle_window_is_not_ready(tmp_path, spawn):
    port = free_port()
    log = str(tmp_path / "l.log")
    _write(log, _startup(port) + [READY])
    proc = spawn.start([sys.executable, "-c", PORT_DROPPING_SERVER, str(port)])
    assert wait_for(lambda: bool(_readiness._ports.has_listener(port)), 10)
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts(settle=1.5, timeout=3))
    assert not out.ready and out.reason == "timeout", out.msg
    assert "settle window" in out.msg and proc.poll() is None


LATE_SERVER = ("import http.server, os, sys, time\n"
               "time.sleep(float(sys.argv[2])); os.chdir(sys.argv[3])\n"
               "http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]),"
               " bind='127.0.0.1')\n")


def test_a_starting_launch_is_ready_once_it_binds(tmp_path, spawn):
    root = tmp_path / "www"
    root.mkdir()
    (root / "server_info").write_text(json.dumps({"version": "0.5.23"}))
    (root / "health").write_text("")
    port = free_port()
    log = str(tmp_path / "l.log")
    _write(log, STARTUP[:3])
    proc = spawn.start([sys.executable, "-c", LATE_SERVER, str(port), "1.0", str(root)])
    rec = _record(proc, log, port=port)
    _write(log, _startup(port, STARTUP[3:]) + [READY])
    out = _readiness.wait_ready(rec, _opts(timeout=10))
    assert out.ready and out.details["already_running"] is False, out.msg
    assert [t["phase"] for t in out.details["timeline"]][-1] == "ready"


def test_a_running_server_is_judged_without_its_old_lines(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"})
    out = _readiness.wait_ready(_record(proc, log, port=port), _opts())
    assert out.ready and out.details["already_running"] is True
    assert "already running" in out.msg and out.details["phase"] == "ready"


def test_health_none_still_needs_health_when_the_ready_line_is_gone(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"version": "0.5.23"})
    os.unlink(str(tmp_path / "www" / "health"))  # /health answers 404 now
    rec = _record(proc, log, port=port)
    assert _readiness.wait_ready(rec, _opts(health="none")).ready  # the log shows the ready line
    _copytruncate(log)
    out = _readiness.wait_ready(rec, _opts(health="none", timeout=1.5))
    assert not out.ready and out.reason == "timeout" and "/health" in out.msg


def test_a_dead_server_is_explained_by_its_last_lines_not_its_whole_log(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    port = free_port()
    access = '[2025-01-01 11:00:00] INFO:     127.0.0.1:5 - "POST /generate HTTP/1.1" 200 OK'
    crash = ["[2025-01-01 12:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "scheduler.py", line 1, in event_loop',
             "RuntimeError: CUDA error: an illegal memory access was encountered",
             "[2025-01-01 12:00:00] Received sigquit from a child process. It usually means the child failed."]
    _write(log, _startup(port) + [READY]
           + REQUEST_OOM + [access] * 100_000 + crash)
    proc = sleeper()
    rec = _record(proc, log, port=port)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = _readiness.wait_ready(rec, _opts())
    assert out.reason == "fatal_log" and "illegal memory access" in out.msg, out.msg
    assert "after its ready line" in out.msg and "Error in request" not in out.msg
    assert out.details["log_bytes_read"] < 2 * _readiness.DEAD_TAIL_BYTES


# --- a sliced wait: the state carried from slice to slice ----------------------------------

import json as _json  # noqa: E402
import random  # noqa: E402

_VOCAB = [
    "[2025-01-01 10:00:01 TP0] Init torch distributed begin.",
    "[2025-01-01 10:00:02 TP1] Load weight begin. avail mem=78.50 GB",
    "Loading safetensors checkpoint shards:  48% Completed | 31/64 [00:10<00:11,  2.86it/s]",
    "[2025-01-01 10:00:03 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=20.00 GB",
    "[2025-01-01 10:00:04 TP0] KV Cache is allocated. #tokens: 1000",
    "[2025-01-01 10:00:04 TP0] Memory pool end. avail mem=10.00 GB",
    "[2025-01-01 10:00:05] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
    "[2025-01-01 10:00:06] The server is fired up and ready to roll!",
    "[2025-01-01 10:00:02 TP3] Ignore import error when loading sglang.srt.models.x: No module named 'y'",
    "[2025-01-01 10:00:02 TP2] Ignore <module 'triton'> reports ImportError with:",
    "No module named 'triton.compiler.compiler'",
    "[2025-01-01 10:00:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "Traceback (most recent call last):",
    '  File "/venv/sglang/srt/managers/scheduler.py", line 219, in run_scheduler_process',
    "    raise RuntimeError(\"Not enough memory. Please try to increase --mem-fraction-static.\")",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "ModuleNotFoundError: No module named 'sgl_kernel'",
    "[2025-01-01 10:00:08] Received sigquit from a child process. It usually means the child failed.",
    "[2025-01-01 10:00:08 TP1] Rank 1 scheduler is dead",
    "[2025-01-01 10:00:09] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
    "[2025-01-01 10:00:05 TP0] server_args=ServerArgs(model_path='/m', api_key='sk-live-123', port=30000)",
    '[2025-01-01 10:00:10] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK',
]
_FILLER = "[2025-01-01 10:00:03 TP0] filler line %d"


def _random_log(rng: random.Random):
    size = rng.choice([20, 200, 1500, 5000])
    weights = [1] * len(_VOCAB)
    return [rng.choice(_VOCAB) if rng.random() < 0.3 else _FILLER % i for i in range(size)], weights


def _view(an):
    return {
        "decisive_lines": an.decisive_lines(), "cause": an.cause(), "tail": an.tail(),
        "explaining": an.explaining()[:_loganalysis.EXPLAIN_MAX], "decisive": bool(an.decisive),
        "timeline": an.timeline, "phase": an.phase, "ready": an.ready_line, "uvicorn": an.uvicorn_line,
        "bind": an.bind_error, "in_start": an.in_start, "count": an.count,
    }


@pytest.mark.parametrize("seed", range(40))
def test_a_restored_analyzer_answers_like_one_that_read_everything(seed):
    """Split anywhere (inside a traceback, a benign warning's continuation, past the window),
    the analyzer rebuilt from each slice's snapshot gives the same answers at every cut."""
    rng = random.Random(seed)
    lines, _weights = _random_log(rng)
    cuts = sorted(rng.sample(range(1, len(lines)), min(len(lines) - 1, rng.randint(1, 8)))) + [len(lines)]
    whole, sliced = _analyzer(), _analyzer()
    history = seed % 7 == 0  # a re-check's head read as history
    start = 0
    for cut in cuts:
        chunk = lines[start:cut]
        whole.feed(chunk, 1e9, history=history)
        sliced.feed(chunk, 1e9, history=history)
        state = _json.loads(_json.dumps(sliced.snapshot()))
        sliced = _analyzer()
        sliced.restore(state)
        assert _view(sliced) == _view(whole), "differs after line %d" % cut
        start = cut


def test_a_snapshot_is_bounded_and_redacted():
    an = _analyzer()
    an.feed([_FILLER % i for i in range(20000)] + [_VOCAB[20]], 1e9)
    state = an.snapshot(lambda text: text.replace("sk-live-123", "********"))
    assert len(state["lines"]) <= _loganalysis.TRACEBACK_LOOKBACK + 1
    assert "sk-live-123" not in _json.dumps(state)


def _sliced_wait(record, opts, seconds=0.1):
    """What the action plugin does: slices, each from the JSON of the previous slice's state."""
    step = _readiness.wait_ready_slice(record, opts, None, seconds)
    slices = 1
    while step.outcome is None:
        state = _json.loads(_json.dumps(step.state))
        step = _readiness.wait_ready_slice(None, opts, state, seconds)
        slices += 1
    return step.outcome, slices


def _crash_scenario(spawn, tmp_path, tag):
    """A start that dies with a traceback written in pieces, the process killed at its end."""
    import threading
    proc = spawn.start(["sleep", "60"])
    log = str(tmp_path / ("%s.log" % tag))
    _write(log, ["earlier run: The server is fired up and ready to roll!"])
    record = _record(proc, log, offset=os.path.getsize(log))
    pieces = [STARTUP[:4], SCHEDULER_CRASH[:3], SCHEDULER_CRASH[3:]]

    def writer():
        for piece in pieces:
            time.sleep(0.3)
            _write(log, piece)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    thread = threading.Thread(target=writer)
    thread.start()
    return record, thread, log


def test_a_sliced_wait_gives_the_verdict_of_one_wait(tmp_path, spawn):
    """Same scenario twice: one uninterrupted wait, then slices of 0.1 s resumed from JSON.
    The reason, the message, the decisive lines and the bytes read are the same."""
    opts = _opts(timeout=20.0, api_key="sk-secret-123")
    record, thread, log = _crash_scenario(spawn, tmp_path, "whole")
    whole = _readiness.wait_ready(record, opts)
    thread.join()
    record2, thread, log2 = _crash_scenario(spawn, tmp_path, "sliced")
    sliced, slices = _sliced_wait(record2, opts)
    thread.join()
    assert slices > 1
    assert (whole.ready, whole.reason) == (sliced.ready, sliced.reason) == (False, "fatal_log")
    assert whole.msg.replace(str(record["pid"]), "PID") == sliced.msg.replace(str(record2["pid"]), "PID")
    assert whole.details["decisive_lines"] == sliced.details["decisive_lines"]
    assert any("Not enough memory" in line for line in sliced.details["decisive_lines"])
    assert whole.details["log_tail"] == sliced.details["log_tail"]
    assert [t["phase"] for t in whole.details["timeline"]] == [t["phase"] for t in sliced.details["timeline"]]
    # nothing read twice: each slice went on from the byte the previous one reached
    size = os.path.getsize(log2) - record2["log_offset"]
    assert sliced.details["log_bytes_read"] == whole.details["log_bytes_read"] == size


def test_a_sliced_wait_is_ready_like_one_wait(tmp_path, spawn):
    proc, port, log = _http_launch(spawn, tmp_path, {"tp_size": 2, "port": 0, "version": "0.5.6"})
    opts = _opts(expect={"tp_size": "2"}, settle=0.5)
    whole = _readiness.wait_ready(_record(proc, log, port=port), opts)
    sliced, _slices = _sliced_wait(_record(proc, log, port=port), opts, seconds=0.05)
    assert whole.ready and sliced.ready, sliced.msg
    for key in ("matched", "server_version", "health", "listeners", "phase", "already_running",
                "log_bytes_read", "decisive_lines", "log_tail"):
        assert whole.details[key] == sliced.details[key], key
    assert whole.msg == sliced.msg


def test_the_timeout_counts_from_the_first_slice(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    _write(log, STARTUP[:3])
    record = _record(sleeper(), log)
    started = time.monotonic()
    out, slices = _sliced_wait(record, _opts(timeout=1.0), seconds=0.2)
    assert out.reason == "timeout" and slices > 1
    assert out.details["elapsed"] >= 1.0 and time.monotonic() - started >= 1.0


def test_pending_says_where_the_start_is(tmp_path, sleeper):
    log = str(tmp_path / "l.log")
    _write(log, STARTUP[:3])
    with open(log, "ab") as fh:
        fh.write(b"\rLoading safetensors checkpoint shards:  47% Completed | 30/64 [00:00<00:00, 680.50it/s]"
                 b"\rLoading safetensors checkpoint shards:  48% Completed | 31/64 [00:00<00:00, 628.65it/s]")
    step = _readiness.wait_ready_slice(_record(sleeper(), log), _opts(timeout=30.0), None, 0.2)
    assert step.outcome is None
    assert step.pending["progress"]["stage"] == "loading weights"
    assert step.pending["progress"]["shards"] == [31, 64]
    assert step.pending["phase"] == "weight load begin"
    assert "sk-secret-123" not in _json.dumps(step.state)


@pytest.mark.parametrize("state", [{"version": 99}, {"version": _readiness.SNAPSHOT_VERSION},
                                   {"version": _readiness.SNAPSHOT_VERSION, "instance": {"pid": 1, "bogus": 2}}])
def test_a_resume_state_this_module_did_not_write_is_refused(state):
    with pytest.raises(SglangError) as err:
        _readiness.wait_ready_slice(None, _opts(), state, 1.0)
    assert err.value.details["reason"] == "invalid_argument"


def test_0523_capture_lines_are_the_cuda_graph_phases():
    """0.5.23 words them `Capture target decode CUDA graph begin/end` (cuda_graph_setup.py):
    without them the timeline had no capture phase, and a cold compile there was never named."""
    log = _analyzer(1234)
    log.feed(["[2025-01-01 10:00:01 TP0] Memory pool end. avail mem=10.00 GB",
              "[2025-01-01 10:00:02 TP0] Capture target decode CUDA graph begin. backend=full, "
              "num_tokens_per_req=1, avail mem=10.00 GB",
              "[2025-01-01 10:00:40 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=38.00 s, "
              "mem usage=0.42 GB, avail mem=9.58 GB."], time.time())
    at = {t["phase"]: t["seconds"] for t in log.timeline}
    assert at["cuda graph end"] - at["cuda graph begin"] == 38.0
