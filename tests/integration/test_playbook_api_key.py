"""restart_serving.yml with an api key, end to end: the server enforces the key, readiness and
the chat verification pass with it, and the key appears nowhere in the play's output."""
from __future__ import annotations

import os
import subprocess
import uuid

from helpers.fixtures import ROOT, free_port
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http

KEY = "sk-itest-%s" % uuid.uuid4().hex


def _play(playbook: str, extra: dict) -> subprocess.CompletedProcess:
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i",
            os.path.join(ROOT, "inventory", "local.yml"), os.path.join(ROOT, "playbooks", playbook)]
    for key, value in extra.items():
        argv += ["-e", "%s=%s" % (key, value)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)


def test_restart_serving_with_api_key_never_shows_it(tmp_path):
    port = free_port()
    extra = {"sglang_name": "itest-key-%s" % uuid.uuid4().hex[:6], "sglang_port": port,
             "sglang_api_key": KEY, "sglang_state_dir": str(tmp_path / "state"),
             "sglang_log_dir": str(tmp_path / "logs")}
    try:
        run = _play("restart_serving.yml", extra)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-4000:]
        assert KEY not in out
        assert "reasoning_content" in out  # the serving verification ran
        # the server enforces the key it was given
        assert _http.request("127.0.0.1", port, "/v1/models", timeout=5).status == 401
        assert _http.request("127.0.0.1", port, "/v1/models", KEY, timeout=5).status == 200
        for name in os.listdir(str(tmp_path / "state")):
            if name.endswith(".json"):
                with open(str(tmp_path / "state" / name)) as fh:
                    assert KEY not in fh.read()
    finally:
        down = _play("teardown.yml", extra)
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
    assert _http.request("127.0.0.1", port, "/health", timeout=2).status is None
