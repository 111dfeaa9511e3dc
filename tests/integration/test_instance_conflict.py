"""Through the real playbooks against the emulator: a restart of instance B on the port of the
running instance A stops nothing (reason other_instance, naming A and how to stop it), and A
keeps serving with its record intact.

The hosts run with an api key (the group's sglang_api_key): A's restart_serving.yml is also the
test that the server enforces the key it was given, readiness and the chat verification pass with
it, and the key appears nowhere in any play's output or state file (this was
test_playbook_api_key.py, a restart and a teardown of their own)."""
from __future__ import annotations

import json
import os
import uuid

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from helpers import play_runs

KEY = "sk-itest-%s" % uuid.uuid4().hex


def _serving(port: int) -> bool:
    return _http.request("127.0.0.1", port, "/health", KEY, timeout=2).status == 200


def _output(run) -> str:
    out = run.stdout + run.stderr
    assert KEY not in out, "the api key is in the output of %s" % run.args
    return out


def test_a_restart_of_b_on_the_port_of_a_stops_nothing(tmp_path):
    a = play_runs.host_vars(str(tmp_path), "a")
    b = play_runs.host_vars(str(tmp_path), "b", sglang_port=a["sglang_port"])
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"a": a, "b": b}, sglang_api_key=KEY)
    port = a["sglang_port"]
    try:
        run = play_runs.play(inv, "restart_serving.yml", "--limit", "a")
        out = _output(run)
        assert run.returncode == 0, out[-3000:]
        # the api key: the serving verification ran with it, the server enforces it, no state file holds it
        assert "reasoning_content" in out, out[-3000:]
        assert _http.request("127.0.0.1", port, "/v1/models", timeout=5).status == 401
        assert _http.request("127.0.0.1", port, "/v1/models", KEY, timeout=5).status == 200
        for name in os.listdir(a["sglang_state_dir"]):
            if name.endswith(".json"):
                with open(os.path.join(a["sglang_state_dir"], name)) as fh:
                    assert KEY not in fh.read(), name
        with open(_record.record_path(a["sglang_state_dir"], a["sglang_name"])) as fh:
            before = json.load(fh)
        conflict = play_runs.play(inv, "restart_serving.yml", "--limit", "b")
        out = _output(conflict)
        assert conflict.returncode != 0, out[-3000:]
        assert "other_instance" in out and "instance '%s'" % a["sglang_name"] in out, out[-4000:]
        assert "playbooks/teardown.yml -e sglang_name=%s" % a["sglang_name"] in out
        assert _serving(port), "the restart of b stopped instance a"
        with open(_record.record_path(a["sglang_state_dir"], a["sglang_name"])) as fh:
            assert json.load(fh)["launch_id"] == before["launch_id"]
        # teardown.yml of b refuses the same way; of a it works
        down_b = play_runs.play(inv, "teardown.yml", "--limit", "b", timeout=300)
        assert down_b.returncode != 0 and "other_instance" in _output(down_b)
        assert _serving(port)
    finally:
        down = play_runs.play(inv, "teardown.yml", "--limit", "a", timeout=300)
        assert down.returncode == 0, _output(down)[-3000:]
    assert _http.request("127.0.0.1", port, "/health", timeout=2).status is None
