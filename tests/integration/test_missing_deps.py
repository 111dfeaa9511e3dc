"""Modules run by an interpreter without psutil and requests: launch fails with Ansible's
missing_required_lib message naming an interpreter on the host that has them; the probe still
gives its diagnosis and says what it could not read.

Each module runs in a private PID namespace with only the server the test starts, so the
interpreter it finds among running servers is that server's."""
from __future__ import annotations

import os

from helpers.bare_python import bare_venv, run_in_private_pidns, sglang_venv
from helpers.fixtures import free_port
from helpers.warnings import warnings_of

MISSING = "Failed to import the required Python library (psutil and requests) on "


def _server(python: str, port: int, tmp_path) -> dict:
    return {"argv": [python, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)],
            "env": {"PATH": os.environ["PATH"], "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"},
            "port": port, "log": str(tmp_path / "server.log")}


def _venv_root(python: str) -> str:
    return os.path.dirname(os.path.dirname(python))


def test_launch_names_the_interpreter_of_the_running_server(tmp_path):
    bare, ml = bare_venv(), sglang_venv("ml-env-running")
    port = free_port()
    res = run_in_private_pidns(bare, "sglang_launch", {
        "venv": _venv_root(bare), "model_path": "m", "port": free_port(), "state_dir": str(tmp_path / "state"),
        "gpu_backend": "none"}, server=_server(ml, port, tmp_path))
    assert res.get("failed") is True and res["reason"] == "missing_library", res
    assert res["msg"].startswith(MISSING) and "Python %s." % bare in res["msg"], res["msg"]
    assert "rerun with `-e ansible_python_interpreter=%s`" % ml in res["msg"], res["msg"]
    assert res["missing_libraries"] == ["psutil", "requests"] and res["interpreter_with_libraries"] == ml
    assert not (tmp_path / "state").exists()  # failed before anything was done


def test_launch_names_its_own_venv_when_that_has_them(tmp_path):
    bare, ml = bare_venv(), sglang_venv()
    res = run_in_private_pidns(bare, "sglang_launch", {
        "venv": _venv_root(ml), "model_path": "m", "port": free_port(), "state_dir": str(tmp_path / "state")})
    assert res.get("failed") is True and res["reason"] == "missing_library", res
    assert "ansible_python_interpreter=%s`" % ml in res["msg"]


def test_launch_without_any_interpreter_with_them_says_what_to_install(tmp_path):
    bare = bare_venv()
    res = run_in_private_pidns(bare, "sglang_launch", {
        "venv": _venv_root(bare), "model_path": "m", "port": free_port(), "state_dir": str(tmp_path / "state"),
        "search_paths": [str(tmp_path / "nowhere")]})
    assert res.get("failed") is True and res["reason"] == "missing_library", res
    assert res["interpreter_with_libraries"] is None
    assert "apt-get install python3-psutil python3-requests" in res["msg"]


def test_probe_still_diagnoses_and_names_what_it_could_not_read(tmp_path):
    bare, ml = bare_venv(), sglang_venv("ml-env-running")
    port = free_port()
    res = run_in_private_pidns(bare, "sglang_probe", {
        "ports": [port], "api_key": "probe-deps-key", "state_dir": str(tmp_path / "state"),
        "gpu_backend": "none", "shm_dir": str(tmp_path / "shm")}, server=_server(ml, port, tmp_path))
    assert res["_rc"] == 0 and not res.get("failed"), res
    # What it could read: the server (fully with a process layer that reads /proc itself; by its
    # command line alone where the process layer is psutil), and a diagnosis naming it and its port.
    server = next(s for s in res["servers"] if s["port"] == port)
    assert server["interpreter"]["cmdline"] == ml
    assert any("sglang server pid %s" % server["pid"] in d and str(port) in d for d in res["diagnosis"]), \
        res["diagnosis"]
    # What it could not (the HTTP answer at least: requests is missing), and which interpreter would.
    assert res["unavailable"] and any(str(port) in u for u in res["unavailable"]), res["unavailable"]
    (rep,) = res["ports"]
    assert rep["reachable"] is False and rep["api_key_sent"] is False and rep["error"]
    hint = "rerun with `-e ansible_python_interpreter=%s`" % ml
    assert any(hint in w for w in warnings_of(res)), res.get("warnings")
    assert any(hint in d for d in res["diagnosis"])
