"""Bad input to sglang_teardown given the ad hoc way (`ansible -m ... -a 'k=v ...'`) fails with a
message naming the option, not with Ansible's "An exception occurred during task execution",
and touches nothing (not even the state dir)."""
from __future__ import annotations

import os
import subprocess

import pytest

from helpers.fixtures import ROOT


@pytest.mark.parametrize("args,says,spec_error", [
    ("name=x ports=[8000]", "option 'ports'", True),
    ("name=x ports=8000,abc", "option 'ports'", True),
    ("name=x grace_period=soon", "grace_period", True),
    ("name=x foreign_gpu_processes=maybe", "foreign_gpu_processes", True),
    ("name=x ports=70000", "port 70000 is not in 1..65535", False),
])
def test_adhoc_bad_input_fails_clearly(args, says, spec_error, tmp_path):
    state = tmp_path / "state"
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible"), "localhost", "-m", "llmops.sglang.sglang_teardown",
            "-a", "%s sglang_processes=false gpus=[] gpu_backend=none state_dir=%s" % (args, state)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, check=False)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "FAILED!" in out and says in out, out
    assert "An exception occurred" not in out and "Traceback" not in out, out
    if spec_error:      # refused by the argument spec: no line announces signals
        assert "SIGTERM now" not in out, out
    assert not state.exists()
