"""sglang_prewarm run the way ansible runs it (args file, JSON on stdout; once through the
ansible CLI) on a checkpoint this test writes and evicts (DONTNEED on its own files only).
Residency is checked by the test itself with mincore, not taken from the module's word."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Iterator, List, Tuple

import psutil
import pytest

from helpers import pagecache as pc
from helpers.fixtures import ROOT, run_module

MIB = 1 << 20


@pytest.fixture
def scratch() -> Iterator[str]:
    path = pc.scratch_dir("prewarm-itest")
    yield path
    pc.remove(path)


@pytest.fixture
def model(scratch: str) -> Tuple[str, List[str]]:
    directory = os.path.join(scratch, "model")
    files = pc.write_checkpoint(directory, shards=4, shard_size=16 * MIB)
    pc.evict(files)
    return directory, files


def weights(files: List[str]) -> List[str]:
    return [f for f in files if f.endswith(".safetensors")]


def test_prewarm_warms_evicted_shards_then_is_idempotent(model):
    directory, files = model
    size = sum(os.path.getsize(f) for f in files)
    result = run_module("sglang_prewarm", {"model_path": directory, "threads": 3, "block_size": "4M"}, diff=True)
    assert result["_rc"] == 0 and result["changed"], result
    assert size == result["resident_after"] == result["bytes"]
    # measured again here with mincore: all of it, but for the few pages the kernel may reclaim in
    # between from a busy machine (a CI run once found 54 of 16,000 pages gone)
    assert size - MIB <= pc.total_resident(files) <= size
    assert result["files"] == 7 and result["complete"] and result["read_bytes"] >= 64 * MIB
    assert result["resident_before_pct"] < 1.0 and result["resident_after_pct"] == 100.0
    assert result["gbps"] > 0 and result["seconds"] > 0 and "GB/s" in result["msg"]
    assert result["diff"]["after"].startswith("page cache: 100.0%")
    again = run_module("sglang_prewarm", {"model_path": directory})
    assert again["_rc"] == 0 and not again["changed"] and again["read_bytes"] == 0, again
    assert "already in the page cache" in again["msg"]


def test_check_mode_reports_and_reads_nothing(model):
    directory, files = model
    result = run_module("sglang_prewarm", {"model_path": directory}, check_mode=True)
    assert result["_rc"] == 0 and result["changed"] and result["fits"], result
    assert result["read_bytes"] == 0 and result["would_read_bytes"] >= 64 * MIB
    assert pc.total_resident(weights(files)) == 0  # residency unchanged


def test_memory_floor_above_available_reads_nothing(model):
    directory, files = model
    floor = psutil.virtual_memory().available + (4 << 30)
    result = run_module("sglang_prewarm", {"model_path": directory, "min_available": floor})
    assert result["_rc"] != 0 and result["failed"] and result["reason"] == "memory_floor", result
    assert "do not fit above the memory floor" in result["msg"] and result["read_bytes"] == 0
    assert pc.total_resident(weights(files)) == 0


def test_symlink_out_of_the_tree_is_refused(model, scratch):
    directory, files = model
    outside = os.path.join(scratch, "not-a-model.bin")
    pc.write_file(outside, 4 * MIB)
    pc.evict([outside])
    os.symlink(outside, os.path.join(directory, "tokenizer.model"))
    result = run_module("sglang_prewarm", {"model_path": directory})
    assert result["_rc"] != 0 and result["reason"] == "unsafe_symlink", result
    assert result["refused"][0]["target"] == os.path.realpath(outside)
    assert pc.resident(outside) == 0 and pc.total_resident(weights(files)) == 0


def test_hf_snapshot_with_details(scratch):
    repo = os.path.join(scratch, "hub", "models--org--tiny")
    blobs, snap = os.path.join(repo, "blobs"), os.path.join(repo, "snapshots", "0123abcd")
    os.makedirs(blobs)
    os.makedirs(snap)
    written = pc.write_checkpoint(os.path.join(scratch, "src"), shards=2, shard_size=8 * MIB)
    for i, path in enumerate(written):  # blobs named by content hash, links in the snapshot
        blob = os.path.join(blobs, "%040x" % (i + 1))
        os.rename(path, blob)
        os.symlink("../../blobs/%040x" % (i + 1), os.path.join(snap, os.path.basename(path)))
    blob_files = [os.path.join(blobs, n) for n in os.listdir(blobs)]
    pc.evict(blob_files)
    result = run_module("sglang_prewarm", {"model_path": snap, "detail": True})
    assert result["_rc"] == 0 and result["changed"], result
    assert result["tree"] == os.path.realpath(repo)
    assert {d["name"] for d in result["details"]} == {os.path.basename(p) for p in written}
    assert all(d["path"].startswith(os.path.realpath(blobs)) for d in result["details"])
    whole = sum(os.path.getsize(p) for p in blob_files)
    assert whole - MIB <= pc.total_resident(blob_files) <= whole  # (a few pages may be reclaimed between)


# Model paths that cannot be warmed: tests/unit/modules/test_sglang_prewarm.yaml (in-process).


def test_missing_psutil_is_named(model, scratch):
    shim = os.path.join(scratch, "shim")
    os.makedirs(shim)
    with open(os.path.join(shim, "psutil.py"), "w") as fh:
        fh.write("raise ImportError('psutil hidden by the test')\n")
    directory = model[0]
    result = run_module("sglang_prewarm", {"model_path": directory},
                        env={"PYTHONPATH": os.pathsep.join([shim, os.path.join(ROOT, "collections")])})
    assert result["failed"] and result["reason"] == "missing_library", result
    assert "Failed to import the required Python library (psutil)" in result["msg"]


def test_through_the_ansible_cli(model):
    """AnsiballZ packaging (module_utils, psutil import) as a real task runs it."""
    directory, files = model
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible"), "localhost", "-i", "localhost,",
                           "-c", "local", "-m", "llmops.sglang.sglang_prewarm", "-a", json.dumps({"model_path": directory}),
                           "-e", json.dumps({"ansible_python_interpreter": os.path.join(ROOT, ".venv", "bin", "python")})],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("localhost | CHANGED => "), proc.stdout[-3000:]
    task = json.loads(proc.stdout.split("=> ", 1)[1])
    # (a page another process's memory pressure evicts again in between reads 99.99 on a busy host)
    assert task["changed"] and task["resident_after_pct"] >= 99.9
    assert task["bytes"] - MIB <= pc.total_resident(files) <= task["bytes"]  # (the same, measured here)
