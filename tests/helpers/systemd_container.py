"""systemd 252 booted as PID 1 of a throwaway container, the way container managers do it, for
the tests of the systemd containment backend on hosts where PID 1 is not systemd.

Namespaces: pid, mount, cgroup, net (loopback only), uts, ipc. Root: an overlay of the host's
root filesystem whose upper layer is a tmpfs of the container's own mount namespace, so nothing a
unit writes reaches the host (a systemd booted on the host's real root runs
systemd-tmpfiles-setup, which empties /tmp). /sys and /proc/sys are read-only, /dev is private
(null, zero, full, random, urandom, tty, a new devpts), the bounding set has no CAP_SYS_MODULE,
CAP_SYS_TIME, CAP_SYS_BOOT, CAP_SYS_RAWIO, and every unit wanted by sysinit/sockets/timers (and
everything else that touches kernel state) is masked inside the overlay. systemd starts only a
target without dependencies; the tests' transient units bring their default dependencies.

The whole container lives in one cgroup of the host (not under llmops-sglang.slice), which is
what `close` kills and removes: nothing of it outlives the test.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from typing import List, Optional, Sequence

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

SYSTEMD = "/lib/systemd/systemd"
MASK = ("modprobe@.service systemd-modules-load.service systemd-fsck-root.service systemd-fsck@.service "
        "systemd-remount-fs.service systemd-growfs-root.service systemd-growfs@.service systemd-repart.service "
        "systemd-binfmt.service proc-sys-fs-binfmt_misc.automount systemd-sysctl.service systemd-udevd.service "
        "systemd-udev-trigger.service systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service "
        "systemd-tmpfiles-clean.timer systemd-random-seed.service systemd-pcrphase.service "
        "systemd-pcrphase-sysinit.service systemd-timesyncd.service systemd-hwdb-update.service "
        "systemd-journal-catalog-update.service getty.target console-getty.service").split()
BOOT = r"""#!/bin/bash
set -eu
B="$1"
mount --make-rprivate /
mount -t tmpfs -o mode=700 llmops-sd "$B"
mkdir -p "$B/lower" "$B/upper" "$B/work" "$B/root"
mount --bind / "$B/lower"
mount -t overlay overlay -o "lowerdir=$B/lower,upperdir=$B/upper,workdir=$B/work" "$B/root"
R="$B/root"
mount -t proc proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"
mount -o remount,bind,ro "$R/proc/sys"
mount -t sysfs -o ro sysfs "$R/sys"
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
mount -t tmpfs -o mode=755 tmpfs "$R/dev"
for n in null zero full random urandom tty; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
touch "$R/dev/console"; mount --bind /dev/null "$R/dev/console"
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=666 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs tmpfs "$R/dev/shm"
mkdir -p "$R/etc/systemd/system"
printf '[Unit]\nDescription=llmops containment tests\nDefaultDependencies=no\n' \
  > "$R/etc/systemd/system/llmops-test.target"
