"""Helpers for the launch-side security tests: a launch spec with safe defaults, and what is left
of a launch's session after it (every process here was started by the test itself)."""
from __future__ import annotations

import os
import signal
import sys
from typing import Any, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers.fixtures import TEST_MARKER, TEST_RUN_ID, unique_name

# the instance name of this process's launches (one per pytest worker: never another file's)
NAME = unique_name("sec")


def spec(state_dir: str, log_dir: str, argv: List[str], name: str = NAME, **extra: Any) -> _launcher.LaunchSpec:
    return _launcher.LaunchSpec(name=name, state_dir=state_dir, log_dir=log_dir, python=sys.executable,
                                venv=None, argv=argv, env={TEST_MARKER: TEST_RUN_ID}, keep_logs=2, **extra)


def sleeper(*extra: str) -> List[str]:
    """A stand-in server that just lives for a minute."""
    return [sys.executable, "-c", "import time; time.sleep(60)"] + list(extra)


def session_pids(sid: int) -> List[int]:
    """Live (non-zombie) processes of session `sid`."""
    return sorted(p.pid for p in _procs.snapshot().values() if p.sid == sid and not p.is_zombie)


def kill_session(sid: Optional[int]) -> None:
    """SIGKILL what a test launched: the session's process group, then any other member."""
    if not isinstance(sid, int) or sid <= 1:
        return
    try:
        os.killpg(sid, signal.SIGKILL)
    except OSError:
        pass
    for pid in session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
