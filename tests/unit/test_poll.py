"""_core/_poll: the one poll loop of the waits without an event, on a fake clock."""
from __future__ import annotations

from typing import List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _poll


class FakeClock(_poll.Clock):
    def __init__(self) -> None:
        self.t = 100.0
        self.slept: List[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.slept.append(seconds)
        self.t += seconds


def test_returns_the_first_good_answer_without_sleeping_after_it():
    clock = FakeClock()
    answers = iter([3, 2, 0, 5])
    assert _poll.until(lambda: next(answers), lambda n: n == 0, clock.t + 60, 0.5, clock) == 0
    assert clock.slept == [0.5, 0.5]


def test_at_the_deadline_the_last_answer_and_no_sleep_past_it():
    clock = FakeClock()
    asked: List[float] = []

    def probe() -> bool:
        asked.append(clock.t)
        return False
    assert _poll.until(probe, bool, clock.t + 1.0, 0.4, clock) is False
    assert asked == pytest.approx([100.0, 100.4, 100.8, 101.0]) and clock.t == pytest.approx(101.0)  # the last sleep is cut to the deadline


def test_asked_once_when_the_deadline_has_passed():
    clock = FakeClock()
    calls = []
    assert _poll.until(lambda: calls.append(1) or "x", lambda v: False, clock.t - 5, 1.0, clock) == "x"
    assert calls == [1] and clock.slept == []
