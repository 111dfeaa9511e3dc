"""A reused process group / session id kills strangers, and a pid recycled between plan and
signal receives the signal.

1. The server of a launch record died; a new login session got its old pid as session id. The
   record's group/session ids must count for nothing: the leader is not the recorded process.
2. A target dies after the plan and its pid is handed to a new process within the start-time
   tolerance: the signal must go to the process that was planned (a pidfd taken when planning),
   never to the newcomer. PIDs are forced with ns_last_pid inside a private PID namespace.
"""
from __future__ import annotations

import subprocess
import uuid

from helpers.fixtures import run_module, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record


def _login_session(spawn) -> subprocess.Popen:
    """A stranger's login shell (own session, unmarked) with a child, like `ssh host`."""
    return spawn.start(["/bin/sh", "-c", "sleep 300 & wait"])


def test_session_id_reused_by_a_new_login_is_not_the_launch(spawn, tmp_path):
    shell = _login_session(spawn)
    assert wait_for(lambda: any(p.ppid == shell.pid for p in _procs.snapshot().values()), timeout=10)
    proc = _procs.read_proc(shell.pid)
    child = [p.pid for p in _procs.snapshot().values() if p.ppid == shell.pid][0]
    name = "sec-%s" % uuid.uuid4().hex[:6]
    state = str(tmp_path / "state")
    # The record of a launch whose server (the session leader) is long gone: its pid, group and
    # session id now belong to the stranger's shell, which started after the launch.
    launched = proc.start_time - 30.0
    _record.write_record(state, name, {
        "name": name, "launch_id": uuid.uuid4().hex, "pid": shell.pid, "start_time": launched,
        "supervisor_pid": shell.pid, "supervisor_start_time": launched, "pgid": shell.pid,
        "sid": shell.pid, "launched_at": launched})
    args = {"name": name, "state_dir": state, "gpus": [], "gpu_backend": "none", "sglang_processes": False,
            "shm_cleanup": False, "grace_period": 2, "timeout": 2}
    check = run_module("sglang_teardown", args, check_mode=True)
    assert not check.get("failed"), check.get("msg")
    assert {t["pid"] for t in check["targets"]}.isdisjoint({shell.pid, child}), check["targets"]
    res = run_module("sglang_teardown", args)
    assert not res.get("failed"), res.get("msg")
    assert shell.poll() is None and _procs.is_alive(child), res.get("killed")
    assert not res["killed"]


def test_session_ids_count_for_nothing_once_the_exit_file_exists(spawn, tmp_path):
    """The recorded leader is alive with its recorded start time, but the launch's exit file says
    the launch is over: a member of its session outside its tree (reparented) is not taken."""
    leader = spawn.start(["/bin/sh", "-c", "(sleep 300 &); exec sleep 301"])

    def orphans():
        return [p.pid for p in _procs.snapshot().values()
                if p.sid == leader.pid and p.pid != leader.pid and p.ppid != leader.pid and not p.is_zombie]
    assert wait_for(lambda: bool(orphans()), timeout=10)
    orphan = orphans()[0]
    proc = _procs.read_proc(leader.pid)
    name = "sec-%s" % uuid.uuid4().hex[:6]
    state = str(tmp_path / "state")
    launch_id = uuid.uuid4().hex
    _record.write_record(state, name, {
        "name": name, "launch_id": launch_id, "pid": None, "supervisor_pid": leader.pid,
        "supervisor_start_time": proc.start_time, "pgid": leader.pid, "sid": leader.pid,
        "launched_at": proc.start_time})
    _record.write_json_atomic(_record.exit_path(state, name), {"launch_id": launch_id, "returncode": 0})
    args = {"name": name, "state_dir": state, "gpus": [], "gpu_backend": "none", "sglang_processes": False,
            "shm_cleanup": False, "grace_period": 2, "timeout": 2}
    res = run_module("sglang_teardown", args, check_mode=True)
    assert not res.get("failed"), res.get("msg")
    assert orphan not in {t["pid"] for t in res["targets"]}, res["targets"]


# Runs as PID 1 of a private PID namespace: forces the target's pid onto a newcomer.
_REUSE = r"""
import json, os, signal, sys, time
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope

token, PID = sys.argv[1], 300

def start_at(argv):
    with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
        fh.write(str(PID - 1))
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/sleep", argv)
    # argv[0] itself: right after fork() the child's cmdline is still the parent's, which holds
    # the token too (waiting for the token raced the exec under load)
    while not open("/proc/%d/cmdline" % pid).read().startswith(argv[0] + "\0"):
        time.sleep(0.001)
    assert pid == PID, pid
    return pid

opts = _teardown.Options(grace_period=1, timeout=1, shm_cleanup=False, gpu_backend="none")
scope = build_scope(None, None, [], [], [token + "-target"], False, False, [], "fail", ["unrelated"])
for attempt in range(50):
    target = start_at([token + "-target", "300"])
    plan = _teardown.make_plan(scope, opts)
    assert list(plan.targets) == [PID], plan.targets
    os.kill(target, signal.SIGKILL)
    os.waitpid(target, 0)
    newcomer = start_at([token + "-newcomer", "300"])
    # the case that matters: same pid, start time within the tolerance of the planned one
    if abs(_procs.read_proc(newcomer).start_time - plan.targets[PID].proc.start_time) < 0.05:
        break
    os.kill(newcomer, signal.SIGKILL)
    os.waitpid(newcomer, 0)
else:
    raise SystemExit("no pid reuse within the start-time tolerance in 50 attempts")
result = _teardown.execute(plan, opts)
alive = os.waitpid(newcomer, os.WNOHANG) == (0, 0)
print(json.dumps({"attempt": attempt, "newcomer_alive": alive, "signals": result["signals"],
                  "failed": result.get("failed"), "msg": result.get("msg")}))
"""


def test_pid_recycled_between_plan_and_signal_is_never_signalled(pidns):
    res = pidns(_REUSE, "zzreuse%s" % uuid.uuid4().hex[:8])
    assert res.rc == 0 and res.data is not None, res.stderr[-3000:]
    assert res.data["newcomer_alive"], res.data
    assert not res.data["signals"], res.data      # nothing was sent: the planned process is gone
    assert not res.data["failed"], res.data       # and the teardown says it is gone, not a survivor
