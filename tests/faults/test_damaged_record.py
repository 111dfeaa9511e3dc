"""Through the real playbooks against the emulator: a zero-byte launch record (a full disk, a
crash mid-write) wedges neither the restart nor teardown.yml. It is kept aside for inspection,
the instance is found by its cgroup, marker and port, and no empty cgroup is left behind."""
from __future__ import annotations

import glob
import json
import os

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http
from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from helpers import play_runs


def _serving(port: int) -> bool:
    return _http.request("127.0.0.1", port, "/health", timeout=2).status == 200


def _truncate(path: str) -> None:
    with open(path, "w"):
        pass


def _kept(state_dir: str, name: str):
    return sorted(glob.glob(os.path.join(state_dir, "%s.json.damaged-*" % name)))


def test_a_zero_byte_record_wedges_neither_the_restart_nor_the_teardown(tmp_path):
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    state, name, port = hv["sglang_state_dir"], hv["sglang_name"], hv["sglang_port"]
    record = _record.record_path(state, name)
    mount = _cgroup.v2_mount()
    cgroup = _cgroup.instance_path(mount, name) if mount else None
    try:
        first = play_runs.play(inv, "restart_serving.yml")
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        _truncate(record)
        # the next plain run recovers without a manual step
        again = play_runs.play(inv, "restart_serving.yml")
        out = again.stdout + again.stderr
        assert again.returncode == 0, out[-4000:]
        assert "damaged" in out and len(_kept(state, name)) == 1
        with open(record) as fh:
            assert json.load(fh)["port"] == port  # a good record of the server that runs now
        assert _serving(port)
        # teardown.yml too
        _truncate(record)
        down = play_runs.teardown(inv)
        out = down.stdout + down.stderr
        assert down.returncode == 0, out[-4000:]
        assert not _serving(port) and len(_kept(state, name)) == 2 and not os.path.exists(record)
        if cgroup is not None:
            assert not os.path.exists(cgroup), "an empty cgroup was left behind"
    finally:
        play_runs.teardown(inv)
