"""sglang_probe against the emulator venv, a venv without sglang and the system python."""
from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from helpers.fixtures import free_port, run_module, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http

# The probe prefers the venv a RUNNING instance uses over any install it finds. On a shared
# machine another checkout's instance may be running: that answer is right too, when the
# instance it names is alive and its interpreter exists.
_RUNNING = re.compile(r"the running instance '[^']+' \(pid (\d+)\) uses (\S+) ")


def _names(text: str, expected: str) -> bool:
    if expected in text:
        return True
    other = _RUNNING.search(text)
    return bool(other) and os.path.exists("/proc/%s" % other.group(1)) and os.path.exists(other.group(2))


SECRET = "probe-secret-key"


def _system_python() -> str:
    for cand in ("/usr/bin/python3", os.path.join(sys.base_prefix, "bin", "python3")):
        if os.path.exists(cand):
            return cand
    pytest.skip("no system python")


def _probe(args, tmp_path, **kw):
    base = {"state_dir": str(tmp_path / "state"), "gpu_backend": "none", "shm_dir": str(tmp_path / "shm")}
    base.update(args)
    return run_module("sglang_probe", base, **kw)


def _copy_of_venv(venv: str, dest):
    """Another venv with the same sglang: a fresh venv (no pip) with the installed packages copied."""
    subprocess.run([os.path.join(venv, "bin", "python"), "-m", "venv", "--without-pip", str(dest)], check=True)
    src = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
    dst = glob.glob(os.path.join(str(dest), "lib", "python3*", "site-packages"))[0]
    for entry in os.listdir(src):
        if entry.startswith(("sglang", "setproctitle")):
            shutil.copytree(os.path.join(src, entry), os.path.join(dst, entry), symlinks=True)
    return dest


def test_emulator_venv_interpreter(emulator_python, spawn, tmp_path):
    """What the probe says about the venv it was asked about does not depend on other sglang
    servers running on the machine (here one from another venv, as another user's would be)."""
    venv = os.path.dirname(os.path.dirname(emulator_python))
    other = _copy_of_venv(venv, tmp_path / "other-venv")
    port = free_port()
    spawn.start([str(other / "bin" / "python"), "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)],
                env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}, log_path=str(tmp_path / "other.log"))
    assert wait_for(lambda: _http.request("127.0.0.1", port, "/health", timeout=1).status == 200, 30)
    res = _probe({"venv": venv, "search_paths": [venv]}, tmp_path, check_mode=True)
    assert res["_rc"] == 0 and res["changed"] is False, res
    interp = res["interpreter"]
    assert interp["path"] == os.path.join(venv, "bin", "python") and interp["is_venv"]
    assert interp["sglang_installed"] and interp["sglang_version"].startswith("0.5.23")
    assert interp["entrypoints"]["launch_server"] is True
    # the asked search path holds one install; installs that running servers use (any on this
    # machine, not only the one started here) may come on top
    assert [i["venv"] for i in res["interpreters"]].count(venv) == 1, res["interpreters"]
    assert "flags" not in res


def test_nosglang_venv_is_data_and_names_the_install(nosglang_venv, emulator_python, tmp_path):
    venv = os.path.dirname(os.path.dirname(emulator_python))
    res = _probe({"venv": nosglang_venv, "search_paths": [venv]}, tmp_path)
    assert res["_rc"] == 0, res
    assert res["interpreter"]["sglang_installed"] is False
    # names the venv of a running instance when one runs (other tests' emulator servers), else the install
    assert any("has no sglang" in d and _names(d, "%s/bin/python" % venv) and "0.5.23" in d
               for d in res["diagnosis"]), res["diagnosis"]


def test_system_python_lacks_sglang_and_introspect_fails_loudly(emulator_python, tmp_path):
    venv = os.path.dirname(os.path.dirname(emulator_python))
    py = _system_python()
    res = _probe({"python": py, "search_paths": [venv], "introspect": True}, tmp_path)
    assert res.get("failed") is True
    assert res["reason"] == "sglang_missing"
    assert py in res["msg"] and _names(res["msg"], venv)


