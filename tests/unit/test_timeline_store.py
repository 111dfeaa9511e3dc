"""The remembered last start of an instance (<state_dir>/<name>.timeline.json), and the action
plugin's choices that need no controller run (which callback gets progress lines, slices)."""
from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.llmops.sglang.plugins.action import sglang_ready as action
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _timeline_store as ts
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P

PHASES = [{"phase": "weight load begin", "seconds": 4.1, "line": "[t TP0] Load weight begin."},
          {"phase": "ready", "seconds": 250.0, "line": "[t] The server is fired up and ready to roll!"}]


@pytest.fixture
def state(tmp_path):
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return str(path)


def test_nothing_remembered_yet(state):
    assert ts.baseline(state, "ext", "L1") is None
    assert ts.baseline(None, "ext", "L1") is None and ts.baseline(state, None, "L1") is None


def test_a_successful_start_becomes_the_baseline_of_the_next(state):
    path = ts.remember(state, "ext", "L1", 250.0, PHASES)
    assert path == os.path.join(state, "ext.timeline.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.load(open(path))
    assert data["start_seconds"] == 250.0 and data["launch_id"] == "L1"
    assert data["phases"] == [{"phase": "weight load begin", "seconds": 4.1}, {"phase": "ready", "seconds": 250.0}]
    assert ts.baseline(state, "ext", "L2")["start_seconds"] == 250.0
    # the next start is remembered and the one before it kept as `previous`
    ts.remember(state, "ext", "L2", 400.0, PHASES)
    assert ts.baseline(state, "ext", "L3")["start_seconds"] == 400.0
    assert json.load(open(path))["previous"]["launch_id"] == "L1"


def test_a_recheck_of_the_same_launch_compares_with_the_start_before(state):
    ts.remember(state, "ext", "L1", 250.0, PHASES)
    ts.remember(state, "ext", "L2", 400.0, PHASES)
    assert ts.baseline(state, "ext", "L2")["start_seconds"] == 250.0
    ts.remember(state, "ext", "L2", 400.0, PHASES)  # re-remembered: L1 stays the previous one
    assert ts.baseline(state, "ext", "L2")["launch_id"] == "L1"


def test_only_the_first_start_has_no_baseline_on_recheck(state):
    ts.remember(state, "ext", "L1", 250.0, PHASES)
    assert ts.baseline(state, "ext", "L1") is None


@pytest.mark.parametrize("content", ["not json", "[]", '{"start_seconds": "fast"}', '{"start_seconds": 0}',
                                     '{"start_seconds": true}'])
def test_an_unusable_file_is_no_baseline_and_is_replaced(state, content):
    with open(os.path.join(state, "ext.timeline.json"), "w") as fh:
        fh.write(content)
    assert ts.baseline(state, "ext", "L1") is None
    ts.remember(state, "ext", "L1", 10.0, [])
    assert ts.baseline(state, "ext", "L2")["start_seconds"] == 10.0


def test_a_symlink_at_the_file_is_replaced_not_followed(state, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.symlink(str(target), os.path.join(state, "ext.timeline.json"))
    ts.remember(state, "ext", "L1", 10.0, [])
    assert target.read_text() == "keep"
    assert not os.path.islink(os.path.join(state, "ext.timeline.json"))


def test_an_unsafe_state_dir_is_refused(state):
    os.chmod(state, 0o777)
    with pytest.raises(SglangError) as err:
        ts.remember(state, "ext", "L1", 10.0, [])
    assert err.value.details["reason"] == "unsafe_dir"


@pytest.mark.parametrize("start,last,slow", [(151, 100, True), (150, 100, False), (90, 100, False),
                                             (300, None, False), (None, 100, False)])
def test_slow_start_is_more_than_one_and_a_half_times_the_last(start, last, slow):
    assert ts.is_slow(start, last) is slow


# --- the action plugin's choices -----------------------------------------------------------

@pytest.mark.parametrize("callback,shown", [
    ("default", True), ("ansible.builtin.default", True), ("minimal", True), ("community.general.dense", True),
    ("json", False), ("ansible.posix.json", False), ("ansible.posix.jsonl", False), ("yaml", False),
    ("community.general.yaml", False), ("awx_display", False), ("tree", False), ("someone.else.default", False),
])
def test_progress_lines_only_for_a_human_stdout_callback(callback, shown):
    assert P.progress_wanted(callback, {}) is shown


def test_progress_can_be_forced_either_way():
    assert P.progress_wanted("json", {P.PROGRESS_ENV: "always"}) is True
    assert P.progress_wanted("default", {P.PROGRESS_ENV: "never"}) is False


def test_slice_seconds_from_the_task_then_the_environment():
    assert P.slice_seconds({}, {}, action.SLICE_ENV) == 10.0
    assert P.slice_seconds({}, {action.SLICE_ENV: "2.5"}, action.SLICE_ENV) == 2.5
    assert P.slice_seconds({"slice_seconds": 4}, {action.SLICE_ENV: "2.5"}, action.SLICE_ENV) == 4.0
    assert P.slice_seconds({"slice_seconds": 0}, {}, action.SLICE_ENV) == 0.0
    for bad in ("soon", -1, 601):
        with pytest.raises(ValueError):
            P.slice_seconds({"slice_seconds": bad}, {}, action.SLICE_ENV)


def test_the_last_slice_reads_like_one_call():
    res = {"ready": True, "pending": False, "resume_state": {"x": 1},
           "invocation": {"module_args": {"name": "ext", "slice_seconds": 10.0, "_resume": {"state": {}}}}}
    final = P.as_single_call(res, {"name": "ext"})
    assert "resume_state" not in final and "pending" not in final
    assert final["invocation"]["module_args"] == {"name": "ext", "slice_seconds": None, "_resume": None}


def test_instance_label():
    assert action.instance_label({"name": "ext"}) == "ext"
    assert action.instance_label({"record": {"name": "srv"}}) == "srv"
    assert action.instance_label({}) == "sglang"


def test_proven_names_the_launches_judged_ready(state):
    assert ts.proven(state, "ext", "L1") is False                     # nothing remembered: never judged
    assert ts.proven(None, "ext", "L1") is None and ts.proven(state, "ext", None) is None
    ts.remember(state, "ext", "L1", 250.0, PHASES)
    ts.remember(state, "ext", "L2", 240.0, PHASES)
    assert ts.proven(state, "ext", "L2") and ts.proven(state, "ext", "L1")   # the last start and the one before
    assert ts.proven(state, "ext", "L3") is False
