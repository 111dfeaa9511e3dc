"""PRIVATE to llmops.sglang. The operation lock's holder gives a sign of life while it waits.

A restart holds its instance's operation lock through steps that may take many minutes (a
readiness wait of up to its timeout, the rollback's own). Another controller takes over a lock
whose holder it cannot check once the lock's age passes the longer of its ttl and the lifetime
the holder recorded (_lock.takeover_reason); the age counts from the last refresh. So a wait
that refreshes its lock every REFRESH_EVERY_S keeps a live run's lock its own however long the
wait takes, and a run that died stops refreshing it.

`Heartbeat.sleep` replaces the wait's own sleep: it sleeps, then refreshes when one is due. A
refresh that fails is said once and never fails the wait (the lock is bookkeeping; the server's
readiness is the verdict).
"""
from __future__ import annotations

import time
from typing import Callable, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

# Far below any lock ttl (the restart's is over an hour; sglang_lock's smallest useful one is
# minutes) and rare enough to cost nothing: one small atomic write per half minute.
REFRESH_EVERY_S = 30.0


class Heartbeat:
    """Refreshes the lock whose token is `token` at most every `every` seconds."""

    def __init__(self, state_dir: str, name: str, token: str, warn: Callable[[str], None],
                 every: float = REFRESH_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.state_dir, self.name, self.token = state_dir, name, token
        self.every, self._clock, self._sleep, self._warn = every, clock, sleep, warn
        self._last: Optional[float] = None
        self.refreshed: List[float] = []  # wall-clock times of the refreshes written
        self.failed = False

    def beat(self) -> None:
        """Refresh now unless the last refresh (this call's, or one in the lock: a sliced wait's
        previous slice) is younger than `every`."""
        now = self._clock()
        if self.failed or (self._last is not None and now - self._last < self.every):
            return
        self._last = now
        try:
            out = _lock.refresh(self.state_dir, self.name, self.token, min_interval=self.every)
        except (SglangError, OSError) as exc:
            self.failed = True
            self._warn("the operation lock of %s was not refreshed while waiting (another controller may take it "
                       "over after its lifetime): %s" % (self.name, getattr(exc, "msg", None) or exc))
            return
        if out["changed"]:
            self.refreshed.append(out["holder"]["refreshed"])

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)
        self.beat()


def heartbeat(state_dir: Optional[str], name: Optional[str], token: Optional[str], check_mode: bool,
              warn: Callable[[str], None]) -> Optional[Heartbeat]:
    """The heartbeat of a wait holding the lock `token` of instance `name`; None when there is
    nothing to refresh (no token, no instance, check mode: nothing is written then)."""
    if not token or not state_dir or not name or check_mode:
        return None
    return Heartbeat(state_dir, name, token, warn)