for d in /lib/systemd/system/sysinit.target.wants /lib/systemd/system/sockets.target.wants \
         /lib/systemd/system/timers.target.wants /etc/systemd/system/*.wants; do
  for u in "$d"/*; do
    if [ -e "$u" ] || [ -L "$u" ]; then ln -sf /dev/null "$R/etc/systemd/system/$(basename "$u")"; fi
  done
done
shift
for u in "$@"; do ln -sf /dev/null "$R/etc/systemd/system/$u"; done
# host directories the tests run from (the checkout, the venvs), read-only at the same path: one
# under /tmp, /run or /dev is hidden by the container's own tmpfs there
while IFS= read -r p; do
  [ -n "$p" ] || continue
  mkdir -p "$R$p"
  mount --bind "$p" "$R$p"
  mount -o remount,bind,ro "$R$p"
done <<< "${LLMOPS_SD_BINDS:-}"
ip link set lo up
cd "$R"
mkdir -p .oldroot
pivot_root . .oldroot
umount -l /.oldroot
export container=llmops-test
exec setpriv --bounding-set=-sys_module,-sys_time,-sys_boot,-sys_rawio,-wake_alarm \
  /lib/systemd/systemd --system --unit=llmops-test.target --log-target=null
"""


def available() -> Optional[str]:
    """None when a container can be booted here, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("unshare", "nsenter", "setpriv", "ip", "pivot_root"):
        if not shutil.which(tool):
            return "%s is not installed" % tool
    if not os.access(SYSTEMD, os.X_OK):
        return "%s is not installed" % SYSTEMD
    if _cgroup.v2_mount() is None:
        return "no cgroup v2 hierarchy"
    return None


class SystemdContainer:
    """`binds`: host directories seen read-only at the same path inside (the checkout wherever
    it is, the venvs); the rest of the host's root is the overlay's lower layer."""

    def __init__(self, binds: Sequence[str] = ()) -> None:
        if any("\n" in b or not os.path.isabs(b) for b in binds):
            raise ValueError("binds must be absolute paths without newlines: %r" % (binds,))
        self.binds = [os.path.realpath(b) for b in binds]
        self.dir = tempfile.mkdtemp(prefix="llmops-sd-")
        self.cgroup = os.path.join(_cgroup.v2_mount() or "/nonexistent", "llmops-systemd-test-%s" % uuid.uuid4().hex[:8])
        self.pid: Optional[int] = None
        self.starter: Optional["subprocess.Popen[bytes]"] = None

    def start(self, timeout: float = 60) -> None:
        os.mkdir(self.cgroup, 0o700)
        script = os.path.join(self.dir, "boot.sh")
        with open(script, "w") as fh:
            fh.write(BOOT)
        base = os.path.join(self.dir, "base")
        os.mkdir(base, 0o700)
        log = open(os.path.join(self.dir, "boot.log"), "wb")
        self.starter = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount", "--cgroup", "--net", "--uts", "--ipc", "bash", script, base]
            + MASK, preexec_fn=lambda: _cgroup.join(self.cgroup), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, LLMOPS_SD_BINDS="\n".join(self.binds)))
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            self.pid = self._find_pid1()
            if self.pid and self.run(["systemctl", "is-system-running"], timeout=10).stdout.strip() in (
                    "running", "degraded"):
                return
            if time.monotonic() > deadline or self.starter.poll() is not None:
                raise RuntimeError("systemd did not come up in the container: %s" % self.boot_log())
            time.sleep(0.2)

    def boot_log(self) -> str:
        try:
            with open(os.path.join(self.dir, "boot.log")) as fh:
                return fh.read()[-3000:]
        except OSError:
            return ""

    def _find_pid1(self) -> Optional[int]:
        for pid in _cgroup.members(self.cgroup):
            proc = _procs.read_proc(pid)
            if proc and proc.cmdline[:2] == [SYSTEMD, "--system"]:
                return pid
        return None

    def run(self, argv: List[str], timeout: float = 300, env: Optional[dict] = None) -> "subprocess.CompletedProcess[str]":
        """Run `argv` inside the container (all its namespaces, its root and cwd)."""
        assert self.pid
        full = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                "HOME": "/root", "SYSTEMD_PAGER": ""}
        full.update(env or {})
        return subprocess.run(["nsenter", "-t", str(self.pid), "-a", "-r", "-w", "--"] + argv, capture_output=True,
                              text=True, timeout=timeout, env=full, stdin=subprocess.DEVNULL, check=False)

    def close(self) -> None:
        """Kill the whole container through its cgroup, remove the cgroup tree and the temp dir."""
        if os.path.isdir(self.cgroup):
            _cgroup.kill(self.cgroup)
            _cgroup.wait_empty(self.cgroup, time.monotonic() + 30)
            for root, dirs, _files in os.walk(self.cgroup, topdown=False):
                for d in dirs:
                    try:
                        os.rmdir(os.path.join(root, d))
                    except OSError:
                        pass
            try:
                os.rmdir(self.cgroup)
            except OSError:
                pass
        if self.starter is not None:
            try:
                self.starter.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
