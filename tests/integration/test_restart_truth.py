"""The restart tells the truth in every outcome (issue 28), through the real playbooks against
the emulator: the summary's first line is where the host stands when it is printed. Each test
failed on the code before the restart's state machine (plugins/module_utils/_restart/_restart_outcome.py) and
its final check (plugins/action/sglang_restart_outcome.py)."""
from __future__ import annotations

import glob
import json
import os
import signal
import sys
from typing import Any, Dict, List, Optional

from helpers import play_runs
from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs


def _record(hv: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    path = os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])
    return json.load(open(path)) if os.path.exists(path) else None


def _play(inv: str, playbook: str, extra: Optional[Dict[str, Any]] = None, *args: str):
    run = play_runs.play(inv, playbook, *(list(args) + (["-e", json.dumps(extra)] if extra else [])))
    return run, run.stdout + run.stderr


def _head(out: str, hv: Dict[str, Any]) -> str:
    """The summary's first line (the last one printed for the instance), without the names."""
    marker = "%s on h1: " % hv["sglang_name"]
    # a plain line (or, before the state machine, an item of a YAML list: "- '<name> on h1: ...'")
    heads = [line.split(marker, 1)[1].strip().rstrip("'") for line in out.splitlines()
             if line.lstrip(" -'").startswith(marker)]
    assert heads, out[-4000:]
    return heads[-1]


def _serves(hv: Dict[str, Any]) -> bool:
    return _http.request("127.0.0.1", hv["sglang_port"], "/health", timeout=3).status == 200


# --- finding 1: a refusal says what serves ----------------------------------------------------------

def test_a_refused_restart_says_the_old_server_serves_and_a_dead_one_does_not(one_host):
    inv, hv = one_host
    first, out = _play(inv, "restart_serving.yml")
    assert first.returncode == 0, out[-4000:]
    old = _record(hv)
    # an invalid choice: refused before anything is stopped, the old server serves on
    refused, out = _play(inv, "restart_serving.yml", {"sglang_serving_args": {"reasoning-parser": "kimi_k9"}})
    assert refused.returncode != 0, out[-4000:]
    assert _head(out, hv) == "FAILED, nothing was stopped: serving OLD config (untouched)", out[-4000:]
    assert _procs.is_alive(old["pid"], old["start_time"]) and _serves(hv)
    # the same refusal once that server died on its own: nothing serves, and the line says so
    os.killpg(old["pgid"], signal.SIGKILL)
    assert wait_for(lambda: not _procs.is_alive(old["pid"], old["start_time"]), 10)
    refused, out = _play(inv, "restart_serving.yml", {"sglang_serving_args": {"reasoning-parser": "kimi_k9"}})
    assert refused.returncode != 0, out[-4000:]
    assert _head(out, hv) == "FAILED, nothing was stopped: no server serves", out[-4000:]


# --- finding 2: a crash seconds after ready -------------------------------------------------------

# Records, at the start of every task, whether the instance's operation lock is held: the
# controller starts a task only once the previous one ended on every host.
LOCK_SPY = """
import json, os
from ansible.plugins.callback import CallbackBase
class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "lockspy"
    CALLBACK_NEEDS_ENABLED = True
    def v2_playbook_on_task_start(self, task, is_conditional):
        with open(os.environ["LOCKSPY_OUT"], "a") as fh:
            fh.write(json.dumps([task.get_name(), os.path.exists(os.environ["LOCKSPY_LOCK"])]) + "\\n")
"""


