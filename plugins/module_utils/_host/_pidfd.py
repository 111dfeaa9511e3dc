"""PRIVATE to llmops.sglang. Signals that reach exactly the process that was planned.

A pidfd names one process, not a number: once that process has exited, a signal through its
pidfd fails (ESRCH) even when the number now belongs to someone else, and the pidfd becomes
readable, which is how exit is detected (a zombie counts as exited). Teardown opens one for
each target when it plans (targets only: no descriptor per process on the host) and checks,
right after opening, that the process behind it has the planned start time.

Fallback where pidfd_open is missing (Python < 3.9, kernel < 5.3, seccomp filters answering
ENOSYS): the start-time check runs immediately before kill(2). A pid reused in the instant
between that check and the kill could still be hit; pidfds close that gap.
"""
from __future__ import annotations

import errno
import os
import select
import signal
from dataclasses import dataclass
from typing import Iterable, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

_UNSUPPORTED = False      # set once pidfd_open answered ENOSYS: do not ask again per process


def _same_start(pid: int, start_time: float) -> bool:
    """The live, non-zombie process `pid` has the planned start time. Both sides come from
    _procs (psutil's creation time rounded to the clock tick): equal unless it is another
    process."""
    now = _procs.start_time_of(pid)
    return now is not None and abs(now - start_time) < 0.005


@dataclass
class Handle:
    """One planned process: its pid, the start time it was planned with, and its pidfd."""
    pid: int
    start_time: float
    fd: Optional[int] = None

    def exited(self) -> bool:
        """True once the planned process has exited (zombie included). Never looks at whoever
        holds the number afterwards when a pidfd is held."""
        if self.fd is not None:
            try:
                return bool(_poll([self.fd], 0))
            except OSError:
                pass
        return not _same_start(self.pid, self.start_time)

    def send(self, sig: int) -> str:
        """'sent', 'gone' (the planned process exited: nothing was sent) or an error text."""
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)  # type: ignore[attr-defined]
            else:
                if not _same_start(self.pid, self.start_time):
                    return "gone"
                os.kill(self.pid, sig)
            return "sent"
        except ProcessLookupError:
            return "gone"
        except PermissionError:
            return "permission denied"
        except OSError as exc:
            return exc.strerror or str(exc)

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def supported() -> bool:
    return not _UNSUPPORTED and hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


def open_handle(pid: int, start_time: float) -> Optional[Handle]:
    """A handle on `pid` if it is still the process planned with `start_time`, else None."""
    global _UNSUPPORTED
    fd: Optional[int] = None
    if supported():
        try:
            fd = os.pidfd_open(pid)  # type: ignore[attr-defined]
        except ProcessLookupError:
            return None
        except OSError as exc:
            if exc.errno == errno.ENOSYS:
                _UNSUPPORTED = True
            fd = None          # EMFILE and friends: this one falls back to the start-time check
    handle = Handle(pid, start_time, fd)
    # Verify AFTER opening: the pidfd now pins whichever process held the number; if that is
    # not the planned one (died and reused before the open), drop it.
    if not _same_start(pid, start_time) or (fd is not None and handle.exited()):
        handle.close()
        return None
    return handle


def _poll(fds: Iterable[int], timeout: float) -> list:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return poller.poll(int(max(timeout, 0) * 1000))


def wait_exit(handles: Iterable[Handle], timeout: float) -> None:
    """Sleep up to `timeout`, waking early when one of the pidfds reports an exit."""
    fds = [h.fd for h in handles if h.fd is not None]
    try:
        _poll(fds, timeout)
    except OSError:
        select.select([], [], [], max(timeout, 0))
