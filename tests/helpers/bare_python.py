"""Interpreters for running modules on a host that lacks psutil and requests.

- `bare_venv()`: a venv without pip, psutil or requests (what a minimal managed host has).
  Modules still need ansible's own module_utils, which AnsiballZ ships with every module: here
  a directory holding only a link to the controller venv's `ansible` package stands in for it,
  so nothing else from the controller venv (psutil, requests) becomes importable.
- `sglang_venv()`: a venv that has the emulator's sglang AND psutil and requests (as a real
  SGLang venv has: SGLang depends on both), by `.pth` files naming the emulator venv's and the
  controller venv's site-packages; nothing is downloaded.
- `run_module_with()`: helpers.fixtures.run_module with a chosen interpreter.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, Optional

from helpers.fixtures import COLLECTIONS, MODULE_PKG, ROOT

OUTPUT = os.path.join(ROOT, "tests", "output", "bare-python")


def _site_packages(venv: str) -> str:
    found = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if not found:
        raise RuntimeError("no site-packages under %s" % venv)
    return found[0]


def _base_python() -> str:
    """The interpreter the controller venv was made from (the same Python version)."""
    return os.path.realpath(os.path.join(ROOT, ".venv", "bin", "python")) \
        if os.path.exists(os.path.join(ROOT, ".venv", "bin", "python")) else sys.executable


def _venv(path: str) -> str:
    if not os.path.exists(os.path.join(path, "bin", "python")):
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([_base_python(), "-m", "venv", "--without-pip", path], check=True)
    return os.path.join(path, "bin", "python")


def bare_venv(name: str = "bare") -> str:
    """bin/python of a venv in tests/output that cannot import psutil or requests."""
    python = _venv(os.path.join(OUTPUT, name))
    check = subprocess.run([python, "-c", "import psutil"], capture_output=True, check=False)
    assert check.returncode != 0, "the bare venv must not import psutil"
    return python


def sglang_venv(name: str = "ml-env") -> str:
    """bin/python of a venv with the emulator's sglang, psutil and requests."""
    root = os.path.join(OUTPUT, name)
    python = _venv(root)
    emulator = os.path.join(ROOT, ".venv-emulator")
    with open(os.path.join(_site_packages(root), "llmops_test_libs.pth"), "w") as fh:
        fh.write("%s\n%s\n" % (_site_packages(emulator), _site_packages(os.path.join(ROOT, ".venv"))))
    subprocess.run([python, "-c", "import psutil, requests, sglang.launch_server"], check=True)
    return python


def ansible_only_path() -> str:
    """A directory with only the `ansible` package (the module_utils AnsiballZ would ship)."""
    path = os.path.join(OUTPUT, "ansible-only")
    link = os.path.join(path, "ansible")
    if not os.path.islink(link):
        os.makedirs(path, exist_ok=True)
        import ansible  # the controller's ansible-core, found by pytest's interpreter

        os.symlink(os.path.dirname(ansible.__file__), link)
    return path


def run_module_with(python: str, name: str, args: Dict[str, Any], check_mode: bool = False,
                    timeout: float = 300, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run one module with `python` (ansible's module_utils and the collection on PYTHONPATH)."""
    payload = dict(args, _ansible_check_mode=check_mode, _ansible_diff=False)
    tmpdir = tempfile.mkdtemp(prefix="llmops-modtmp-")
    payload["_ansible_tmpdir"] = tmpdir
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": payload}, fh)
        args_path = fh.name
    run_env = dict(os.environ)
    run_env["PYTHONPATH"] = os.pathsep.join([COLLECTIONS, ansible_only_path()])
    run_env.update(env or {})
    try:
        proc = subprocess.run([python, "-m", "%s.%s" % (MODULE_PKG, name), args_path], capture_output=True,
                              text=True, timeout=timeout, env=run_env, stdin=subprocess.DEVNULL, check=False)
    finally:
        os.unlink(args_path)
        shutil.rmtree(tmpdir, ignore_errors=True)
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if result is None:
        raise AssertionError("module %s produced no JSON (rc=%d)\nstdout: %s\nstderr: %s"
                             % (name, proc.returncode, proc.stdout, proc.stderr))
    result["_rc"] = proc.returncode
    result["_stderr"] = proc.stderr
    return result


# Runs as PID 1 of a private PID namespace: starts the server, waits for /health, runs the module.
_DRIVER = r"""
import json, subprocess, sys, time
from helpers.bare_python import run_module_with
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
spec = json.loads(sys.argv[1])
server = spec.get("server")
if server:
    with open(server["log"], "ab") as log:
        subprocess.Popen(server["argv"], env=server["env"], stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while server.get("settle") is None and \
            _http.request("127.0.0.1", server["port"], "/health", timeout=1).status != 200:
        if time.monotonic() > deadline:
            sys.exit("the server did not become healthy; see " + server["log"])
        time.sleep(0.1)
    time.sleep(server.get("settle") or 0)
print(json.dumps(run_module_with(spec["python"], spec["module"], spec["args"])))
"""


def run_in_private_pidns(python: str, module: str, args: Dict[str, Any],
                         server: Optional[Dict[str, Any]] = None, timeout: float = 180) -> Dict[str, Any]:
    """Run `module` with `python` as the only thing in a private PID namespace besides `server`
    ({argv, env, port, log}, started first and healthy before the module runs - or, with
    `settle: seconds`, just given that long): whatever the
    module finds by looking at all processes is only what this test started, and every
    process in the namespace dies with it (`--kill-child`)."""
    if os.geteuid() != 0:
        import pytest

        pytest.skip("a private PID namespace needs root")
    spec = {"python": python, "module": module, "args": args, "server": server}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([COLLECTIONS, os.path.join(ROOT, "tests")])
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c",
                           _DRIVER, json.dumps(spec)], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise AssertionError("private PID namespace run failed (rc=%d)\nstdout: %s\nstderr: %s"
                             % (proc.returncode, proc.stdout, proc.stderr))
    return json.loads(lines[-1])
