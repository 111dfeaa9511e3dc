"""A purge path that does not exist yet, pointed for a moment at a directory root owns.

Dump dirs on /dev/shm vanish at every reboot, so a purge path such as /dev/shm/sglang_hs often
does not exist when the teardown runs. An unprivileged user who plants a symlink there for a
moment (and removes it again) made the old check resolve the path while the symlink was there
(realpath), find nothing to refuse a moment later (the symlink gone), and hand the RESOLVED path,
a root-only directory of the user's choosing (a stand-in for /root/.ssh), to the deletes. A lost
race was only a refusal, so the user could retry at every restart.

Now the path deleted in is the path as given, walked one component at a time with O_NOFOLLOW;
the resolved path is used only for the deny-list. The race is run for real: the throwaway user
flips the symlink in a tight loop while root runs the teardown's own validate/plan/execute
hundreds of times (bounded in time).
"""
from __future__ import annotations

import os
import sys
import time
import uuid

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope

ATTEMPTS = 400
BUDGET_S = 15.0
FLIPPER = r"""
import os, sys, time
victim, dump, until = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
while time.time() < until:
    try:
        os.symlink(victim, dump)
    except OSError:
        pass
    for _ in range(200):
        pass
    try:
        os.unlink(dump)
    except OSError:
        pass
"""


def _scope(state_dir: str):
    # a named scope with no record and no title sweep: nothing to signal, only files to clean
    return build_scope("sec-%s" % uuid.uuid4().hex[:6], state_dir, [], [], [], False, False, [], "fail", [])


def _refill(victim: str) -> str:
    precious = os.path.join(victim, "authorized_keys")
    if not os.path.exists(precious):
        with open(precious, "w") as fh:
            fh.write("keep me\n")
    return precious


def test_a_symlink_planted_for_a_moment_never_redirects_the_purge(throwaway_user, shared_tmp, sticky_shm, tmp_path):
    victim = os.path.join(shared_tmp, "root-ssh")         # root-only, like /root/.ssh
    os.mkdir(victim, 0o700)
    precious = _refill(victim)
    dump = os.path.join(sticky_shm, "sglang_hs")         # not there yet: /dev/shm after a reboot
    state = str(tmp_path / "state")
    flipper = throwaway_user.start([sys.executable, "-c", FLIPPER, victim, dump, str(BUDGET_S + 5)])
    outcomes = {"refused": 0, "nothing": 0, "emptied_victim": 0}
    deadline = time.monotonic() + BUDGET_S
    attempts = 0
    try:
        while attempts < ATTEMPTS and time.monotonic() < deadline:
            attempts += 1
            opts = _teardown.Options(grace_period=0, timeout=1, shm_cleanup=False, purge_paths=[dump],
                                     gpu_backend="none")
            try:
                _teardown.validate_options(opts, state)
                plan = _teardown.make_plan(_scope(state), opts)
                _teardown.execute(plan, opts)
            except SglangError as exc:
                assert exc.details["reason"] in ("unsafe_purge_path", "bad_purge_path"), exc.msg
                outcomes["refused"] += 1
                continue
            if not os.path.exists(precious):
                outcomes["emptied_victim"] += 1
                _refill(victim)
            else:
                outcomes["nothing"] += 1
    finally:
        flipper.kill()
        flipper.wait()
    assert outcomes["emptied_victim"] == 0, "root emptied the directory a planted symlink pointed at: %s" % outcomes
    assert attempts >= 100, "too few attempts to mean anything: %d (%s)" % (attempts, outcomes)
    # the attacker was really there: some attempts met the symlink and were refused
    assert outcomes["refused"] > 0, outcomes
    assert os.path.exists(precious)