def test_a_crash_seconds_after_ready_is_rolled_back_never_serving_new(one_host, tmp_path):
    inv, hv = one_host
    first, out = _play(inv, "restart_serving.yml")
    assert first.returncode == 0, out[-4000:]
    old = _record(hv)
    spy_dir, seen = tmp_path / "spy", tmp_path / "spy.jsonl"
    spy_dir.mkdir()
    (spy_dir / "lockspy.py").write_text(LOCK_SPY)
    lock = os.path.join(hv["sglang_state_dir"], "%s.restart.lock" % hv["sglang_name"])
    # the new configuration dies 8 s after its ready line: long past the 2 s settle window and
    # the readiness wait's end (its proof of work included, on a loaded machine too), inside the
    # last check's hold (12 s here, to keep the margin on a loaded machine; 5 s by default)
    extra = {"sglang_hold": 12, "sglang_serving_args": {"mem-fraction-static": 0.6},
             "sglang_serving_env": {"SGLANG_EMULATOR_FAULT": "crash_after", "SGLANG_EMULATOR_CRASH_AFTER": "8"}}
    crash = play_runs.play(inv, "restart_serving.yml", "-e", json.dumps(extra),
                           wrap=["env", "ANSIBLE_CALLBACK_PLUGINS=%s" % spy_dir, "ANSIBLE_CALLBACKS_ENABLED=lockspy",
                                 "LOCKSPY_OUT=%s" % seen, "LOCKSPY_LOCK=%s" % lock])
    out = crash.stdout + crash.stderr
    assert crash.returncode != 0, out[-4000:]
    head = _head(out, hv)
    assert head == "serving OLD config (rolled back)", out[-4000:]
    # The rollback ran under this run's operation lock: the readiness wait kept it through the
    # hold (before, it gave it back at the ready line, so another run could start a restart of
    # the instance while this one relaunched the old server). Given back at the end.
    tasks = [json.loads(line) for line in seen.read_text().splitlines()]
    rollback = [held for name, held in tasks if "relaunch the last proven-good configuration (rollback)" in name]
    assert rollback == [True], tasks
    assert not os.path.exists(lock)
    now = _record(hv)
    assert now["fingerprint"] == old["fingerprint"] and _procs.is_alive(now["pid"], now["start_time"])
    assert _serves(hv)


# --- finding 3: interrupted during a slow start, then run again --------------------------------------

READY_LINE = "The server is fired up and ready to roll!"


def _descends_from(pid: int, ancestor: int) -> bool:
    """Is `pid` (still) in the process tree under `ancestor`?"""
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open("/proc/%d/stat" % pid) as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def test_a_rerun_that_adopts_a_starting_server_holds_it_after_its_ready_line(one_host, tmp_path):
    inv, hv = one_host
    # 24 s or more from the launch to the ready line (four 6 s phases), so that the re-run finds
    # it still starting on a loaded machine too; it dies 1.5 s after that line
    slow = {"sglang_serving_env": {"SGLANG_EMULATOR_PHASE_SECONDS": "6", "SGLANG_EMULATOR_FAULT": "crash_after",
                                   "SGLANG_EMULATOR_CRASH_AFTER": "1.5"}}
    vars_file = tmp_path / "slow.json"
    vars_file.write_text(json.dumps(slow))
    log = str(tmp_path / "interrupted.log")
    proc = play_runs.start(inv, "restart_serving.yml", log, "-e", "@%s" % vars_file)
    try:
        # Ctrl-C (here: the whole controller tree killed) while the run waits for the slow start:
        # once the launch is done - its server recorded and running on its own, outside the
        # controller's process tree (which a Ctrl-C never reaches past the launch either)
        def launched() -> bool:
            record = _record(hv)
            return bool(record and isinstance(record.get("pid"), int)
                        and not _descends_from(record["supervisor_pid"], proc.pid))
        assert wait_for(launched, 120), open(log).read()[-3000:]
    finally:
        play_runs.kill_tree(proc.pid)
        proc.wait(30)
    record = _record(hv)
    assert isinstance(record["pid"], int) and _procs.is_alive(record["pid"], record["start_time"]), record
    # still starting: no ready line yet, so the same command again finds a server that is starting
    assert READY_LINE not in open(record["log_path"], errors="replace").read(), open(log).read()[-3000:]
    rerun, out = _play(inv, "restart_serving.yml", slow)
    # the adopted server died 1.5 s after its ready line: never 'serving', and the host fails
    assert rerun.returncode != 0, out[-4000:]
    assert not _head(out, hv).startswith("serving"), out[-4000:]
    # ... and it was that server, adopted (no other one launched), that printed the line and died
    assert READY_LINE in open(record["log_path"], errors="replace").read(), out[-4000:]
    assert not _procs.is_alive(record["pid"], record["start_time"]), out[-4000:]
    assert _record(hv)["launch_id"] == record["launch_id"], out[-4000:]


# --- finding 6: the lock's line and the plan's status ---------------------------------------------------

