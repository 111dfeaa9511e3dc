"""sglang_launch end to end against the emulator, a venv without sglang and the system python.

Every server started here is killed in `finally` by the process group from its launch record
(the session fixture also sweeps anything launched with a state dir under pytest's tmp root).
"""
from __future__ import annotations

import json
import os
import signal
import socket
from typing import Any, Dict

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers.fixtures import TEST_RUN_ID, free_port, remove_instance_cgroup, run_module, unique_name, wait_for

ITEST = unique_name("itest")  # its own instance name: cgroups and teardowns go by name

API_KEY = "sk-test-4f9a1c2e7b"
READY = "The server is fired up and ready to roll!"
EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture
def model_dir(tmp_path) -> str:
    path = tmp_path / "my model's \"quoted\" dir"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return str(path)


def _args(venv: str, model: str, state_dir: str, log_dir: str, port: int, **extra: Any) -> Dict[str, Any]:
    args = {"name": ITEST, "venv": venv, "model_path": model, "port": port, "state_dir": state_dir,
            "log_dir": log_dir, "gpu_backend": "none", "env": dict(EMU_ENV), "lock_timeout": 10}
    args.update(extra)
    return args


def _emu_venv(emulator_python: str) -> str:
    return os.path.dirname(os.path.dirname(emulator_python))


def _secret_free(*blobs: Any) -> None:
    for blob in blobs:
        assert API_KEY not in (blob if isinstance(blob, str) else json.dumps(blob, default=str))


def test_launch_survives_is_idempotent_and_guards_a_running_server(emulator_python, model_dir, state_dir,
                                                                   log_dir, launched):
    port = free_port()
    base = _args(_emu_venv(emulator_python), model_dir, state_dir, log_dir, port, api_key=API_KEY,
                 args={"reasoning-parser": "kimi_k2", "served_model_name": "x; echo $HOME | `id` && 'q'",
                       "trust-remote-code": True, "disable-radix-cache": False})

    plan = run_module("sglang_launch", base, check_mode=True, diff=True)
    assert plan["_rc"] == 0 and plan["changed"] and plan["reason"] == "new" and plan["pid"] is None
    assert not os.path.exists(os.path.join(state_dir, ITEST + ".json"))

    result = run_module("sglang_launch", base)
    assert result["_rc"] == 0, result.get("msg")
    record = result["record"]
    launched.append(record)
    assert result["changed"] and result["reason"] == "new"
    # the module process has exited; the server lives on and reaches ready in its own log
    pid = result["pid"]
    assert wait_for(lambda: READY in open(result["log_path"]).read(), 20), open(result["log_path"]).read()[-2000:]
    assert _procs.is_alive(pid, record["start_time"])

    on_disk = json.load(open(os.path.join(state_dir, ITEST + ".json")))
    assert on_disk == record
    assert oct(os.stat(os.path.join(state_dir, ITEST + ".json")).st_mode & 0o777) == "0o600"
    proc = _procs.read_proc(pid)
    assert (proc.pgid, proc.sid) == (record["pgid"], record["sid"]) == (record["supervisor_pid"],) * 2
    marker = _procs.marker_of(pid)
    assert marker == {"LLMOPS_SGLANG_INSTANCE": ITEST, "LLMOPS_SGLANG_LAUNCH_ID": record["launch_id"],
                      "LLMOPS_SGLANG_STATE_DIR": state_dir}
    environ = _procs.read_environ(pid)
    assert environ["PATH"].startswith(_emu_venv(emulator_python) + "/bin:")
    assert "127.0.0.1" in environ["no_proxy"] and environ["TMPDIR"] == record["tmpdir"]
    with open("/proc/%d/cmdline" % pid, "rb") as fh:
        cmdline = fh.read().split(b"\0")
    assert model_dir.encode() in cmdline
    assert b"x; echo $HOME | `id` && 'q'" in cmdline
    assert os.path.realpath(os.path.join(log_dir, ITEST + ".log")) == result["log_path"]
    assert record["expect"] == {"model_path": model_dir, "tp_size": 1, "port": port, "reasoning_parser": "kimi_k2"}
    assert record["entrypoint"] == "launch_server" and record["sglang_version"] == "0.5.23+emulator"
    assert "--api-key" in record["argv"] and record["fingerprint_inputs"]["api_key"] == "********"
    _secret_free(record, result, plan, open(os.path.join(state_dir, ITEST + ".json")).read())

    again = run_module("sglang_launch", base)
    assert again["_rc"] == 0 and not again["changed"] and again["reason"] == "running"
    assert again["pid"] == pid

    changed_args = dict(base, args={"reasoning-parser": "qwen3", "served_model_name": base["args"]["served_model_name"],
                                    "trust-remote-code": True})
    plan = run_module("sglang_launch", changed_args, check_mode=True, diff=True)
    assert plan["_rc"] == 0 and plan["changed"] and plan["reason"] == "config_changed"
    assert {"key": "args.--reasoning-parser", "before": "kimi_k2", "after": "qwen3"} in plan["changes"]
    assert '"--reasoning-parser": "kimi_k2"' in plan["diff"]["before"]
    assert '"--reasoning-parser": "qwen3"' in plan["diff"]["after"]
    _secret_free(plan)

    key_change = run_module("sglang_launch", dict(base, api_key="another-key-123"), check_mode=True)
    assert key_change["reason"] == "config_changed" and key_change["changes"][0]["key"] == "secret"

    refused = run_module("sglang_launch", changed_args)
    assert refused["_rc"] != 0 and refused["reason"] == "config_changed"
    assert "sglang_teardown" in refused["msg"] and "args.--reasoning-parser" in refused["msg"]

    for bad, needle in (({"reasoning-parser": "kimi_k9"}, "valid choices: "),
                        ({"reasoning-parsre": "kimi_k2"}, "has no flag --reasoning-parsre")):
        failed = run_module("sglang_launch", dict(base, args=bad))
        assert failed["_rc"] != 0 and failed["reason"] == "preflight_failed"
        assert needle in failed["msg"] and failed["preflight"]["errors"]
        if "kimi_k9" in str(bad):
            assert "kimi_k2" in failed["msg"]
    assert _procs.is_alive(pid, record["start_time"])
    assert json.load(open(os.path.join(state_dir, ITEST + ".json")))["launch_id"] == record["launch_id"]


