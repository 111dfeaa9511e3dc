"""Prewarm library on small checkpoints written here: file selection and the symlink tree rule,
mincore residency, the memory floor (memory injected, so the stop point is exact), check mode,
idempotence. Files are evicted with DONTNEED on the test's own files only."""
from __future__ import annotations

import errno
import json
import os
import subprocess
from typing import Iterator, Tuple

import pytest

from helpers import pagecache as pc
from helpers.fixtures import COLLECTIONS, ROOT
from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._host import _modelfiles
from ansible_collections.llmops.sglang.plugins.module_utils._prewarm import _prewarm
from ansible_collections.llmops.sglang.plugins.module_utils._host import _residency
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

MIB = 1 << 20


@pytest.fixture
def scratch() -> Iterator[str]:
    path = pc.scratch_dir("prewarm-unit")
    yield path
    pc.remove(path)


@pytest.fixture
def model(scratch: str) -> Tuple[str, list]:
    directory = os.path.join(scratch, "model")
    return directory, pc.write_checkpoint(directory, shards=3, shard_size=8 * MIB)


def shards(files: list) -> list:
    """The weights only: planning reads the index JSON itself (to learn the shard list)."""
    return [f for f in files if f.endswith(".safetensors")]


def aux_bytes(files: list) -> int:
    return sum(os.path.getsize(f) for f in files if not f.endswith(".safetensors"))


def fixed_memory(available: int, total: int = 64 << 30):
    return lambda: (available, total)


def opts(**kw) -> _prewarm.Options:
    base = dict(threads=2, block_size=1 * MIB, min_available="0%")
    base.update(kw)
    return _prewarm.Options(**base)


# --- file selection and the tree rule -------------------------------------------------------

