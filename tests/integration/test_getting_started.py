"""docs/getting-started.md, followed as an operator would: the built tarball installed with
ansible-galaxy into a fresh collections path outside the checkout, then the collection's playbook
and module run by their full names (no checkout on any path) against the emulator's venv."""
from __future__ import annotations

import glob
import json
import os
import subprocess

from helpers.fixtures import ROOT, emulator_python_path

BIN = os.path.join(ROOT, ".venv", "bin")


def _run(argv, cwd, env, timeout=300):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, (argv, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def test_install_the_tarball_and_run_by_fqcn(tmp_path) -> None:
    _run(["bash", os.path.join(ROOT, "scripts", "build.sh")], ROOT, dict(os.environ))   # `make build`
    tarballs = glob.glob(os.path.join(ROOT, "build", "dist", "llmops-sglang-*.tar.gz"))
    assert tarballs, "no tarball built"
    ops = tmp_path / "ops-repo"          # the operator's own repository: no checkout inside
    ops.mkdir()
    (ops / "ansible.cfg").write_text("[defaults]\ncollections_path = ./collections\ncollections_scan_sys_path = false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    env.update(ANSIBLE_CONFIG=str(ops / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", PATH=BIN + ":" + env.get("PATH", ""))
    _run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", max(tarballs, key=os.path.getmtime),
          "-p", "./collections"], str(ops), env)
    assert (ops / "collections" / "ansible_collections" / "llmops" / "sglang" / "MANIFEST.json").exists()
    (ops / "hosts.yml").write_text(json.dumps({"all": {"children": {"gpu_8x": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": os.path.join(BIN, "python")}}}}}}))
    venv = os.path.dirname(os.path.dirname(emulator_python_path()))
    # step 5: a playbook by its full name
    play = _run([os.path.join(BIN, "ansible-playbook"), "llmops.sglang.probe", "-i", "hosts.yml",
                 "-e", json.dumps({"sglang_venv": venv, "sglang_state_dir": str(tmp_path / "state")}),  # a path may hold a space
                 "-e", "sglang_gpu_backend=none"], str(ops), env)
    assert "ok=" in play.stdout and "failed=0" in play.stdout, play.stdout[-3000:]
    # step 6: the one-line "is this flag/value accepted on that host?"
    adhoc = _run([os.path.join(BIN, "ansible"), "localhost", "-i", "hosts.yml", "-m", "llmops.sglang.sglang_probe",
                  "-a", json.dumps({"venv": venv, "gpu_backend": "none", "state_dir": str(tmp_path / "state"),
                                    "flags": {"reasoning-parser": "kimi_k2"}})], str(ops), env)
    assert '"accepted": true' in adhoc.stdout, adhoc.stdout[-3000:]
    wrong = subprocess.run([os.path.join(BIN, "ansible"), "localhost", "-i", "hosts.yml", "-m", "llmops.sglang.sglang_probe",
                            "-a", json.dumps({"venv": venv, "gpu_backend": "none", "state_dir": str(tmp_path / "state"),
                                              "flags": {"reasoning-parser": "kimi-k2"}})],
                           cwd=str(ops), env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                           check=False)
    assert '"accepted": false' in wrong.stdout and "kimi_k2" in wrong.stdout, wrong.stdout[-3000:]
