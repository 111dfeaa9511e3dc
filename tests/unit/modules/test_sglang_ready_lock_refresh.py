"""The restart's readiness wait refreshes its operation lock while it waits (issue 31, item 3):
the lock's age - what lets another controller take it over - counts from the holder's last sign
of life, so a long wait of a live run never lets its lock go stale. Runs sglang_ready's main()
in-process (uthelper.run_main) against a live process that never becomes ready."""
from __future__ import annotations

import json
import os
import time

import psutil
from uthelper import run_main

from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock_refresh

HOLDER = {"controller": {"host": "ctl-a", "pid": 4242, "pid_start": 1, "machine_id": "m", "boot_id": "b"},
          "play": "Restart", "inventory_host": "gpu-07"}


def _lock_an_hour_old(state: str) -> str:
    token = _lock.take(state, "ready", HOLDER, lifetime=900)["holder"]["token"]
    path = _lock.lock_path(state, "ready")
    with open(path) as fh:
        data = json.load(fh)
    data["since"] -= 3600
    with open(path, "w") as fh:
        json.dump(data, fh)
    assert _lock.lock_age(_lock.read_holder(path)) > 3000
    return token


def _never_ready(tmp: str, state: str) -> dict:
    """A record of a live process (this one) whose log never says ready, on a port nobody holds."""
    log = os.path.join(tmp, "ready.log")
    with open(log, "w") as fh:
        fh.write("loading...\n")
    me = psutil.Process()
    return {"name": "ready", "state_dir": state, "pid": me.pid, "start_time": me.create_time(), "log_path": log,
            "host": "127.0.0.1", "port": 9, "launch_id": "l-1", "launched_at": time.time()}


def _wait(tmp_path, monkeypatch, capsys, **lock_args):
    state = str(tmp_path / "state")
    os.makedirs(state)
    token = _lock_an_hour_old(state)
    args = dict(record=_never_ready(str(tmp_path), state), timeout=1.0, poll_interval=0.1, settle=0.1,
                **{k: token for k in lock_args})
    rc, result, _err = run_main("sglang_ready", args, str(tmp_path), monkeypatch, capsys)
    return state, token, rc, result


def test_a_wait_that_will_release_the_lock_refreshes_it_meanwhile(tmp_path, monkeypatch, capsys):
    state, token, rc, result = _wait(tmp_path, monkeypatch, capsys, release_lock=True)
    assert rc == 1 and result["ready"] is False  # not ready: the lock is kept for the rollback ...
    held = _lock.read_holder(_lock.lock_path(state, "ready"))
    assert held["token"] == token
    # ... and its age counts from the wait, not from the plan that took it an hour ago
    assert _lock.lock_age(held) < 60 and held["refreshed"] >= time.time() - 60


def test_a_rollback_wait_refreshes_the_lock_without_releasing_it(tmp_path, monkeypatch, capsys):
    state, token, _rc, _result = _wait(tmp_path, monkeypatch, capsys, refresh_lock=True)
    held = _lock.read_holder(_lock.lock_path(state, "ready"))
    assert held["token"] == token and _lock.lock_age(held) < 60


def test_another_holders_lock_is_left_alone(tmp_path):
    state = str(tmp_path)
    _lock_an_hour_old(state)
    beat = _lock_refresh.Heartbeat(state, "ready", "not-the-token", warn=lambda m: None)
    beat.beat()
    assert beat.refreshed == [] and _lock.lock_age(_lock.read_holder(_lock.lock_path(state, "ready"))) > 3000


def test_the_heartbeat_writes_at_most_every_interval(tmp_path):
    state = str(tmp_path)
    token = _lock_an_hour_old(state)
    now = [1000.0]
    said = []
    beat = _lock_refresh.Heartbeat(state, "ready", token, warn=said.append, every=30.0, clock=lambda: now[0],
                                   sleep=lambda s: now.__setitem__(0, now[0] + s))
    beat.beat()
    for _poll in range(20):  # 20 s of a wait's polls: no second write
        beat.sleep(1.0)
    assert len(beat.refreshed) == 1
    # the lock's own refresh is younger than the interval too (the next slice of a sliced wait)
    again = _lock_refresh.Heartbeat(state, "ready", token, warn=said.append, every=30.0)
    again.beat()
    assert again.refreshed == []


def test_a_refresh_that_fails_is_said_once_and_the_wait_goes_on(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(_lock, "refresh", full)
    now = [1000.0]
    said = []
    beat = _lock_refresh.Heartbeat(str(tmp_path), "ready", "t", warn=said.append, every=30.0, clock=lambda: now[0],
                                   sleep=lambda s: now.__setitem__(0, now[0] + s))
    for _poll in range(3):
        beat.sleep(31.0)
    assert len(said) == 1 and "not refreshed" in said[0] and "No space left" in said[0] and beat.failed
