"""Servers in other PID namespaces (containers) were killed by the title sweep: an unmarked
`python -m sglang.launch_server` in a nested PID namespace was stopped with the host's.

Everything runs inside a private PID namespace (the sweep there sees only what the test
started); inside it, a nested namespace holds the container's fake server."""
from __future__ import annotations

import uuid

from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import World, build_scope, select

# PID 1 of the outer namespace: a fake server here, another one in a nested namespace, then
# the module in check mode and for real.
_SCRIPT = r"""
import json, os, subprocess, sys, tempfile, time
from helpers.fixtures import run_module, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

token = sys.argv[1]
pkg = tempfile.mkdtemp()
os.makedirs(os.path.join(pkg, "sglang"))
open(os.path.join(pkg, "sglang", "__init__.py"), "w").close()
with open(os.path.join(pkg, "sglang", "launch_server.py"), "w") as fh:
    fh.write("import time\ntime.sleep(300)\n")
env = dict(os.environ, PYTHONPATH=pkg)
server = [sys.executable, "-m", "sglang.launch_server", "--port", "30000", "--served-model-name", token]
host = subprocess.Popen(server, env=env, start_new_session=True)
container = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"] + server, env=env,
                             start_new_session=True)

def fakes():
    return {p.pid: p for p in _procs.snapshot().values() if token in p.cmdline and p.cmdline[:3] == server[:3]}
assert wait_for(lambda: len(fakes()) == 2, timeout=20), fakes()
nested = [pid for pid in fakes() if pid != host.pid][0]
args = {"gpus": [], "gpu_backend": "none", "shm_cleanup": False, "grace_period": 5, "timeout": 5,
        "state_dir": tempfile.mkdtemp()}
check = run_module("sglang_teardown", args, check_mode=True)
real = run_module("sglang_teardown", args)
time.sleep(0.2)
print(json.dumps({"host": host.pid, "nested": nested, "host_alive": host.poll() is None,
                  "nested_alive": _procs.is_alive(nested), "check": check, "real": real}))
"""


def test_title_sweep_leaves_a_server_in_another_pid_namespace(pidns):
    res = pidns(_SCRIPT, "zzns%s" % uuid.uuid4().hex[:8])
    assert res.rc == 0 and res.data is not None, (res.stdout[-2000:], res.stderr[-3000:])
    data = res.data
    for run in ("check", "real"):
        result = data[run]
        assert not result.get("failed"), result.get("msg")
        targets = {t["pid"] for t in result["targets"]}
        assert data["host"] in targets, (run, result["targets"])
        assert data["nested"] not in targets, (run, result["targets"])
        assert data["nested"] in {o["pid"] for o in result["other_namespaces"]}, (run, result)
    assert data["nested_alive"] and not data["host_alive"], data


def _proc(pid: int, cmd, uid: int = 0) -> _procs.Proc:
    return _procs.Proc(pid=pid, ppid=1, pgid=pid, sid=pid, comm="python", state="S", uid=uid, start_time=100.0,
                       cmdline=list(cmd))


def test_gpu_compute_process_in_another_namespace_is_foreign_never_a_target():
    """Even with foreign_gpu_processes=kill, a container's GPU process is reported, not stopped."""
    procs = {1: _proc(1, ["/sbin/init"]), 10: _proc(10, ["/usr/bin/python3", "train.py"]),
             20: _proc(20, ["/usr/bin/python3", "train.py"])}
    report = _gpus.GpuReport("nvml", [_gpus.Gpu(0, "GPU-0", "H200", 9000, 143000,
                                                [_gpus.GpuProcess(10, 4096), _gpus.GpuProcess(20, 4096)])])
    namespaces = {10: "pid:[1]", 20: "pid:[2]"}
    world = World(procs=procs, environ=lambda pid: {"PATH": "/bin"}, listeners=[], gpu_report=report,
                  device_holders={}, own_pids={1}, euid=0)
    world.own_pidns = "pid:[1]"
    world.pidns = namespaces.get
    scope = build_scope(None, None, [], [0], [], False, False, [], "kill", ["unrelated"])
    sel = select(scope, world)
    assert set(sel.targets) == {10}
    assert [f["pid"] for f in sel.foreign_gpu] == [20] and "namespace" in sel.foreign_gpu[0]["why_not"]
