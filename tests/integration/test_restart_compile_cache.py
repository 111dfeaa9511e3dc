"""The compile/JIT cache through the real playbooks against the emulator (issue 34): a restart
keeps it (the teardown inside the launch call removes the TMPDIR, not the cache); with
`sglang_clear_cache: true` the restart empties it once the old server is gone, and so does
playbooks/teardown.yml."""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _compile_cache as cc
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from helpers import play_runs

KERNEL = os.path.join("inductor", "fxgraph", "compiled-kernel")


@pytest.fixture
def cache_dir():
    """A cache directory whose parents only root or this user can write (not under the sticky /tmp,
    which the launch refuses)."""
    base = os.path.dirname(cc.default_dir())
    os.makedirs(base, mode=0o700, exist_ok=True)
    root = tempfile.mkdtemp(prefix="llmops-cc-play-", dir=base)
    yield os.path.join(root, "sglang")
    shutil.rmtree(root, ignore_errors=True)


def _record_of(hv):
    with open(_record.record_path(hv["sglang_state_dir"], hv["sglang_name"])) as fh:
        return json.load(fh)


def _compiled(cache):
    path = os.path.join(cache, KERNEL)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"k" * 2048)
    return path


def test_a_restart_keeps_the_cache_and_clear_cache_empties_it(tmp_path, cache_dir):
    hv = play_runs.host_vars(str(tmp_path), "h1", sglang_cache_dir=cache_dir)
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    try:
        first = play_runs.play(inv, "restart_serving.yml")
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        rec1 = _record_of(hv)
        assert rec1["compile_cache"]["dir"] == cache_dir and rec1["compile_cache"]["source"] == "option"
        kernel = _compiled(cache_dir)

        again = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_force=true")
        assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
        rec2 = _record_of(hv)
        assert rec2["launch_id"] != rec1["launch_id"]                 # a new server
        assert os.path.getsize(kernel) == 2048                    # the restart kept the compiled kernels

        cleared = play_runs.play(inv, "restart_serving.yml", "-e", "sglang_force=true", "-e", "sglang_clear_cache=true")
        assert cleared.returncode == 0, (cleared.stdout + cleared.stderr)[-3000:]
        assert _record_of(hv)["launch_id"] != rec2["launch_id"]
        assert not os.path.exists(kernel) and os.path.isdir(cache_dir)   # emptied, the directory kept

        kernel = _compiled(cache_dir)
        down = play_runs.play(inv, "teardown.yml", "-e", "sglang_clear_cache=true")
        assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
        assert not os.path.exists(kernel) and os.path.isdir(cache_dir)
    finally:
        play_runs.teardown(inv)
