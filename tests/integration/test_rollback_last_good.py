"""The rollback's promises, through restart_serving.yml against the emulator (issue 28, findings
7, 8 and 10): it restarts the last proven-good launch kept on the host (<name>.good.json and its
private secrets file), so the restored server has the OLD api key, a later run rolls back after
an interrupted one, and a foreign listener that took the port is refused, never signalled."""
from __future__ import annotations

import json
import os
import stat
import sys
import uuid

from helpers import play_runs
from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

OLD_KEY = "sk-old-%s" % uuid.uuid4().hex
NEW_KEY = "sk-new-%s" % uuid.uuid4().hex


def _vars(**extra) -> str:
    return json.dumps(extra)


def _record(hv: dict, suffix: str = "") -> dict:
    with open(os.path.join(hv["sglang_state_dir"], "%s%s.json" % (hv["sglang_name"], suffix))) as fh:
        return json.load(fh)


def _summary_state(out: str) -> str:
    marker = "on h1: "
    lines = [line for line in out.splitlines() if marker in line and "restart of" not in line]
    assert lines, out[-4000:]
    return lines[0].split(marker, 1)[1].strip().rstrip("'\",")


def _status(port: int, key=None) -> int:
    return _http.request("127.0.0.1", port, "/v1/models", key, timeout=5).status


def test_a_rollback_brings_back_the_old_api_key(one_host):
    inv, hv = one_host
    port = hv["sglang_port"]
    first = play_runs.play(inv, "restart_serving.yml", "-e", _vars(sglang_api_key=OLD_KEY))
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert _status(port, OLD_KEY) == 200
    good = _record(hv)

    env = dict(play_runs.demo_vars()["sglang_env"], SGLANG_EMULATOR_FAULT="oom")
    second = play_runs.play(inv, "restart_serving.yml", "-e", _vars(sglang_api_key=NEW_KEY, sglang_env=env))
    out = second.stdout + second.stderr
    assert second.returncode != 0, out[-4000:]  # the host still fails: the roll stops
    assert _summary_state(out) == "serving OLD config (rolled back)", out[-4000:]
    assert OLD_KEY not in out and NEW_KEY not in out
    # the restored server runs what ran, its secret included: the old key works, the new one does not
    assert _status(port, OLD_KEY) == 200, out[-4000:]
    assert _status(port, NEW_KEY) == 401
    now = _record(hv)
    assert now["fingerprint"] == good["fingerprint"] and _procs.is_alive(now["pid"], now.get("start_time"))
    # where the old key was kept: beside the last-good record, private, never in a record
    state = hv["sglang_state_dir"]
    assert _record(hv, ".good")["launch_id"] == good["launch_id"]  # the rollback is not promoted again
    for name in ("%s.good.json" % hv["sglang_name"], "%s.good.secrets" % hv["sglang_name"]):
        assert stat.S_IMODE(os.stat(os.path.join(state, name)).st_mode) == 0o600
    for name in os.listdir(state):
        if name.endswith(".json"):
            text = open(os.path.join(state, name)).read()
            assert OLD_KEY not in text and NEW_KEY not in text, name


def _interrupt_during_ready(inv: str, hv: dict, log: str, extra: str) -> None:
    """restart_serving.yml started, then its controller killed (SIGKILL to the whole tree: a
    second Ctrl-C, a closed terminal, the OOM killer) once the new launch is recorded and its
    readiness wait runs. Not one SIGINT: ansible-core may then fail only the running task, and
    the restart's rescue and rollback run in that same play (its summary says so) - on a loaded
    host that happened, and the later run had nothing left to roll back."""
    before = _record(hv)["launch_id"]
    proc = play_runs.start(inv, "restart_serving.yml", log, "-e", extra)
    try:
        def waiting_for_the_new_launch() -> bool:
            try:
                rec = _record(hv)
            except (OSError, ValueError):
                return False
            return rec.get("launch_id") != before and isinstance(rec.get("pid"), int) and \
                " : Wait until the server is ready" in open(log).read()
        assert wait_for(lambda: proc.poll() is not None or waiting_for_the_new_launch(), 180, 0.1) \
            and proc.poll() is None, open(log).read()[-3000:]
    finally:
        play_runs.kill_tree(proc.pid)
        proc.wait(timeout=60)  # reaped: a zombie would still hold the operation lock


