"""`state_dir`, `gpu_backend` and `api_key` set once for a play through `module_defaults` on the
`llmops.sglang.sglang` action group, and every module of the group used on its own in that play
(an operator's own playbook): launch, ready, probe, drain, lock, prewarm and teardown all take
them. Before, the group's defaults failed the play with "Unsupported parameters" at the first
module of the group that lacked one of them (sglang_prewarm knew none, sglang_drain and
sglang_lock one each), so they could not be set once."""
from __future__ import annotations

import os
import subprocess
import uuid

import yaml

from helpers import play_runs
from helpers.fixtures import controller_python, free_port

KEY = "sk-group-defaults-5e1f"

PLAY = """
- name: The group's shared options set once, every module of the group used on its own
  hosts: gpu_8x
  gather_facts: false
  module_defaults:
    group/llmops.sglang.sglang:
      state_dir: "{{ group_state_dir }}"
      gpu_backend: none
      api_key: "%s"
  tasks:
    - name: Launch
      llmops.sglang.sglang_launch:
        name: "{{ sglang_name }}"
        venv: "{{ sglang_venv }}"
        model_path: "{{ sglang_model_path }}"
        port: "{{ sglang_port }}"
        tp_size: 2
        env: "{{ sglang_env }}"
        log_dir: "{{ group_state_dir }}/../logs"
    - name: Ready
      llmops.sglang.sglang_ready:
        name: "{{ sglang_name }}"
        timeout: 120
    - name: Probe
      llmops.sglang.sglang_probe:
        ports: ["{{ sglang_port }}"]
      register: probed
    - name: Drain (idle)
      llmops.sglang.sglang_drain:
        name: "{{ sglang_name }}"
        port: "{{ sglang_port }}"
        settle: 0
        timeout: 30
      register: drained
    - name: Lock
      llmops.sglang.sglang_lock:
        name: "{{ sglang_name }}"
    - name: Unlock
      llmops.sglang.sglang_lock:
        name: "{{ sglang_name }}"
        state: absent
    - name: Prewarm (check mode)
      llmops.sglang.sglang_prewarm:
        model_path: "{{ weights_dir }}"
      check_mode: true
    - name: Say what the probe and the drain saw
      ansible.builtin.debug:
        msg: >-
          SEEN {{ probed.ports | map(attribute='api_key_sent') | list | to_json }}
          {{ probed.servers | map(attribute='instance') | select('equalto', sglang_name) | list | to_json }} {{ drained.drained }}
    - name: Teardown
      llmops.sglang.sglang_teardown:
        name: "{{ sglang_name }}"
        ports: ["{{ sglang_port }}"]
        sglang_processes: false
""" % KEY


def _inventory(tmp_path) -> str:
    group = play_runs.demo_vars()
    for unset in ("sglang_state_dir", "sglang_gpu_backend", "sglang_api_key"):
        group.pop(unset, None)
    host = {"ansible_connection": "local", "ansible_python_interpreter": controller_python(),
            "sglang_name": "tmd%s" % uuid.uuid4().hex[:6], "sglang_port": free_port(),
            "group_state_dir": str(tmp_path / "group-state"), "weights_dir": str(tmp_path / "weights")}
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"\0" * 4096)
    data = {"all": {"children": {"gpu_8x": {"hosts": {"h1": host}, "vars": group}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_the_group_options_set_once_reach_every_module_of_the_group(tmp_path):
    inv = _inventory(tmp_path)
    host = yaml.safe_load(open(inv))["all"]["children"]["gpu_8x"]["hosts"]["h1"]
    name, state = host["sglang_name"], host["group_state_dir"]
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    run = subprocess.run([play_runs.PLAYBOOK, "-i", inv, str(playbook)], cwd=play_runs.ROOT, env=play_runs.env(),
                         capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL, check=False)
    out = run.stdout + run.stderr
    try:
        assert run.returncode == 0, out[-5000:]
        # the launch used the group's state dir (its timeline and secrets are there; the teardown
        # removed the record); the probe sent the group's key to the proven server (which started
        # with it) and found the instance; the drain was let in too
        assert {name + ".timeline.json", name + ".secrets"} <= set(os.listdir(state)), os.listdir(state)
        assert 'SEEN [true] ["%s"] True' % name in " ".join(out.split()), out[-3000:]
        assert KEY not in out
        assert "failed=0" in out
    finally:
        if run.returncode != 0:
            play_runs.play(inv, "teardown.yml", "-e", "sglang_state_dir=%s" % state)
