"""The SIGKILL phase adopts children without any check: children of a surviving target that the
plan refused (another user's, a protected name, another instance's) were killed anyway, and so
was a protected child forked during the teardown."""
from __future__ import annotations

import shutil
import sys
import uuid

from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope

# A target that ignores SIGTERM and keeps children the plan must spare; on SIGTERM it forks a
# protected child and an ordinary one (processes that appear during the teardown).
PARENT = r"""
import os, signal, subprocess, sys, time
token, user_argv, dcgm, late, state = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5]
kids = [subprocess.Popen(user_argv),
        subprocess.Popen([dcgm, "300"]),
        subprocess.Popen(["sleep", "300"], env=dict(os.environ, LLMOPS_SGLANG_INSTANCE="other",
                                                    LLMOPS_SGLANG_STATE_DIR=state))]
def on_term(signum, frame):
    kids.append(subprocess.Popen([late, "300"]))
    kids.append(subprocess.Popen(["sleep", "301"]))
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_sigkill_phase_adopts_only_what_the_rules_allow(spawn, throwaway_user, tmp_path):
    token = "zzadopt%s" % uuid.uuid4().hex[:8]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dcgm, late = str(bin_dir / "dcgm-exporter"), str(bin_dir / "dcgm-late")
    shutil.copy(shutil.which("sleep"), dcgm)
    shutil.copy(shutil.which("sleep"), late)
    state = str(tmp_path / "state")
    user_argv = " ".join(throwaway_user.argv(["sleep", "300"]))
    parent = spawn.start([sys.executable, "-c", PARENT, token, user_argv, dcgm, late, state],
                         log_path=str(tmp_path / "parent.log"))

    def kids():
        return {p.pid: p for p in _procs.snapshot().values() if p.ppid == parent.pid and not p.is_zombie}
    assert wait_for(lambda: len(kids()) == 3 and all(k.cmdline and k.cmdline[0] != sys.executable
                                                     for k in kids().values()), timeout=10)
    assert wait_for(lambda: any(k.uid == throwaway_user.uid for k in kids().values()), timeout=10)
    spared = kids()
    scope = build_scope("mine", state, [], [], [token], False, False, [], "fail", ["unrelated"])
    opts = _teardown.Options(grace_period=1, timeout=3, shm_cleanup=False, gpu_backend="none")
    plan = _teardown.make_plan(scope, opts)
    assert set(plan.targets) == {parent.pid}, plan.targets
    result = _teardown.execute(plan, opts)
    assert not result.get("failed"), result.get("msg")
    assert parent.wait(timeout=5) is not None
    # the three children the plan refused are alive, and so is the protected late child
    for pid, proc in spared.items():
        assert _procs.is_alive(pid, proc.start_time), (proc.cmdline, result["killed"])
    lates = [p for p in _procs.snapshot().values() if p.cmdline[:1] == [late] and not p.is_zombie]
    assert lates, "the protected child forked during the teardown was killed"
    assert any(s["pid"] == lates[0].pid and "protected" in s["why_not"] for s in result["spared"])
    # the ordinary child forked during the teardown is adopted and stopped, with its reason
    adopted = [k for k in result["killed"] if k["pid"] != parent.pid]
    assert len(adopted) == 1 and "appeared during teardown" in adopted[0]["reason"], result["killed"]
    # (the late protected child is alive and spared above, so the adopted one is the ordinary
    # `sleep 301` - on a loaded machine the teardown may catch it between its fork and its exec,
    # still with the parent's command line)
    assert adopted[0]["cmdline"] == "sleep 301" or adopted[0]["cmdline"].startswith(sys.executable + " -c"), adopted
