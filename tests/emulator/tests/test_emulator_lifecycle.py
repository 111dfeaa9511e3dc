"""A healthy launch: process shape, log sequence, HTTP API, shutdown, bind error, log level."""

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest

from conftest import Launch, alive, children_of, free_port, read_proc

KEY = "s3cret-key"


def http(port: int, path: str, key: Optional[str] = None, body: Any = None,
         host: str = "127.0.0.1") -> Tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    url = f"http://{host}:{port}{path}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, data=data, headers=headers), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def server(emulator_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    """One tp=2 server shared by the read-only tests of this module."""
    work = tmp_path_factory.mktemp("srv")
    dump = work / "hs"
    port = free_port()
    launch = Launch(emulator_python, work, [
        "--model-path", "org/model", "--port", str(port), "--tp-size", "2", "--api-key", KEY,
        "--enable-metrics", "--reasoning-parser", "kimi_k2",
    ], {"SGLANG_HS_DUMP_DIR": str(dump)})
    try:
        launch.wait_log("fired up and ready to roll")
        yield {"launch": launch, "port": port, "dump": dump}
    finally:
        launch.cleanup()


def test_process_titles_in_proc(server: Dict[str, Any], titles: None) -> None:
    launch: Launch = server["launch"]
    cmdline = read_proc(launch.pid, "cmdline").split(b"\0")
    assert cmdline[1:3] == [b"-m", b"sglang.launch_server"]  # main keeps its command line
    seen = {}
    for pid in children_of(launch.pid):
        seen[read_proc(pid, "cmdline").split(b"\0")[0].decode()] = pid
    assert {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"} <= set(seen)
    assert read_proc(seen["sglang::scheduler_TP0"], "comm").strip() == b"sglang::schedul"
    marker = f"LLMOPS_SGLANG_LAUNCH_ID={launch.marker}".encode()
    for pid in children_of(launch.pid):  # every child inherits the marker (SPT_NOENV=1 here)
        assert marker in read_proc(pid, "environ").split(b"\0")
        assert os.getpgid(pid) == launch.pid  # no setsid: children share the launcher's group


def test_log_sequence(server: Dict[str, Any]) -> None:
    log = server["launch"].log()
    expected = [
        r"\] server_args=ServerArgs\(model_path='org/model'.*api_key='s3cret-key'",
        r" TP0\] Init torch distributed begin\.",
        r" TP0\] Load weight begin\. avail mem=[\d.]+ GB",
        r"Loading safetensors checkpoint shards: 100% Completed \| 4/4 \[",  # rank 0's tqdm bar
        r" TP0\] Load weight end\.",
        r" TP0\] KV Cache is allocated\. #tokens: \d+",
        r" TP0\] Memory pool end\. avail mem=",
        r" TP0\] Capture cuda graph begin\.",
        r"Capturing batches \(bs=1 avail_mem=[\d.]+ GB\): 100%\|",
        r" TP0\] Capture cuda graph end\. Time elapsed",
        r" TP0\] max_total_num_tokens=\d+",
        r"\] INFO:     Started server process \[\d+\]",
        r"\] INFO:     Waiting for application startup\.",
        r"\] INFO:     Application startup complete\.",
        rf"\] INFO:     Uvicorn running on http://127\.0\.0\.1:{server['port']} \(Press CTRL\+C to quit\)",
        r"\] The server is fired up and ready to roll!",
    ]
    pos = 0
    for pattern in expected:
        match = re.compile(pattern).search(log, pos)
        assert match, f"{pattern!r} missing after offset {pos}:\n{log}"
        pos = match.end()
    # not anchored: TP0's progress bar has no newline until it closes, so another rank's line
    # can continue the bar's physical line (as in a real log)
    assert re.search(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP1\] Load weight begin", log)
    assert re.search(r'\] INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK',
                     server["launch"].stdout())


# Real 0.5.23 warnings whose text contains fatal-looking words, printed by healthy servers that
# lack optional packages (srt/models/registry.py, srt/managers/multimodal_processor.py,
# custom_all_reduce_ops.py, srt/utils/common.py).
BENIGN = [
    r"^\[[^\]]* TP0\] Failed to import from custom_ar with ModuleNotFoundError\(\"No module named 'sgl_kernel\.allreduce'\"\)$",
    r"^\[[^\]]* TP0\] Ignore <module 'triton\.compiler' .*> reports ImportError with:\nNo module named 'triton\.compiler\.compiler'$",
    r"^\[[^\]]* TP1\] Ignore import error when loading sglang\.srt\.models\.glm_ocr: No module named 'transformers\.models\.glm_ocr'$",
    r"^\[[^\]]*\d\] Ignore import error when loading sglang\.srt\.multimodal\.processors\.glm_ocr: No module named 'transformers\.models\.glm_ocr'$",
]


def test_benign_import_warnings_at_every_start(server: Dict[str, Any]) -> None:
    log = server["launch"].log()
    for pattern in BENIGN:
        assert re.search(pattern, log, re.M), f"{pattern!r} missing:\n{log}"
    assert log.index("Ignore import error when loading sglang.srt.models") < log.index("ready to roll")


def test_benign_warnings_can_be_turned_off(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_BENIGN_WARNINGS": "0"})
    launch.wait_log("fired up and ready to roll")
    assert "Ignore import error" not in launch.log() and "custom_ar" not in launch.log()


def test_endpoints_and_api_key(server: Dict[str, Any]) -> None:
    port = server["port"]
    assert http(port, "/health")[0] == 200
    assert http(port, "/health_generate")[0] == 200
    assert http(port, "/metrics")[0] == 200 and b"sglang:num_running_reqs" in http(port, "/metrics")[1]
    for path in ("/server_info", "/get_server_info", "/model_info", "/v1/models"):
        assert http(port, path)[0] == 401
        assert http(port, path, key="wrong")[0] == 401
        assert http(port, path, key=KEY)[0] == 200
    info = json.loads(http(port, "/server_info", key=KEY)[1])
    assert info["tp_size"] == 2 and info["port"] == port and info["api_key"] == KEY
    assert info["reasoning_parser"] == "kimi_k2" and info["version"] == "0.5.23+emulator"
    assert "pid" not in info
    model = json.loads(http(port, "/model_info", key=KEY)[1])
    assert model["model_path"] == "org/model" and model["reasoning_parser"] == "kimi_k2"
    assert model["is_generation"] is True and model["tokenizer_path"] == "org/model"
    assert json.loads(http(port, "/v1/models", key=KEY)[1])["data"][0]["id"] == "org/model"
    status, body = http(port, "/generate", key=KEY, body={"text": "hi", "sampling_params": {}})
    assert status == 200 and {"text", "meta_info"} <= set(json.loads(body))
    assert http(port, "/generate", body={"text": "hi"})[0] == 401
    assert http(port, "/nope", key=KEY)[0] == 404


def test_reasoning_content_split_and_dump_dir(server: Dict[str, Any]) -> None:
    before = len(list(server["dump"].glob("hs_*.pt")))
    status, body = http(server["port"], "/v1/chat/completions", key=KEY,
                        body={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    msg = json.loads(body)["choices"][0]["message"]
    assert status == 200 and msg["reasoning_content"] and "<think>" not in msg["content"]
    assert len(list(server["dump"].glob("hs_*.pt"))) == before + 1
    http(server["port"], "/generate", key=KEY, body={"text": "x"})
    assert len(list(server["dump"].glob("hs_*.pt"))) == before + 2


def test_no_reasoning_parser_keeps_think_in_content(launcher) -> None:
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port), "--disable-cuda-graph")
    launch.wait_log("fired up")
    assert "Capture cuda graph" not in launch.log()
    assert "is deprecated" in launch.log()
    status, body = http(port, "/v1/chat/completions", body={"messages": [{"role": "user", "content": "q"}]})
    msg = json.loads(body)["choices"][0]["message"]
    assert msg["reasoning_content"] is None and "<think>" in msg["content"]
    assert http(port, "/metrics")[0] == 404


def test_health_503_before_ready(launcher) -> None:
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port),
                      env={"SGLANG_EMULATOR_PHASE_SECONDS": "1.0"})
    launch.wait_log("Uvicorn running on")
    assert http(port, "/health")[0] == 503  # warmup waits one phase before its first request
    assert http(port, "/health_generate")[0] == 503
    launch.wait_log("fired up")
    assert http(port, "/health")[0] == 200


def test_sigterm_clean_exit(launcher) -> None:
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port), "--tp-size", "2")
    launch.wait_log("fired up")
    kids = children_of(launch.pid)
    os.kill(launch.pid, signal.SIGTERM)
    assert launch.wait_exit(timeout=15) == 0
    log = launch.log()
    assert "SIGTERM received." in log and "Draining requests and shutting down" in log
    assert "INFO:     Finished server process" in log
    deadline = time.monotonic() + 5
    while any(alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(k) for k in kids)


def test_bind_error_exits_3(launcher) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        launch = launcher("--model-path", "m", "--port", str(port))
        assert launch.wait_exit(timeout=20) == 3
    log = launch.log()
    assert (f"ERROR:    [Errno 98] error while attempting to bind on address "
            f"('127.0.0.1', {port}): address already in use") in log
    assert log.index("max_total_num_tokens=") < log.index("Errno 98")  # no pre-check of the port


def test_log_level_warning_hides_ready(launcher) -> None:
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port), "--log-level", "warning")
    deadline = time.monotonic() + 20
    while not (_listening(port) and http(port, "/health")[0] == 200):
        assert time.monotonic() < deadline and launch.proc.poll() is None, launch.log()
        time.sleep(0.1)
    time.sleep(0.3)
    assert "fired up" not in launch.log() and "Load weight" not in launch.log()
    assert "Uvicorn running" not in launch.log()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_log_ms_and_console_script(launcher) -> None:
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port), env={"SGLANG_LOG_MS": "1"},
                      console=True)
    log = launch.wait_log("fired up")
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} TP0\] Load weight begin", log, re.M)
    assert "recommended entrypoint" not in log


def test_dp_and_tokenizer_workers_titles(launcher, titles) -> None:
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port), "--dp-size", "2",
                      "--tokenizer-worker-num", "2")
    launch.wait_log("fired up")
    seen = []
    for pid in children_of(launch.pid):
        seen.append(read_proc(pid, "cmdline").split(b"\0")[0].decode())
        seen += [read_proc(g, "cmdline").split(b"\0")[0].decode() for g in children_of(pid)]
    assert "sglang::data_parallel_controller" in seen
    assert {"sglang::scheduler_DP0_TP0_EP0", "sglang::scheduler_DP1_TP0_EP0"} <= set(seen)
    workers = [t for t in seen if t.startswith("sglang::tokenizer_worker:")]
    assert len(workers) == 2


def test_ipv6_host(launcher) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        port = free_port(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("no ::1")
    launch = launcher("--model-path", "m", "--port", str(port), "--host", "::1")
    log = launch.wait_log("fired up")
    assert f"Uvicorn running on http://[::1]:{port}" in log
    assert http(port, "/health", host="[::1]")[0] == 200


def test_environ_is_wiped_by_setproctitle_without_spt_noenv(launcher, emulator_python: str) -> None:
    """Real sglang behaviour: setproctitle reuses the environ area, hiding the marker."""
    port = free_port()
    launch = launcher("--model-path", "m", "--port", str(port), env={"SPT_NOENV": ""})
    launch.wait_log("fired up")
    marker = f"LLMOPS_SGLANG_LAUNCH_ID={launch.marker}".encode()
    assert marker in read_proc(launch.pid, "environ").split(b"\0")
    sched = [p for p in children_of(launch.pid) if read_proc(p, "cmdline").startswith(b"sglang::sch")]
    if subprocess.run([emulator_python, "-c", "import setproctitle"], check=False).returncode != 0:
        pytest.skip("setproctitle missing: the prctl fallback leaves environ alone")
    assert sched and marker not in read_proc(sched[0], "environ").split(b"\0")
