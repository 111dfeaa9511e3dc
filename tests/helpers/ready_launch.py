"""Start the emulator the way sglang_launch would and write its launch record by hand (the record
contract of docs/conventions.md), for readiness tests that must not depend on the launch module."""
from __future__ import annotations

import os
import time
import uuid
from typing import Any, Dict, Optional, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from helpers.fixtures import free_port, run_module

MODEL = "/models/emulated-llama"


def launch(spawn: Any, emulator_python: str, state_dir: str, log_path: str, name: str = "ready",
           port: Optional[int] = None, host: str = "127.0.0.1", tp_size: int = 1,
           args: Sequence[str] = (), env: Optional[Dict[str, str]] = None) -> Tuple[Any, Dict[str, Any]]:
    port = port or free_port(host)
    launch_id = uuid.uuid4().hex
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    argv = [emulator_python, "-m", "sglang.launch_server", "--model-path", MODEL,
            "--host", host, "--port", str(port), "--tp-size", str(tp_size)] + list(args)
    full_env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "LLMOPS_SGLANG_INSTANCE": name,
                "LLMOPS_SGLANG_LAUNCH_ID": launch_id, "LLMOPS_SGLANG_STATE_DIR": state_dir,
                "SGLANG_LOG_MS": "1", "no_proxy": "*", "NO_PROXY": "*"}
    full_env.update(env or {})
    proc = spawn.start(argv, env=full_env, log_path=log_path)
    info = _procs.read_proc(proc.pid)
    assert info is not None, "the emulator died at once"
    record = {
        "name": name, "launch_id": launch_id, "state_dir": state_dir,
        "pid": proc.pid, "start_time": info.start_time, "pgid": info.pgid, "sid": info.sid,
        "interpreter": emulator_python, "entrypoint": "launch_server",
        "argv": _redact.redact_argv(argv), "log_path": log_path, "log_offset": offset,
        "host": host, "port": port, "tp_size": tp_size, "nnodes": 1, "node_rank": 0,
        "expect": {"model_path": MODEL, "tp_size": tp_size, "port": port},
        "exit_path": _record.exit_path(state_dir, name), "launched_at": time.time(),
    }
    _record.write_record(state_dir, name, record)
    return proc, record


def ready(state_dir: str, name: str = "ready", **args: Any) -> Dict[str, Any]:
    # A short settle window: the tests of the window itself set their own.
    params: Dict[str, Any] = {"name": name, "state_dir": state_dir, "timeout": 30, "poll_interval": 0.1,
                              "settle": 0.5}
    params.update(args)
    return run_module("sglang_ready", params)


def healthy(host: str, port: int) -> bool:
    return _http.request(host, port, "/health", timeout=1).status == 200


def append(path: str, lines: Sequence[str]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))