def test_the_lock_line_is_true_in_check_mode_and_after_the_release(one_host):
    inv, hv = one_host
    first, out = _play(inv, "restart_serving.yml")
    assert first.returncode == 0, out[-4000:]
    assert len(out.splitlines()) <= 40, "a successful restart in %d lines:\n%s" % (len(out.splitlines()), out)
    assert "lock: taken (" in out and "); released" in out, out[-4000:]
    assert "lock: held by this run" not in out
    check, out = _play(inv, "restart_serving.yml", {"sglang_serving_args": {"mem-fraction-static": 0.6}}, "--check")
    assert check.returncode == 0, out[-4000:]
    assert _head(out, hv) == "check mode: would restart", out[-4000:]
    assert "lock: free (check mode: checked, not taken)" in out and "lock: held" not in out, out[-4000:]
    assert "nothing is changed" not in out  # the plan's title no longer says so while it reports changed


# --- finding 9: the port taken during the teardown's own check ---------------------------------------------

GRABBER = r'''
import socket, sys, time
port = int(sys.argv[1])
s = socket.socket()
# as servers do (and the new launch does): the old server's closed connections in TIME_WAIT
# would refuse a plain bind for a minute, and the new server would always win the port
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
while True:
    try:
        s.bind(("127.0.0.1", port))
        break
    except OSError:
        time.sleep(0.005)
s.listen(8)
open(sys.argv[2], "w").close()
time.sleep(600)
'''


def test_a_port_taken_while_the_teardown_checks_it_is_not_called_partly_stopped(one_host, spawn, tmp_path):
    inv, hv = one_host
    first, out = _play(inv, "restart_serving.yml")
    assert first.returncode == 0, out[-4000:]
    flag = str(tmp_path / "grabbed")
    grabber = spawn.start([sys.executable, "-c", GRABBER, str(hv["sglang_port"]), flag])
    run, out = _play(inv, "restart_serving.yml", {"sglang_serving_args": {"mem-fraction-static": 0.6}})
    assert os.path.exists(flag), out[-4000:]  # it did take the port the old server freed
    assert run.returncode != 0, out[-4000:]
    head = _head(out, hv)
    assert "partly stopped" not in out, out[-4000:]
    # rolled back once the port is free again, or DOWN in those words
    assert head == "serving OLD config (rolled back)" or head.startswith(
        "DOWN (no server: the old server is stopped; port %d was taken" % hv["sglang_port"]), out[-4000:]
    grabber.kill()


# --- findings 13 and 14: the dumps are the product -------------------------------------------------------

def _dumps(hv: Dict[str, Any]) -> List[str]:
    return sorted(glob.glob(os.path.join(hv["sglang_extraction_dump_dir"], "*")))


def test_the_dumps_are_kept_and_a_converged_run_writes_none(one_host):
    inv, hv = one_host
    first, out = _play(inv, "restart_extraction.yml")
    assert first.returncode == 0, out[-4000:]
    written = _dumps(hv)
    assert written, out[-4000:]
    mine = os.path.join(hv["sglang_extraction_dump_dir"], "training-shard-0.pt")
    open(mine, "w").write("the operator's data")
    # a converged run proves nothing new: no proof of work, no new file in the training data
    again, out = _play(inv, "restart_extraction.yml")
    assert again.returncode == 0 and "changed=0" in out, out[-4000:]
    assert _dumps(hv) == sorted(written + [mine]), out[-4000:]
    # a restart keeps what the old server wrote (sglang_extraction_purge_dumps is false by default)
    restart, out = _play(inv, "restart_extraction.yml", {"sglang_extraction_mem_fraction_static": 0.8})
    assert restart.returncode == 0, out[-4000:]
    assert set(written + [mine]) <= set(_dumps(hv)) and open(mine).read() == "the operator's data"
    assert "dumps kept" in out, out[-4000:]


def test_an_unresponsive_server_is_replaced_without_purging_its_dumps(one_host):
    inv, hv = one_host
    first, out = _play(inv, "restart_extraction.yml", {"sglang_extraction_purge_dumps": True})
    assert first.returncode == 0, out[-4000:]
    mine = os.path.join(hv["sglang_extraction_dump_dir"], "training-shard-0.pt")
    open(mine, "w").write("the operator's data")
    old = _record(hv)
    os.killpg(old["pgid"], signal.SIGSTOP)  # stalls: /v1/models gets no answer
    try:
        run, out = _play(inv, "restart_extraction.yml", {"sglang_extraction_purge_dumps": True})
    finally:
        try:
            os.killpg(old["pgid"], signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert run.returncode == 0, out[-4000:]
    assert "plan: unresponsive" in out, out[-4000:]
    assert os.path.exists(mine) and "dumps kept" in out, out[-4000:]
