"""The preflight measures /dev/shm against a floor and refuses before anything is stopped, naming
the largest entries and their owners (in-process: a directory of the test stands in for
/dev/shm, its free space is given)."""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight

MIB = 1 << 20


@pytest.fixture
def shm(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    with open(str(d / "psm_leftover"), "wb") as fh:
        fh.write(b"\1" * (3 * MIB))
    (d / "dumps").mkdir()
    for i in range(4):
        with open(str(d / "dumps" / ("hs_%d.pt" % i)), "wb") as fh:
            fh.write(b"\1" * MIB)
    with open(str(d / "small"), "wb") as fh:
        fh.write(b"\1" * 4096)
    if os.geteuid() == 0:  # another user's leftover, as on a shared host
        os.chown(str(d / "psm_leftover"), 65534, 65534)
    return str(d)


def _free(mib: float):
    return lambda _path: (mib, 1000)


@pytest.mark.parametrize("tp,floor", [(1, 144.0), (2, 160.0), (8, 256.0)])
def test_the_default_floor_grows_with_tp(tp, floor):
    assert _preflight.shm_floor(tp, None) == floor
    assert _preflight.shm_floor(tp, 10) == 10.0


def test_enough_room_passes(shm, monkeypatch):
    monkeypatch.setattr(_preflight, "_free", _free(300.0))
    report = _preflight.Report()
    _preflight.check_shm(report, 8, None, [], shm_dir=shm)
    assert not report.errors and report.checks[-1]["status"] == "ok", report.checks


def test_a_full_shm_refuses_naming_the_largest_entries_and_owners(shm, monkeypatch):
    monkeypatch.setattr(_preflight, "_free", _free(0.5))
    report = _preflight.Report()
    _preflight.check_shm(report, 8, None, [], shm_dir=shm)
    assert len(report.errors) == 1 and report.reason() == "no_space"
    msg = report.errors[0]
    assert msg.startswith("%s: 0.5 MiB free, below the 256.0 MiB a server of tp_size 8 needs "
                          "(shm_min_free_mb, default 128 + 16 per rank)" % shm), msg
    # biggest first, a directory with what is below it, owners named, no content read
    assert "Largest: %s/dumps/ (4.0 MiB, user " % shm in msg, msg
    if os.geteuid() == 0:
        assert "; %s/psm_leftover (3.0 MiB, user nobody, held by no process)" % shm in msg, msg
    assert msg.index("/dumps/") < msg.index("/psm_leftover") < msg.index("/small")
    assert "nothing was stopped" in msg and "lower shm_min_free_mb" in msg


def test_a_reclaimable_dump_dir_counts_as_free(shm, monkeypatch):
    monkeypatch.setattr(_preflight, "_free", _free(253.0))
    report = _preflight.Report()
    _preflight.check_shm(report, 8, None, [os.path.join(shm, "dumps")], shm_dir=shm)
    assert not report.errors and "more once the teardown empties" in report.checks[-1]["msg"]
    short = _preflight.Report()
    _preflight.check_shm(short, 8, None, [], shm_dir=shm)
    assert short.errors and "/dumps/" in short.errors[0]


def test_a_held_file_names_its_holder(shm, monkeypatch):
    monkeypatch.setattr(_preflight, "_free", _free(0.0))
    with open(os.path.join(shm, "psm_leftover"), "rb"):
        report = _preflight.Report()
        _preflight.check_shm(report, 1, None, [], shm_dir=shm)
    assert "psm_leftover (3.0 MiB, user " in report.errors[0]
    assert "held open by pid %d" % os.getpid() in report.errors[0], report.errors[0]


def test_zero_turns_it_off(shm, monkeypatch):
    monkeypatch.setattr(_preflight, "_free", _free(0.0))
    report = _preflight.Report()
    _preflight.check_shm(report, 8, 0, [], shm_dir=shm)
    assert not report.errors and report.checks[-1]["status"] == "note"
