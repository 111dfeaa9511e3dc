"""The result key `skipped` collided with Ansible's reserved key: a teardown that killed processes
and spared one showed as `skipping:` and `r is skipped` was true. The key is `spared`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

from helpers.fixtures import ROOT, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Stop the token's process; its protected child is spared
      llmops.sglang.sglang_teardown:
        patterns: ["{token}"]
        sglang_processes: false
        gpus: []
        gpu_backend: none
        shm_cleanup: false
        grace_period: 5
        state_dir: "{state}"
      register: r
    - name: The result reads as a change, never as a skipped task
      ansible.builtin.assert:
        that:
          - r is changed
          - r is not skipped
          - "'skipped' not in r"
          - r.spared | length == 1
          - r.killed | length == 1
"""


def test_a_spared_process_does_not_make_the_task_skipped(spawn, tmp_path):
    token = "zzspared%s" % uuid.uuid4().hex[:8]
    agent = str(tmp_path / "dcgm-exporter")            # protected by default (dcgm*)
    shutil.copy(shutil.which("sleep"), agent)
    parent = spawn.start([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:3]); "
                          "time.sleep(300)", agent, "300", token])
    assert wait_for(lambda: any(p.ppid == parent.pid and p.comm == "dcgm-exporter"
                                for p in _procs.snapshot().values()), timeout=10)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY.format(token=token, state=str(tmp_path / "state")))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", json.dumps({"ansible_python_interpreter": sys.executable}), str(playbook)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                         check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "skipping:" not in out, out[-4000:]
    assert parent.wait(timeout=5) is not None
