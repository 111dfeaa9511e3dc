"""CLI: parser shape (introspectable like real sglang), errors, import failure."""

import subprocess
import textwrap
from pathlib import Path

from conftest import free_port

PROBE = textwrap.dedent("""
    import argparse, json, runpy, sys
    captured = {}
    def fake_parse_args(self, args=None, namespace=None):
        captured["argv"] = list(args or [])
        captured["actions"] = {
            a.dest: {"flags": a.option_strings, "default": a.default,
                     "choices": list(a.choices) if a.choices else None,
                     "required": a.required}
            for a in self._actions}
        raise SystemExit(0)
    argparse.ArgumentParser.parse_args = fake_parse_args
    sys.argv = ["x", "--model-path", "m"]
    try:
        runpy.run_module("sglang.launch_server", run_name="__main__")
    except SystemExit:
        pass
    print(json.dumps(captured))
""")


def run(python: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([python, *args], capture_output=True, text=True, timeout=60, check=False, **kw)


def test_parser_is_introspectable(emulator_python: str) -> None:
    import json

    res = run(emulator_python, "-c", PROBE)
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["argv"] == ["--model-path", "m"]
    acts = data["actions"]
    assert acts["model_path"]["required"] and "--model" in acts["model_path"]["flags"]
    assert acts["host"]["default"] == "127.0.0.1" and acts["port"]["default"] == 30000
    assert "--tensor-parallel-size" in acts["tp_size"]["flags"] and acts["tp_size"]["default"] == 1
    assert acts["mem_fraction_static"]["default"] is None
    assert acts["log_level"]["default"] == "info"
    for parser in ("reasoning_parser", "tool_call_parser"):
        assert "kimi_k2" in acts[parser]["choices"] and "auto" in acts[parser]["choices"]
    assert "kimi_k3" in acts["reasoning_parser"]["choices"]
    for dest in ("disable_cuda_graph", "trust_remote_code", "nnodes", "node_rank",
                 "dist_init_addr", "tokenizer_worker_num", "watchdog_timeout", "api_key"):
        assert dest in acts


def test_help_and_console_script(emulator_python: str) -> None:
    res = run(emulator_python, "-m", "sglang.launch_server", "--help")
    assert res.returncode == 0 and "--model-path" in res.stdout
    assert "'sglang serve' is the recommended entrypoint" in res.stderr
    sglang = str(Path(emulator_python).parent / "sglang")
    res = subprocess.run([sglang, "serve", "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0 and "usage: sglang serve" in res.stdout
    res = subprocess.run([sglang, "version"], capture_output=True, text=True, timeout=60, check=False)
    assert "0.5.23" in res.stdout
    res = run(emulator_python, "-c", "import importlib.metadata as m; print(m.version('sglang'))")
    assert res.stdout.strip() == "0.5.23+emulator"


def test_unknown_flag_and_bad_choice_exit_2(emulator_python: str) -> None:
    res = run(emulator_python, "-m", "sglang.launch_server", "--model-path", "m", "--no-such-flag")
    assert res.returncode == 2 and "unrecognized arguments: --no-such-flag" in res.stderr
    res = run(emulator_python, "-m", "sglang.launch_server", "--model-path", "m",
              "--reasoning-parser", "nope")
    assert res.returncode == 2 and "invalid choice" in res.stderr
    res = run(emulator_python, "-m", "sglang.launch_server")
    assert res.returncode == 2 and "--model-path" in res.stderr


def test_import_error_fault(launcher) -> None:
    launch = launcher("--model-path", "m", "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_FAULT": "import_error"})
    assert launch.wait_exit() == 1
    log = launch.log()
    assert "Traceback (most recent call last):" in log
    assert log.rstrip().splitlines()[-1] == "ModuleNotFoundError: No module named 'sgl_kernel'"


def test_model_dir_without_config_fails(launcher, tmp_path: Path) -> None:
    model = tmp_path / "model dir"
    model.mkdir()
    launch = launcher("--model-path", str(model), "--port", str(free_port()))
    assert launch.wait_exit() == 1
    assert "does not appear to have a file named config.json" in launch.log()
    assert "Traceback (most recent call last):" in launch.log()
