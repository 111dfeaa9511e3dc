"""Small filesystems of a test's own (root only): a private tmpfs to fill up, for the faults a
full disk causes. Nothing else on the host is mounted on or written to."""
from __future__ import annotations

import errno
import os
import subprocess


def mount_private(path: str, options: str) -> str:
    """Mount a tmpfs at `path` (created when missing). mode=0700: a private directory, as the
    state and log dirs must be (tmpfs defaults to 1777, which the launcher refuses)."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options + ",mode=0700", "tmpfs", path], check=True)
    return path


def unmount(path: str) -> None:
    subprocess.run(["umount", "-l", path], check=False)


def fill(path: str) -> None:
    """Write one file until the filesystem says ENOSPC."""
    fd = os.open(os.path.join(path, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def private_shm(options: str, setup: str = "") -> list:
    """An argv prefix that runs a command in a private mount namespace whose /dev/shm is a new
    tmpfs (`options`, e.g. "size=64m"), after the shell lines `setup` ran there (fill it, chown a
    file). The host's /dev/shm is never touched: the mount exists only in that namespace, and
    is gone with its last process."""
    script = 'mount -t tmpfs -o mode=1777,%s tmpfs /dev/shm && %s exec "$0" "$@"' % (
        options, (setup.strip().rstrip(";") + " && ") if setup.strip() else "")
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script]
