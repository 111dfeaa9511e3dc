"""PRIVATE to llmops.sglang. The one poll loop for waits that have no event to block on (a
port's listeners gone, GPU memory released, a unit's cgroup removed): ask, sleep, ask again
until the answer is good or the deadline has passed. The clock is injected so that a test runs
a wait of minutes on a fake clock in no time. Waits that block on an event (a pidfd, a cgroup's
cgroup.events) stay as they are.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Clock:
    """time.monotonic and time.sleep; a test's clock advances its own time in sleep()."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM = Clock()


def until(probe: Callable[[], T], done: Callable[[T], bool], deadline: float, interval: float,
          clock: Clock = SYSTEM) -> T:
    """The last answer of `probe`: the first one `done` accepts, or the one asked at the deadline
    (`deadline` on `clock`'s time). Asked at least once; never sleeps past the deadline."""
    while True:
        value = probe()
        now = clock.now()
        if done(value) or now >= deadline:
            return value
        clock.sleep(min(interval, deadline - now))