def test_introspect_flags_and_cache(emulator_python, tmp_path):
    venv = os.path.dirname(os.path.dirname(emulator_python))
    first = _probe({"venv": venv, "introspect": True}, tmp_path)
    assert first["_rc"] == 0, first
    flags = first["flags"]
    assert "kimi_k2" in flags["--reasoning-parser"]["choices"]
    assert flags["--model-path"]["required"] is True and flags["--port"]["type"] == "int"
    assert len(flags) > 20
    second = _probe({"venv": venv, "flags": ["reasoning_parser", "--tp-size", "no-such-flag"]}, tmp_path)
    assert second["introspection"]["cached"] is True
    assert second["introspection"]["seconds"] < 0.3
    assert set(second["flags"]) == {"--reasoning-parser", "--tp-size"}
    assert second["flags_absent"] == ["no-such-flag"]
    assert any("no-such-flag does not exist" in d for d in second["diagnosis"])


def test_an_interpreter_that_crashes_on_start(tmp_path):
    """A python that exits at once with a loader error: named with its output and exit status.
    (A missing venv, one without bin/ and a text file: tests/unit/modules/test_sglang_probe.yaml.)"""
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.11.so' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    res = _probe({"python": str(script)}, tmp_path)
    assert res.get("failed") is True, res
    assert str(script) in res["msg"]
    assert "libpython3.11.so" in res["msg"] and res["rc"] == 1
    assert "servers" in res  # the rest of the picture still comes back


def test_running_server_grouped_and_ports(emulator_python, spawn, tmp_path):
    port = free_port()
    unused = free_port()
    proc = spawn.start([emulator_python, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port),
                        "--tp-size", "2", "--api-key", SECRET, "--log-level", "warning"],
                       env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "NCCL_PROTO": "Simple",
                            "LLMOPS_SGLANG_INSTANCE": "probe-test", "HF_TOKEN": "hf_secret_value"},
                       log_path=str(tmp_path / "server.log"))
    assert wait_for(lambda: _http.request("127.0.0.1", port, "/health", SECRET, timeout=1).status == 200, 30)
    res = _probe({"ports": [port, unused], "api_key": SECRET, "detail": True}, tmp_path)  # env, server_info
    assert res["_rc"] == 0, res
    assert SECRET not in str(res) and "hf_secret_value" not in str(res)
    server = next(s for s in res["servers"] if s["pid"] == proc.pid)
    roles = sorted(m["role"] for m in server["members"])
    assert roles.count("scheduler") == 2 and "detokenizer" in roles and "main" in roles
    assert {m["rank"] for m in server["members"] if m["role"] == "scheduler"} == {"TP0", "TP1"}
    assert port in server["listening_ports"] and server["port"] == port
    assert server["instance"] == "probe-test" and server["env"]["NCCL_PROTO"] == "Simple"
    assert server["env"]["HF_TOKEN"] == "********"
    assert server["interpreter"]["cmdline"] == emulator_python and server["user"]
    assert server["orphaned"] == []
    rep = {r["port"]: r for r in res["ports"]}
    assert rep[port]["reachable"] and rep[port]["server"] == server["id"]
    assert rep[port]["server_info"]["api_key"] == "********"
    assert rep[port]["version"]
    assert rep[unused]["reachable"] is False and "nothing listens on port %d" % unused in rep[unused]["error"]
    assert any("--log-level warning" in d and str(proc.pid) in d for d in res["diagnosis"])
    assert any(d.startswith("port %d is held by sglang server pid %d" % (port, proc.pid)) for d in res["diagnosis"])


def test_shm_leaks_reported(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "psm_dead01").write_bytes(b"\0" * 4096)
    (shm / "unrelated").write_bytes(b"x")
    res = _probe({"detail": True}, tmp_path)  # the shm file list
    assert [e["path"] for e in res["shm"]] == [str(shm / "psm_dead01")]
    assert res["shm"][0]["held"] is False
    assert any("1 leaked shared-memory segment" in d for d in res["diagnosis"])


# A port out of range: tests/unit/modules/test_sglang_probe.yaml (in-process).


