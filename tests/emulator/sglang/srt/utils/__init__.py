"""Process helpers with the same names and behaviour as sglang.srt.utils (stdlib only)."""

import ctypes
import logging
import os
import signal
from typing import Dict, List

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def _prctl(option: int, arg: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_prctl_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Real sglang children ask the kernel to kill them when their parent dies."""
    _prctl(_PR_SET_PDEATHSIG, int(sig))


def set_process_title(title: str) -> None:
    """setproctitle if installed (rewrites cmdline + comm); else only comm via PR_SET_NAME.

    The GPU machine installs offline, so setproctitle may be missing there.
    """
    try:
        import setproctitle  # type: ignore[import-not-found]

        setproctitle.setproctitle(title)
        return
    except ImportError:
        pass
    buf = ctypes.create_string_buffer(title.encode()[:15])
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, buf, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _children_map() -> Dict[int, List[int]]:
    """ppid -> [pid] from /proc (sglang uses psutil; the emulator has only the stdlib)."""
    out: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        out.setdefault(ppid, []).append(int(name))
    return out


def get_descendants(pid: int) -> List[int]:
    tree = _children_map()
    found: List[int] = []
    stack = [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_process_tree(parent_pid: int, include_parent: bool = True, skip_pid: int = -1) -> None:
    """SIGKILL the descendants (parent->child walk, so reparented processes are missed, as in
    real sglang), then the parent itself when asked."""
    for pid in get_descendants(parent_pid):
        if pid == skip_pid:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if include_parent:
        try:
            os.kill(parent_pid, signal.SIGKILL)
        except OSError:
            pass
