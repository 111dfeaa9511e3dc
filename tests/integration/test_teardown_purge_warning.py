"""A dump directory about to be emptied is an Ansible warning (shown without -v), with the
number of files: in a real teardown and in check mode ("would empty")."""
from __future__ import annotations

import os

from helpers.fixtures import run_module, unique_name
from helpers.warnings import warnings_of

PURGEWARN = unique_name("purgewarn")  # its own instance name: cgroups and teardowns go by name


def _args(tmp_path, dump: str) -> dict:
    return {"name": PURGEWARN, "state_dir": str(tmp_path / "state"), "gpus": [], "gpu_backend": "none",
            "sglang_processes": False, "shm_cleanup": False, "purge_paths": [dump]}


def _dump(tmp_path, files: int) -> str:
    dump = tmp_path / "hs"
    dump.mkdir(mode=0o700)
    for i in range(files):
        (dump / ("hs_%d.pt" % i)).write_bytes(b"x" * 10)
    return str(dump)


def test_check_mode_warns_it_would_empty_the_dump_dir(tmp_path):
    dump = _dump(tmp_path, 3)
    res = run_module("sglang_teardown", _args(tmp_path, dump), check_mode=True)
    assert not res.get("failed"), res.get("msg")
    hits = [w for w in warnings_of(res) if dump in w]
    assert len(hits) == 1 and "would empty" in hits[0] and "3 files" in hits[0], warnings_of(res)
    assert sorted(os.listdir(dump)) == ["hs_0.pt", "hs_1.pt", "hs_2.pt"]


def test_real_run_warns_with_the_number_of_files_emptied(tmp_path):
    dump = _dump(tmp_path, 2)
    res = run_module("sglang_teardown", _args(tmp_path, dump))
    assert not res.get("failed"), res.get("msg")
    hits = [w for w in warnings_of(res) if dump in w]
    assert len(hits) == 1 and "would" not in hits[0] and "2 files" in hits[0], warnings_of(res)
    assert os.listdir(dump) == []


def test_no_warning_for_an_empty_or_missing_dump_dir(tmp_path):
    dump = _dump(tmp_path, 0)
    for args in (_args(tmp_path, dump), _args(tmp_path, str(tmp_path / "missing"))):
        for check in (True, False):
            res = run_module("sglang_teardown", args, check_mode=check)
            assert not res.get("failed"), res.get("msg")
            assert not [w for w in warnings_of(res) if "empty" in w], warnings_of(res)