def test_port_held_by_a_foreign_process(emulator_python, model_dir, state_dir, log_dir):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        args = _args(_emu_venv(emulator_python), model_dir, state_dir, log_dir, port)
        # a holder that is not an sglang server of this user is refused by the preflight, in
        # check mode too (a play can then stop before anything else is touched)
        for plan in (run_module("sglang_launch", args, check_mode=True), run_module("sglang_launch", args)):
            assert plan["_rc"] != 0 and not plan["changed"] and plan["reason"] == "port_busy"
            assert plan["port_holder"][0]["pid"] == os.getpid() and plan["port_holder"][0]["foreign"]
            assert "pid %d" % os.getpid() in plan["msg"] and "nothing was stopped" in plan["msg"]
        assert not os.path.exists(os.path.join(state_dir, ITEST + ".json"))
    finally:
        sock.close()


def test_no_sglang_venv_names_the_venv_that_has_it(emulator_python, nosglang_venv, model_dir, state_dir, log_dir):
    args = _args(nosglang_venv, model_dir, state_dir, log_dir, free_port(),
                 search_paths=[_emu_venv(emulator_python)])
    failed = run_module("sglang_launch", args)
    assert failed["_rc"] != 0 and failed["reason"] == "preflight_failed"
    assert "interpreter %s/bin/python cannot import sglang" % nosglang_venv in failed["msg"]
    assert "No module named sglang.launch_server" in failed["msg"]
    assert "set venv: %s" % _emu_venv(emulator_python) in failed["msg"]


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no system python")
def test_system_python_fails_in_preflight(emulator_python, model_dir, state_dir, log_dir):
    args = _args(None, model_dir, state_dir, log_dir, free_port(), search_paths=[_emu_venv(emulator_python)])
    args.pop("venv")
    args["python"] = SYSTEM_PYTHON
    failed = run_module("sglang_launch", args)
    assert failed["_rc"] != 0
    assert "interpreter %s cannot import sglang" % SYSTEM_PYTHON in failed["msg"]
    assert _emu_venv(emulator_python) in failed["msg"]
    # a python that is not an absolute path: tests/unit/modules/test_sglang_launch.yaml (in-process)


