"""A host of the SAME batch that becomes unreachable mid-batch must not turn the other hosts' verdict
into a refusal ("failed in an earlier batch; ... was not touched") when their servers were replaced
and serve the new configuration, nor roll a good new server back.

h1 and h2 in one batch (serial 2). h1's connection turns into an ssh to a closed port once its
launch wrote its record (the host drops out of the play, unreachable, at the readiness wait).
h2 was launched and is ready: its summary must say so (serving NEW config), never
"nothing was stopped" / "not touched", and the host must not fail for it.
"""
from __future__ import annotations

import os
import re
from typing import Dict, Iterator

import pytest

from helpers import play_runs
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http


def _serving(hv: dict) -> bool:
    return _http.request("127.0.0.1", hv["sglang_port"], "/health", timeout=2).status == 200


@pytest.fixture
def batch(tmp_path) -> Iterator[Dict[str, dict]]:
    hosts = play_runs.localhosts(str(tmp_path), "h1", "h2")
    yield hosts
    play_runs.tear_down_hosts(str(tmp_path), hosts)


def test_a_host_unreachable_mid_batch_does_not_turn_a_replaced_host_into_a_refusal(tmp_path, batch):
    h1 = dict(batch["h1"])
    record = os.path.join(h1["sglang_state_dir"], "%s.json" % h1["sglang_name"])
    # local until h1's launch wrote its record, then an ssh to a closed port: UNREACHABLE
    h1.update(ansible_connection="{{ 'ssh' if %r is exists else 'local' }}" % record,
              ansible_host="127.0.0.1", ansible_port=1, ansible_ssh_common_args="-o ConnectTimeout=2")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": h1, "h2": batch["h2"]})
    run = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_serial=2")
    out = run.stdout + run.stderr
    with open(str(tmp_path / "play.out"), "w") as fh:
        fh.write(out)
    assert "UNREACHABLE" in out, out[-4000:]
    assert _serving(batch["h2"]), out[-4000:]  # h2's new server serves
    h2_head = re.findall(r"%s on h2: (.*)" % re.escape(batch["h2"]["sglang_name"]), out)
    assert h2_head, out[-4000:]
    assert "serving NEW config" in h2_head[-1], (h2_head, out[-5000:])
    assert "was not touched" not in out, out[-5000:]


def test_a_host_unreachable_mid_batch_does_not_roll_back_a_good_new_server(tmp_path, batch):
    """The same with a last proven-good launch on h2: its good new server is torn down and the old
    configuration rolled back, because h1 (same batch) dropped out."""
    inv = play_runs.write_inventory(str(tmp_path / "inventory-1.yml"), batch)
    first = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_serial=2")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    h1 = dict(batch["h1"])
    record = os.path.join(h1["sglang_state_dir"], "%s.json" % h1["sglang_name"])
    # local until h1's NEW launch (the env below) wrote its record, then UNREACHABLE
    h1.update(ansible_connection="{{ 'ssh' if (lookup('ansible.builtin.file', %r, errors='ignore') | default('', true)"
                                 " is search('REVIEW_MARK')) else 'local' }}" % record,
              ansible_host="127.0.0.1", ansible_port=1, ansible_ssh_common_args="-o ConnectTimeout=2")
    inv = play_runs.write_inventory(str(tmp_path / "inventory-2.yml"), {"h1": h1, "h2": batch["h2"]})
    run = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_serial=2",
                         "-e", '{"sglang_serving_env": {"REVIEW_MARK": "1"}}')
    out = run.stdout + run.stderr
    with open(str(tmp_path / "play.out"), "w") as fh:
        fh.write(out)
    assert "UNREACHABLE" in out, out[-4000:]
    h2_head = re.findall(r"%s on h2: (.*)" % re.escape(batch["h2"]["sglang_name"]), out)
    assert h2_head, out[-4000:]
    assert "rollback" not in "\n".join(h2_head).lower() and "Roll back to the last" not in out, out[-6000:]
    assert "serving NEW config" in h2_head[-1], (h2_head, out[-6000:])