def test_index_lists_the_shards_and_aux_files_come_first(model):
    directory = model[0]
    sel = _modelfiles.select(directory)
    names = [f.name for f in sel.files]
    assert sel.source == "model.safetensors.index.json"
    assert names == ["config.json", "model.safetensors.index.json", "tokenizer_config.json",
                     "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                     "model-00003-of-00003.safetensors"]
    assert sel.total_bytes == sum(os.path.getsize(os.path.join(directory, n)) for n in names)


def test_only_the_shards_the_index_lists(scratch):
    directory = os.path.join(scratch, "m")
    pc.write_checkpoint(directory, shards=2, shard_size=MIB)
    pc.write_file(os.path.join(directory, "stale-old-run.safetensors"), MIB)
    assert "stale-old-run.safetensors" not in [f.name for f in _modelfiles.select(directory).files]


def test_glob_fallbacks_safetensors_then_bin(scratch):
    directory = os.path.join(scratch, "m")
    pc.write_checkpoint(directory, shards=2, shard_size=MIB, index=False)
    pc.write_file(os.path.join(directory, "training_args.bin"), 1000)
    sel = _modelfiles.select(directory)
    assert sel.source == "*.safetensors"
    assert [f.name for f in sel.files if f.kind == "weight"] == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    bins = os.path.join(scratch, "b")
    os.makedirs(bins)
    pc.write_file(os.path.join(bins, "pytorch_model.bin"), MIB)
    assert [(f.name, f.kind) for f in _modelfiles.select(bins).files] == [("pytorch_model.bin", "weight")]


@pytest.mark.parametrize("case, reason", [
    ("missing", "bad_model_path"), ("relative", "bad_model_path"), ("file", "not_a_directory"),
    ("empty", "no_weights"), ("bad_json", "bad_index"), ("escaping_name", "bad_index"),
    ("missing_shard", "missing_file"),
])
def test_refusals_have_reason_codes(scratch, case, reason):
    path = os.path.join(scratch, "m")
    os.makedirs(path)
    if case == "missing":
        path = os.path.join(scratch, "nope")
    elif case == "relative":
        path = "models/m"
    elif case == "file":
        path = os.path.join(scratch, "f.safetensors")
        pc.write_file(path, 10)
    elif case in ("bad_json", "escaping_name", "missing_shard"):
        shard = {"bad_json": None, "escaping_name": "../outside.safetensors", "missing_shard": "gone.safetensors"}[case]
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as fh:
            fh.write("{not json" if shard is None else json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(SglangError) as err:
        _modelfiles.select(path)
    assert err.value.details["reason"] == reason, err.value.msg


def test_tree_root_rule():
    assert _modelfiles.tree_root("/models/llama") == "/models/llama"
    hf = "/data/hub/models--Qwen--Qwen3-8B/snapshots/abc123"
    assert _modelfiles.tree_root(hf) == "/data/hub/models--Qwen--Qwen3-8B"
    # a directory called snapshots outside an HF repo cache widens nothing
    assert _modelfiles.tree_root("/data/snapshots/llama") == "/data/snapshots/llama"


def test_symlink_escaping_the_tree_is_refused_and_nothing_read(model, scratch):
    directory = model[0]
    outside = os.path.join(scratch, "secret.bin")
    pc.write_file(outside, 2 * MIB)
    shard = os.path.join(directory, "model-00002-of-00003.safetensors")
    os.unlink(shard)
    os.symlink(outside, shard)
    pc.evict([outside])
    with pytest.raises(SglangError) as err:
        _prewarm.run(directory, opts(), fixed_memory(32 << 30))
    assert err.value.details["reason"] == "unsafe_symlink"
    assert [r["target"] for r in err.value.details["refused"]] == [os.path.realpath(outside)]
    assert pc.resident(outside) == 0


def test_hf_snapshot_links_into_blobs_are_followed_but_not_into_another_repo(scratch):
    repo = os.path.join(scratch, "hub", "models--org--m")
    other = os.path.join(scratch, "hub", "models--org--other", "blobs")
    blobs, snap = os.path.join(repo, "blobs"), os.path.join(repo, "snapshots", "rev1")
    for d in (blobs, snap, other):
        os.makedirs(d)
    for name, size in (("aaa", MIB), ("bbb", 1000)):
        pc.write_file(os.path.join(blobs, name), size)
    os.symlink("../../blobs/aaa", os.path.join(snap, "model.safetensors"))
    os.symlink("../../blobs/bbb", os.path.join(snap, "config.json"))
    sel = _modelfiles.select(snap)
    assert sel.tree == os.path.realpath(repo)
    assert sorted(f.path for f in sel.files) == sorted(os.path.realpath(os.path.join(blobs, n)) for n in ("aaa", "bbb"))
    pc.write_file(os.path.join(other, "ccc"), 1000)
    os.symlink("../../../models--org--other/blobs/ccc", os.path.join(snap, "tokenizer.json"))
    with pytest.raises(SglangError) as err:
        _modelfiles.select(snap)
    assert err.value.details["reason"] == "unsafe_symlink"


def test_symlinked_model_dir_is_followed(model, scratch):
    directory = model[0]
    link = os.path.join(scratch, "current")
    os.symlink(directory, link)
    sel = _modelfiles.select(link)
    assert sel.tree == os.path.realpath(directory) and len(sel.files) == 6


def test_a_swap_after_the_check_is_not_read(model, scratch):
    directory = model[0]
    sel = _modelfiles.select(directory)
    entry = sel.files[-1]
    outside = os.path.join(scratch, "elsewhere.bin")
    pc.write_file(outside, MIB)
    os.unlink(entry.path)
    os.symlink(outside, entry.path)  # the checked path is now a symlink
    with pytest.raises(SglangError) as err:
        _modelfiles.open_checked(entry, sel.tree)
    assert err.value.details["reason"] == "unsafe_symlink"
    pc.write_file(entry.path + ".new", MIB)
    os.rename(entry.path + ".new", entry.path)  # another file (inode) at the checked path
    with pytest.raises(SglangError) as err:
        _modelfiles.open_checked(entry, sel.tree)
    assert err.value.details["reason"] == "unsafe_symlink"


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_read(model, scratch):
    """O_NOFOLLOW guards only the last component; the descriptor's own path guards the rest."""
    directory = model[0]
    sel = _modelfiles.select(directory)
    entry = sel.files[-1]
    evil = os.path.join(scratch, "evil")
    os.makedirs(evil)
    pc.write_file(os.path.join(evil, entry.name), MIB)
    os.rename(directory, directory + ".old")
    os.symlink(evil, directory)
    with pytest.raises(SglangError) as err:
        _modelfiles.open_checked(entry, sel.tree)
    assert err.value.details["reason"] == "unsafe_symlink" and "evil" in err.value.msg


def test_a_weight_that_is_not_a_regular_file_is_refused(scratch):
    directory = os.path.join(scratch, "m")
    os.makedirs(directory)
    os.mkfifo(os.path.join(directory, "model.safetensors"))
    with pytest.raises(SglangError) as err:
        _modelfiles.select(directory)
    assert err.value.details["reason"] == "not_regular_file"


def test_an_index_that_is_a_fifo_is_refused_without_blocking(scratch):
    """A hostile model dir: the index is a FIFO. It used to block the module forever (even in
    check mode); now it is refused like any weight that is not a regular file."""
    directory = os.path.join(scratch, "m")
    os.makedirs(directory)
    os.mkfifo(os.path.join(directory, "model.safetensors.index.json"))
    with pytest.raises(SglangError) as err:
        _modelfiles.select(directory)
    assert err.value.details["reason"] == "not_regular_file"


def test_an_index_linking_outside_the_tree_is_not_read(scratch):
    """The index is a symlink to a root-only JSON file elsewhere: refused before any byte of it
    is read, so none of its values can reach the result."""
    secret = os.path.join(scratch, "secret.json")
    with open(secret, "w") as fh:
        json.dump({"weight_map": {"w": "ROOT-ONLY-SECRET-VALUE"}}, fh)
    os.chmod(secret, 0o600)
    directory = os.path.join(scratch, "m")
    os.makedirs(directory)
    os.symlink(secret, os.path.join(directory, "model.safetensors.index.json"))
    with pytest.raises(SglangError) as err:
        _modelfiles.select(directory)
    assert err.value.details["reason"] == "unsafe_symlink"
    assert "ROOT-ONLY-SECRET-VALUE" not in repr((err.value.msg, err.value.details))


# --- residency (mincore) --------------------------------------------------------------------

def test_mincore_counts_pages_of_the_file(scratch):
    path = os.path.join(scratch, "f.bin")
    size = 4 * MIB + 123  # a partial last page
    pc.write_file(path, size)
    assert pc.resident(path) == size  # just written
    pc.evict([path])
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: exactly the pages read
        os.pread(fd, 3 * _residency.PAGE_SIZE, MIB)
        assert _residency.resident_bytes(fd, size, MIB, 3 * _residency.PAGE_SIZE) == 3 * _residency.PAGE_SIZE
        assert _residency.resident_bytes(fd, size, 0, MIB) == 0
    finally:
        os.close(fd)


# --- options --------------------------------------------------------------------------------

def test_sizes_and_floor_parse():
    assert _prewarm.parse_size("16M", "x") == _prewarm.parse_size("16MiB", "x") == 16 * MIB
    assert _prewarm.parse_size(4096, "x") == 4096 and _prewarm.parse_size("1.5G", "x") == 3 << 29
    assert _prewarm.floor_bytes("10%", 1000) == 100 and _prewarm.floor_bytes("2K", 1000) == 2048
    for bad in ("lots", "-1M", True):
        with pytest.raises(SglangError):
            _prewarm.parse_size(bad, "x")
    with pytest.raises(SglangError):
        _prewarm.floor_bytes("150%", 1000)
    for kw in (dict(threads=0), dict(threads=65), dict(block_size=4096), dict(timeout=0),
               dict(resident_threshold=0)):
        with pytest.raises(SglangError) as err:
            opts(**kw).validate()
        assert err.value.details["reason"] == "invalid_argument"


# --- reading --------------------------------------------------------------------------------

def test_prewarm_makes_evicted_shards_resident_then_is_idempotent(model):
    directory, files = model
    pc.evict(files)
    out = _prewarm.run(directory, opts(), fixed_memory(32 << 30))
    result = _prewarm.report(out, opts(), detail=True)
    assert result["changed"] and result["complete"] and result["stopped"] is None
    assert result["resident_before"] <= aux_bytes(files) and result["read_bytes"] >= 3 * 8 * MIB
    assert pc.total_resident(files) == result["bytes"] == result["resident_after"]  # measured by the test too
    assert len(result["details"]) == 6 and all(d["resident_after_pct"] == 100.0 for d in result["details"])
    again = _prewarm.report(_prewarm.run(directory, opts(), fixed_memory(32 << 30)), opts())
    assert not again["changed"] and again["read_bytes"] == 0 and again["resident_before_pct"] == 100.0


def test_only_missing_blocks_are_read(model):
    directory, files = model
    pc.evict(files)
    shard = files[0]
    with open(shard, "rb") as fh:
        fh.read(4 * MIB)  # half of the first shard is resident already
    before = pc.resident(shard)
    result = _prewarm.report(_prewarm.run(directory, opts(threads=1), fixed_memory(32 << 30)), opts())
    assert result["resident_after_pct"] == 100.0
    assert result["read_bytes"] <= result["bytes"] - (before // MIB) * MIB


def test_memory_floor_stops_partway_and_says_how_much(model):
    directory, files = model
    pc.evict(files)
    available = 32 << 30
    o = opts(threads=1, min_available=available - 3 * MIB)  # room for three 1 MiB blocks
    out = _prewarm.run(directory, o, fixed_memory(available))
    result = _prewarm.report(out, o)
    assert result["stopped"] == "memory_floor" and not result["complete"] and not result["fits"]
    assert 0 < result["read_bytes"] < result["bytes"]
    assert 0 < result["warmed_bytes"] <= pc.total_resident(files) <= result["resident_after"]
    assert pc.total_resident(shards(files)) < 3 * 8 * MIB
    assert "memory floor" in result["msg"]


def test_memory_floor_above_available_reads_nothing_and_fails(model):
    directory, files = model
    pc.evict(files)
    o = opts(min_available=(8 << 30) + 1)
    with pytest.raises(SglangError) as err:
        _prewarm.report(_prewarm.run(directory, o, fixed_memory(8 << 30)), o)
    assert err.value.details["reason"] == "memory_floor"
    assert err.value.details["read_bytes"] == 0 and pc.total_resident(shards(files)) == 0


def test_available_dropping_while_reading_stops_it(model):
    """Another process takes memory mid-run: the live check stops the reads."""
    directory, files = model
    pc.evict(files)
    calls = []

    def shrinking():
        calls.append(1)
        return ((32 << 30) if len(calls) < 4 else (1 << 30)), 64 << 30

    o = opts(threads=1, min_available=2 << 30)
    result = _prewarm.report(_prewarm.run(directory, o, shrinking), o)
    assert result["stopped"] == "memory_floor" and 0 < result["read_bytes"] < result["bytes"]


def test_check_mode_reads_nothing(model):
    directory, files = model
    pc.evict(files)
    o = opts(check_mode=True)
    result = _prewarm.report(_prewarm.run(directory, o, fixed_memory(32 << 30)), o)
    assert result["changed"] and result["read_bytes"] == 0
    assert result["fits"] and pc.total_resident(shards(files)) == 0
    assert result["resident_after"] == result["resident_before"] <= aux_bytes(files)
    assert result["would_read_bytes"] >= 3 * 8 * MIB


def test_check_mode_says_when_it_does_not_fit(model):
    directory, files = model
    pc.evict(files)
    o = opts(check_mode=True, min_available=(32 << 30) - 5 * MIB)
    result = _prewarm.report(_prewarm.run(directory, o, fixed_memory(32 << 30)), o)
    assert not result["fits"] and result["would_read_bytes"] == 5 * MIB and pc.total_resident(shards(files)) == 0
    assert "only" in result["msg"]


def test_timeout_stops_early_without_failing(model):
    directory, files = model
    pc.evict(files)
    o = opts(timeout=1e-9)
    result = _prewarm.report(_prewarm.run(directory, o, fixed_memory(32 << 30)), o)
    assert result["stopped"] == "timeout" and not result["complete"]


def test_a_read_error_names_its_file_and_stops_the_others(model, monkeypatch):
    directory, files = model
    pc.evict(files)

    def broken(*_args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(_prewarm.os, "preadv", broken)
    with pytest.raises(OSError) as err:
        _prewarm.run(directory, opts(), fixed_memory(32 << 30))
    assert err.value.filename in [os.path.realpath(f) for f in files]
    failure = _exit.failure(err.value, "sglang_prewarm")
    assert failure["reason"] == "io_error" and err.value.filename in failure["msg"] and "Traceback" not in failure["msg"]


# --- documentation --------------------------------------------------------------------------

def test_ansible_doc_renders_and_documents_every_option():
    from ansible_collections.llmops.sglang.plugins.modules import sglang_prewarm
    proc = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-doc"), "--json", "llmops.sglang.sglang_prewarm"],
                          capture_output=True, text=True, env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS),
                          check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["llmops.sglang.sglang_prewarm"]["doc"]
    spec = sglang_prewarm.argument_spec()
    assert set(doc["options"]) == set(spec)
    for name, option in spec.items():
        assert doc["options"][name]["type"] == option["type"], name
        assert doc["options"][name].get("default") == option.get("default"), name