def test_bad_inputs_are_all_reported_at_once(emulator_python, model_dir, state_dir, log_dir):
    args = _args(_emu_venv(emulator_python), model_dir, state_dir, log_dir, "80a", tp_size=0, api_key=API_KEY,
                 args={"--reasoning-parser": "kimi_k2", "tp size": 2, "port": 1, "log-level": "warning"},
                 env=dict(EMU_ENV, **{"BAD-KEY": "x"}))
    failed = run_module("sglang_launch", args)
    assert failed["_rc"] != 0 and failed["reason"] == "preflight_failed"
    errors = failed["preflight"]["errors"]
    for needle in ("port '80a' is not an integer", "tp_size must be at least 1", "starts with '-'",
                   "contains whitespace", "duplicates the 'port' parameter", "--log-level warning hides",
                   "env key 'BAD-KEY'"):
        assert any(needle in e for e in errors), (needle, errors)
    assert failed["msg"].startswith("preflight failed: ")
    _secret_free(failed)


def test_serve_entrypoint_and_log_level_override(emulator_python, model_dir, state_dir, log_dir, launched):
    args = _args(_emu_venv(emulator_python), model_dir, state_dir, log_dir, free_port(), name="served",
                 entrypoint="serve", args={"log-level": "warning"}, allow_log_level_warning=True)
    result = run_module("sglang_launch", args)
    assert result["_rc"] == 0, result.get("msg")
    launched.append(result["record"])
    assert result["preflight"]["warnings"] and "hides" in result["preflight"]["warnings"][0]
    cmdline = _procs.read_proc(result["pid"]).cmdline
    assert os.path.basename(cmdline[1]) == "sglang" and cmdline[2] == "serve"
    assert result["record"]["entrypoint"] == "serve"


def test_relaunch_after_death_and_lock(emulator_python, model_dir, state_dir, log_dir, launched):
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

    args = _args(_emu_venv(emulator_python), model_dir, state_dir, log_dir, free_port(), keep_logs=1)
    first = run_module("sglang_launch", args)
    assert first["_rc"] == 0, first.get("msg")
    launched.append(first["record"])
    os.killpg(first["record"]["pgid"], signal.SIGKILL)
    assert wait_for(lambda: not _procs.is_alive(first["pid"], first["record"]["start_time"]), 10)
    plan = run_module("sglang_launch", args, check_mode=True)
    assert plan["changed"] and plan["reason"] == "not_running"
    with _lock.instance_lock(state_dir, ITEST, 5):
        locked = run_module("sglang_launch", dict(args, lock_timeout=0.3))
    assert locked["_rc"] != 0 and locked["reason"] == "locked"
    second = run_module("sglang_launch", args)
    assert second["_rc"] == 0, second.get("msg")
    launched.append(second["record"])
    assert second["reason"] == "not_running" and second["pid"] != first["pid"]
    assert second["log_path"] != first["log_path"] and not os.path.exists(first["log_path"])  # keep_logs: 1
    assert os.path.realpath(os.path.join(log_dir, ITEST + ".log")) == second["log_path"]


def test_server_dying_at_once_fails_with_redacted_tail(emulator_python, model_dir, state_dir, log_dir):
    env = dict(EMU_ENV, SGLANG_EMULATOR_FAULT="import_error")
    args = _args(_emu_venv(emulator_python), model_dir, state_dir, log_dir, free_port(), api_key=API_KEY, env=env)
    failed = run_module("sglang_launch", args)
    if failed["_rc"] == 0:  # slower than the settle window: the ready module catches it instead
        os.killpg(failed["record"]["pgid"], signal.SIGKILL)
        remove_instance_cgroup(ITEST)  # stopped by its group here, not by the module: its cgroup too
        pytest.skip("emulator import_error took longer than the launch settle window")
    assert failed["reason"] == "died" and "exited right after the launch" in failed["msg"]
    assert failed["log_tail"]
    _secret_free(failed)


def test_secret_env_and_args_are_masked_in_invocation_and_messages(emulator_python, model_dir, state_dir, log_dir):
    """HF_TOKEN in env, a token flag in args and a wrongly typed secret never show in clear."""
    args = _args(_emu_venv(emulator_python), model_dir, state_dir, log_dir, free_port(),
                 env=dict(EMU_ENV, HF_TOKEN="hf_LeakMe123", DB_PASSWORD=["LeakMe456"]),
                 args={"hf-token": "LeakMe789"})
    res = run_module("sglang_launch", args, check_mode=True)
    assert res.get("failed"), res  # the list-typed env value fails preflight
    blob = str(res)
    for secret in ("hf_LeakMe123", "LeakMe456", "LeakMe789"):
        assert secret not in blob, secret
    assert "DB_PASSWORD" in res["msg"]
