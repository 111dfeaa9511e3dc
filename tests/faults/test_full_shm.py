"""A full /dev/shm refuses the restart in its plan, before anything is stopped (issue: the old
server was stopped, the new server and the rollback died on `No space left on device`, the host
ended DOWN).

The restart runs in a private mount namespace whose /dev/shm is a small tmpfs, filled by another
user's leftover (helpers.tmpfs.private_shm): the host's /dev/shm is not touched. The server the
restart would replace runs outside it, launched by the same playbook.
"""
from __future__ import annotations

import json
import os

import pytest

from helpers import play_runs, tmpfs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace and a tmpfs need root")
FILL = "head -c 60m /dev/zero > /dev/shm/leftover_segment && chown 65534 /dev/shm/leftover_segment"


def _record(hv: dict) -> dict:
    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        return json.load(fh)


def test_a_full_shm_refuses_the_restart_before_the_old_server_is_stopped(one_host):
    inv, hv = one_host
    first = play_runs.play(inv, "restart_extraction.yml")
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    old = _record(hv)

    changed = play_runs.play(inv, "restart_extraction.yml", "-e", '{"sglang_args": {"mem-fraction-static": 0.7}}',
                             wrap=tmpfs.private_shm("size=64m", FILL))
    out = changed.stdout + changed.stderr
    assert changed.returncode != 0, out[-4000:]
    assert "/dev/shm: " in out and "MiB free, below the 256.0 MiB a server of tp_size 8 needs" in out, out[-4000:]
    assert "/dev/shm/leftover_segment (60.0 MiB, user nobody, held by no process)" in out, out[-4000:]
    # nothing was stopped: the old server serves, its record is the same
    assert _procs.is_alive(old["pid"], old["start_time"]), out[-4000:]
    assert _record(hv)["launch_id"] == old["launch_id"]