def test_a_later_run_rolls_back_an_interrupted_bad_restart(one_host, tmp_path):
    inv, hv = one_host
    port = hv["sglang_port"]
    first = play_runs.play(inv, "restart_serving.yml", "-e", _vars(sglang_serving_args={"mem-fraction-static": 0.5}))
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    good = _record(hv)

    # the bad restart: a slow start, its controller killed while it starts; it crashes right after its ready line
    bad_env = dict(play_runs.demo_vars()["sglang_env"], SGLANG_EMULATOR_FAULT="crash_after",
                   SGLANG_EMULATOR_CRASH_AFTER="0.5", SGLANG_EMULATOR_PHASE_SECONDS="1.5")
    bad = _vars(sglang_serving_args={"mem-fraction-static": 0.6}, sglang_env=bad_env)
    _interrupt_during_ready(inv, hv, str(tmp_path / "interrupted.log"), bad)
    crashed = _record(hv)
    assert crashed["launch_id"] != good["launch_id"]  # the bad launch's record replaced the good one's
    assert wait_for(lambda: not _procs.is_alive(crashed["pid"], crashed.get("start_time")), 180), \
        (crashed, open(crashed["log_path"]).read()[-3000:], open(str(tmp_path / "interrupted.log")).read()[-3000:])

    # the same command again: the next plain run
    again = play_runs.play(inv, "restart_serving.yml", "-e", bad)
    out = again.stdout + again.stderr
    assert again.returncode != 0, out[-4000:]
    assert _summary_state(out) == "serving OLD config (rolled back)", out[-4000:]
    now = _record(hv)
    assert now["fingerprint"] == good["fingerprint"], out[-4000:]
    assert now["fingerprint_inputs"]["args"]["--mem-fraction-static"] == 0.5
    assert _procs.is_alive(now["pid"], now.get("start_time"))
    assert _http.request("127.0.0.1", port, "/health", timeout=5).status == 200


# Waits until the record names another launch (the old server is stopped and proven gone), then
# takes the port as soon as it is free; a SIGTERM leaves its mark.
GRAB = ("import json, signal, socket, sys, time\n"
        "port, mark, record, old = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]\n"
        "def term(*_):\n"
        "    open(mark, 'w').write('SIGTERM')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "while True:\n"
        "    try:\n"
        "        if json.load(open(record)).get('launch_id') != old:\n"
        "            break\n"
        "    except (OSError, ValueError):\n"
        "        pass\n"
        "    time.sleep(0.01)\n"
        "s = socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "while True:\n"
        "    try:\n"
        "        s.bind(('127.0.0.1', port))\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.01)\n"
        "s.listen(4)\n"
        "open(mark + '.bound', 'w').write('bound')\n"
        "time.sleep(600)\n")


def test_the_rollback_never_signals_a_foreign_listener(one_host, tmp_path, spawn):
    inv, hv = one_host
    port = hv["sglang_port"]
    first = play_runs.play(inv, "restart_serving.yml")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]

    # a foreign, non-SGLang process waiting for the port: it takes it once the new launch started
    script, mark = tmp_path / "grab.py", str(tmp_path / "grabbed")
    script.write_text(GRAB)
    record = os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])
    grabber = spawn.start([sys.executable, str(script), str(port), mark, record, _record(hv)["launch_id"]])
    env = dict(play_runs.demo_vars()["sglang_env"], SGLANG_EMULATOR_FAULT="oom")
    second = play_runs.play(inv, "restart_serving.yml", "-e", _vars(sglang_env=env))
    out = second.stdout + second.stderr
    assert second.returncode != 0, out[-4000:]
    assert os.path.exists(mark + ".bound"), out[-4000:]  # it took the port
    # never signalled: alive, still listening, and its SIGTERM handler never ran
    assert not os.path.exists(mark), out[-4000:]
    assert grabber.poll() is None and grabber.pid in {p for l in _ports.listeners([port]) for p in l.pids}
    # the rollback refused and said why; the host is down, reported so
    assert "not an sglang server" in out and "foreign_port_holders" in out, out[-4000:]
    assert _summary_state(out).startswith("DOWN"), out[-4000:]
    spawn.cleanup()  # the grabber goes before the teardown playbook runs
