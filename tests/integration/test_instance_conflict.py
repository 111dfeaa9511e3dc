"""Through the real playbooks against the emulator: a restart of instance B on the port of the
running instance A stops nothing (reason other_instance, naming A and how to stop it), and A
keeps serving with its record intact."""
from __future__ import annotations

import json

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from helpers import play_runs


def _serving(port: int) -> bool:
    return _http.request("127.0.0.1", port, "/health", timeout=2).status == 200


def test_a_restart_of_b_on_the_port_of_a_stops_nothing(tmp_path):
    a = play_runs.host_vars(str(tmp_path), "a")
    b = play_runs.host_vars(str(tmp_path), "b", sglang_port=a["sglang_port"])
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"a": a, "b": b})
    try:
        run = play_runs.play(inv, "restart_serving.yml", "--limit", "a")
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        with open(_record.record_path(a["sglang_state_dir"], a["sglang_name"])) as fh:
            before = json.load(fh)
        conflict = play_runs.play(inv, "restart_serving.yml", "--limit", "b")
        out = conflict.stdout + conflict.stderr
        assert conflict.returncode != 0, out[-3000:]
        assert "other_instance" in out and "instance '%s'" % a["sglang_name"] in out, out[-4000:]
        assert "playbooks/teardown.yml -e sglang_name=%s" % a["sglang_name"] in out
        assert _serving(a["sglang_port"]), "the restart of b stopped instance a"
        with open(_record.record_path(a["sglang_state_dir"], a["sglang_name"])) as fh:
            assert json.load(fh)["launch_id"] == before["launch_id"]
        # teardown.yml of b refuses the same way; of a it works
        down_b = play_runs.play(inv, "teardown.yml", "--limit", "b", timeout=300)
        assert down_b.returncode != 0 and "other_instance" in down_b.stdout + down_b.stderr
        assert _serving(a["sglang_port"])
    finally:
        down = play_runs.play(inv, "teardown.yml", "--limit", "a", timeout=300)
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
    assert not _serving(a["sglang_port"])
