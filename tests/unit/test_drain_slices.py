"""module_utils/_drain sliced: a wait run in slices, its state carried from slice to slice as the
action plugin carries it (through JSON), gives the verdict and the result of one uninterrupted
wait; the timeout counts from the first slice. Fake clock and a server whose load follows it."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _drain
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._http import Response


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class TimedServer:
    """/get_load answers `running` from a schedule of (until_second, running) on the clock."""

    def __init__(self, clock: Clock, schedule: List[Tuple[float, int]]) -> None:
        self.clock = clock
        self.start = clock.now
        self.schedule = schedule

    def __call__(self, path: str) -> Response:
        t = self.clock.now - self.start
        running = next((n for until, n in self.schedule if t < until), 0)
        return Response(200, [{"dp_rank": 0, "num_reqs": running, "num_waiting_reqs": 0, "num_tokens": 0}])


def _opts(**kw: Any) -> _drain.Options:
    base: Dict[str, Any] = {"poll_interval": 1.0, "settle": 2.0, "timeout": 60.0}
    base.update(kw)
    return _drain.Options(**base)


def _whole(schedule: List[Tuple[float, int]], **kw: Any) -> Dict[str, Any]:
    clock = Clock()
    return _drain.drain(TimedServer(clock, schedule), _opts(**kw), clock=clock, sleep=clock.sleep)


def _sliced(schedule: List[Tuple[float, int]], seconds: float, gap: float = 0.0,
            **kw: Any) -> Tuple[Optional[Dict[str, Any]], List[Dict[str, Any]], Optional[SglangError]]:
    """Slices as the action plugin runs them: the state through JSON, `gap` seconds between two
    (a module start). Returns the result (or the failure) and the pending progress reports."""
    clock = Clock()
    server = TimedServer(clock, schedule)
    opts = _opts(**kw)
    resume: Optional[Dict[str, Any]] = None
    pendings: List[Dict[str, Any]] = []
    for _slice in range(1000):
        try:
            step = _drain.drain_slice(server, opts, resume, seconds, clock=clock, sleep=clock.sleep)
        except SglangError as exc:
            return None, pendings, exc
        if step.result is not None:
            return step.result, pendings, None
        pendings.append(_drain.progress(step.state, opts, clock()))
        resume = json.loads(json.dumps(step.state.to_dict()))
        clock.sleep(gap)
    raise AssertionError("the sliced wait never ended")


SLOW = [(3.5, 3), (6.5, 2), (9.5, 1)]      # three requests ending at 3.5, 6.5 and 9.5 s


@pytest.mark.parametrize("seconds", [0.5, 1.0, 2.5, 4.0, 30.0])
def test_slices_without_a_gap_give_exactly_the_one_call_result(seconds):
    whole = _whole(SLOW)
    sliced, pendings, err = _sliced(SLOW, seconds)
    assert err is None
    assert sliced == whole
    assert whole["reason"] == "drained" and whole["peak"] == 3
    assert [s["running"] for s in whole["samples"]] == [3, 2, 1, 0]
    if seconds < 9:
        assert pendings


def test_slices_with_module_starts_between_them_keep_the_verdict_and_the_timeline():
    whole = _whole(SLOW)
    sliced, pendings, err = _sliced(SLOW, 1.0, gap=0.7)
    assert err is None and sliced is not None
    assert set(sliced) == set(whole)
    for key in ("drained", "reason", "peak", "source", "load"):
        assert sliced[key] == whole[key], key
    assert [s["running"] for s in sliced["samples"]] == [s["running"] for s in whole["samples"]]
    # the counts reported between slices only go down, and the time since the start goes up
    running = [p["running"] for p in pendings]
    assert running == sorted(running, reverse=True) and running[0] == 3
    elapsed = [p["elapsed"] for p in pendings]
    assert elapsed == sorted(elapsed) and all(p["timeout"] == 60.0 for p in pendings)
    assert any(p["idle_for"] is not None for p in pendings)      # the settle time, reported too


def test_the_timeout_counts_from_the_first_slice():
    busy = [(10_000.0, 5)]
    with pytest.raises(SglangError) as whole:
        _whole(busy, timeout=10.0)
    sliced, pendings, err = _sliced(busy, 1.0, gap=0.5, timeout=10.0)
    assert sliced is None and err is not None
    assert err.details["reason"] == whole.value.details["reason"] == "timeout"
    assert err.msg == whole.value.msg
    assert max(p["elapsed"] for p in pendings) <= 10.0 + 1.0


def test_proceed_at_the_timeout_and_check_mode_are_those_of_one_call():
    busy = [(10_000.0, 2)]
    whole = _whole(busy, timeout=5.0, on_timeout="proceed")
    sliced, _pendings, err = _sliced(busy, 1.0, timeout=5.0, on_timeout="proceed")
    assert err is None and sliced == whole and sliced["reason"] == "timeout" and sliced["drained"] is False
    check, pendings, err = _sliced(busy, 1.0, check_mode=True)
    assert err is None and not pendings and check == _whole(busy, check_mode=True)


@pytest.mark.parametrize("state", [
    {}, {"started": "x", "sources": ["get_load"]}, {"started": 1000.0, "sources": ["bogus"]},
    {"started": 1000.0, "sources": []}, {"started": 5000.0, "sources": ["get_load"]},
    {"started": 1000.0, "sources": ["get_load"], "samples": "nope"},
])
def test_a_bad_resume_state_is_refused(state):
    clock = Clock()
    with pytest.raises(SglangError) as err:
        _drain.drain_slice(TimedServer(clock, SLOW), _opts(), state, 1.0, clock=clock, sleep=clock.sleep)
    assert err.value.details["reason"] == "invalid_argument"