def test_escaped_worker_is_orphaned_then_leftover(emulator_python, spawn, tmp_path):
    import signal
    port = free_port()
    proc = spawn.start([emulator_python, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)],
                       env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "SGLANG_EMULATOR_FAULT": "escape",
                            "LLMOPS_SGLANG_INSTANCE": "esc", "LLMOPS_SGLANG_LAUNCH_ID": "esc-launch-1"},
                       log_path=str(tmp_path / "server.log"))
    escaped = []
    try:
        assert wait_for(lambda: _http.request("127.0.0.1", port, "/health", timeout=1).status == 200, 30)

        def worker_seen():
            res = _probe({}, tmp_path)
            server = next((s for s in res["servers"] if s["pid"] == proc.pid), None)
            if server and server["orphaned"]:
                escaped[:] = server["orphaned"]
                return res
            return None
        seen = []
        # The probe that saw the orphan is the one judged: probing again races the load.
        assert wait_for(lambda: seen.append(worker_seen()) or seen[-1] is not None, 15, 0.2)
        res = seen[-1]
        server = next(s for s in res["servers"] if s["pid"] == proc.pid)
        worker = next(m for m in server["members"] if m["pid"] == escaped[0])
        assert worker["role"] == "tokenizer_worker" and worker["orphaned"]
        assert any("pid %d" % escaped[0] in d and "orphaned" in d for d in res["diagnosis"])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        assert wait_for(lambda: not any(s["pid"] == proc.pid for s in _probe({}, tmp_path)["servers"]), 10, 0.2)
        # (under a loaded CI machine one probe could miss the leftover: the probe that sees it is judged)
        after = []
        assert wait_for(lambda: after.append(_probe({"ports": [port]}, tmp_path)) or any(
            escaped[0] in s["pids"] for s in after[-1]["servers"]), 15, 0.2), after[-1:]
        res = after[-1]
        left = next(s for s in res["servers"] if escaped[0] in s["pids"])
        assert left["main"] is False and port in left["listening_ports"]
        assert any("no main server process" in d for d in res["diagnosis"])
        assert any(d.startswith("port %d is held by leftover sglang processes" % port) for d in res["diagnosis"])
    finally:
        for pid in escaped:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_lacking_python_names_the_venv_a_running_server_uses(emulator_python, spawn, tmp_path):
    """The emulator venv is outside every search path: the running server's interpreter names it."""
    port = free_port()
    spawn.start([emulator_python, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)],
                env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}, log_path=str(tmp_path / "server.log"))
    assert wait_for(lambda: _http.request("127.0.0.1", port, "/health", timeout=1).status == 200, 30)
    res = _probe({"python": _system_python(), "search_paths": [str(tmp_path / "nowhere")]}, tmp_path)
    venv_python = os.path.join(os.path.dirname(os.path.dirname(emulator_python)), "bin", "python")
    assert any(_names(d, venv_python) and "0.5.23+emulator" in d for d in res["diagnosis"]), res["diagnosis"]


def test_the_probe_playbook_reports_the_running_server_and_its_port(emulator_python, spawn, tmp_path):
    """playbooks/probe.yml end to end: the interpreter's sglang, the server on the asked port
    (listening, its version and tp_size from /server_info) and the records heading."""
    import json
    port = free_port()
    proc = spawn.start([emulator_python, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)],
                       env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}, log_path=str(tmp_path / "server.log"))
    assert wait_for(lambda: _http.request("127.0.0.1", port, "/health", timeout=1).status == 200, 30)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    extra = {"sglang_hosts": "localhost", "sglang_port": port, "sglang_state_dir": str(tmp_path / "state"),
             "sglang_gpu_backend": "none", "sglang_venv": os.path.dirname(os.path.dirname(emulator_python)),
             # a CI machine with 4 test workers on 2 cores answered /server_info after the default 5 s once
             "sglang_probe_http_timeout": 60}
    run = subprocess.run([os.path.join(root, ".venv", "bin", "ansible-playbook"), "-i",
                          os.path.join(root, "inventory", "local.yml"), os.path.join(root, "playbooks", "probe.yml"),
                          "-e", json.dumps(extra)],
                         cwd=root, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"),
                                            ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                                            no_proxy="*", NO_PROXY="*"),
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    shown = run.stdout[run.stdout.index("TASK [Show the probe]"):]
    lines = json.JSONDecoder().raw_decode(shown[shown.index("{"):])[0]["msg"]
    assert re.fullmatch(r"sglang: sglang 0\.5\.23\+emulator in .+ \(python 3\.\d+\.\d+\)", lines[0]), lines
    assert "  %d | listening | 0.5.23+emulator | - | -" % port in lines, "\n".join(lines)
    # the asked venv has its own line; "other installs" names only other ones
    assert not any(line.startswith("other installs:") and extra["sglang_venv"] + "/bin/python " in line
                   for line in lines), lines
    assert any(re.fullmatch(r"  %d \| unmanaged \| \[%d\] \| \S+ \| \d+" % (proc.pid, port), line) for line in lines), lines
    assert lines[lines.index("diagnosis:") - 1] == "records: none" and lines[-1].startswith("  - port %d is held" % port)
