"""Per-instance host lock: two launches/teardowns of one instance never interleave."""
from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from typing import Iterator

from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._record import ensure_dir, validate_name


@contextmanager
def instance_lock(state_dir: str, name: str, timeout: float = 30.0) -> Iterator[str]:
    """flock on <state_dir>/<name>.lock; fails with who holds it after `timeout` seconds."""
    ensure_dir(state_dir)
    path = os.path.join(state_dir, "%s.lock" % validate_name(name))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
                    raise SglangError(
                        "another operation on instance %r holds %s (pid %s) for more than %.0f s; "
                        "refusing to interleave" % (name, path, holder or "unknown", timeout))
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        os.close(fd)
