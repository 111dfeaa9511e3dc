"""A symlink planted between the check of a state dir's parents and its creation.

`_record.ensure_dir` checked the directories above a missing state dir, then created the
missing ones by their path strings: an unprivileged user who planted a symlink in a sticky
shared directory (/tmp, /dev/shm) right after the check made root create the state dir (and
then the introspection cache, the lock file, the records) inside a directory that user owns,
where it can later be renamed away and replaced.

Now the path is walked from / through directory descriptors with O_NOFOLLOW, every missing
directory is made with mkdirat relative to a checked parent's descriptor and opened and judged
afterwards. The race is run for real, hundreds of times, bounded in time.
"""
from __future__ import annotations

import os
import shutil
import stat
import sys
import time

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record

ATTEMPTS = 20000
BUDGET_S = 15.0
FLIPPER = r"""
import os, random, sys, time
target, link, until = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
while time.time() < until:
    spin = random.randrange(40)  # the window is microseconds wide: vary the timing
    try:
        os.symlink(target, link)
    except OSError:
        time.sleep(0.0002)  # root's own directory is there now: nothing to plant
        continue
    for _ in range(spin):
        pass
    try:
        os.unlink(link)
    except OSError:
        pass
"""


def _reset(mid: str) -> None:
    """Root's own directory from the last attempt goes (the attacker cannot remove it: sticky)."""
    try:
        st = os.lstat(mid)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(mid)


def test_a_symlink_planted_after_the_check_never_receives_the_state_dir(throwaway_user, shared_tmp, sticky_shm):
    theirs = os.path.join(shared_tmp, "theirs")           # a directory the attacker owns
    os.mkdir(theirs, 0o755)
    os.chown(theirs, throwaway_user.uid, throwaway_user.gid)
    mid = os.path.join(sticky_shm, "sglang")             # missing: ensure_dir must create it
    state = os.path.join(mid, "state")
    flipper = throwaway_user.start([sys.executable, "-c", FLIPPER, theirs, mid, str(BUDGET_S + 5)])
    outcomes = {"made": 0, "refused": 0, "made_in_theirs": 0, "crashed": 0}
    crashes = []
    attempts = 0
    deadline = time.monotonic() + BUDGET_S
    try:
        while attempts < ATTEMPTS and time.monotonic() < deadline:
            attempts += 1
            _reset(mid)
            try:
                _record.ensure_dir(state, label="state_dir")
                outcomes["made"] += 1
            except SglangError as exc:
                # a refusal: the symlink, or a directory that vanished under the walk
                outcomes["refused"] += exc.details.get("reason") in ("unsafe_dir", "io_error")
                outcomes["crashed"] += exc.details.get("reason") not in ("unsafe_dir", "io_error")
            except Exception as exc:  # a traceback instead of a reason is a failure too
                outcomes["crashed"] += 1
                crashes.append(repr(exc))
            if os.path.lexists(os.path.join(theirs, "state")):
                outcomes["made_in_theirs"] += 1
                os.rmdir(os.path.join(theirs, "state"))
    finally:
        flipper.kill()
        flipper.wait()
        _reset(mid)
    assert outcomes["made_in_theirs"] == 0, "root created the state dir inside the attacker's directory: %s" % outcomes
    assert outcomes["crashed"] == 0, (outcomes, crashes[:3])
    assert attempts >= 100, "too few attempts to mean anything: %d (%s)" % (attempts, outcomes)
    assert outcomes["refused"] > 0 and outcomes["made"] > 0, outcomes  # both sides of the race were seen


def test_a_root_symlink_on_the_way_is_still_followed_and_judged(shared_tmp, sticky_shm):
    """A symlink root owns (like /var/run -> /run) is read and its target walked by the same rules."""
    real = os.path.join(shared_tmp, "real")
    os.mkdir(real, 0o755)
    os.symlink(real, os.path.join(sticky_shm, "via"))
    _record.ensure_dir(os.path.join(sticky_shm, "via", "state"))
    assert stat.S_IMODE(os.lstat(os.path.join(real, "state")).st_mode) == 0o700
    os.chmod(real, 0o777)  # its target open to everyone, without the sticky bit: refused
    try:
        _record.ensure_dir(os.path.join(sticky_shm, "via", "state2"))
        raised = None
    except SglangError as exc:
        raised = exc
    assert raised is not None and raised.details["reason"] == "unsafe_dir" and real in raised.msg
    assert not os.path.exists(os.path.join(real, "state2"))
