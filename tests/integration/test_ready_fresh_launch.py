"""A launch judged ready for the first time is a start, not a server that was already running,
even when it already holds its port when the wait begins (a fast start that bound within the
module's first poll): its start is remembered, so the next start can be compared with it."""
from __future__ import annotations

import json
import os

from helpers import ready_launch
from helpers.fixtures import wait_for


def test_a_launch_bound_before_the_first_poll_is_a_start_and_is_remembered(spawn, emulator_python, state_dir,
                                                                           log_dir):
    log = os.path.join(log_dir, "f.log")
    _proc, record = ready_launch.launch(spawn, emulator_python, state_dir, log, name="f",
                                        env={"SGLANG_EMULATOR_SHARDS": "1"})
    # the server is up and ready before anyone asks: what a fast start looks like to the module
    assert wait_for(lambda: ready_launch.healthy("127.0.0.1", record["port"]), 30)
    first = ready_launch.ready(state_dir, name="f")
    assert first["ready"] is True, first.get("msg")
    assert first["already_running"] is False and "already running" not in first["msg"]
    assert first["start_seconds"] and first["start_seconds"] > 0
    with open(os.path.join(state_dir, "f.timeline.json")) as fh:
        stored = json.load(fh)
    assert stored["launch_id"] == record["launch_id"] and stored["start_seconds"] == first["start_seconds"]
    # judged ready once: the next check of the same launch is a re-check
    again = ready_launch.ready(state_dir, name="f")
    assert again["ready"] is True and again["already_running"] is True, again.get("msg")
