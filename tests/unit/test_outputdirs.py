"""Output directories of a launch (the dump directory): checked in the preflight, created at the
launch, never through a symlink or in a directory another user may write."""
from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _outputdirs
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


def _check(dirs, state_dir="/nonexistent-state"):
    report = _preflight.Report()
    _outputdirs.check(report, _outputdirs.parse(dirs), state_dir)
    return report


def test_parse_refuses_relative_paths_bad_and_open_modes():
    with pytest.raises(SglangError, match="must be absolute"):
        _outputdirs.parse([{"path": "hs"}])
    with pytest.raises(SglangError, match="not an octal mode"):
        _outputdirs.parse([{"path": "/x", "mode": "rwx"}])
    with pytest.raises(SglangError, match="other users write") as exc:
        _outputdirs.parse([{"path": "/x", "mode": "0777"}])
    assert exc.value.details["reason"] == "invalid_argument"


def test_a_missing_directory_with_room_passes(tmp_path):
    report = _check([{"path": str(tmp_path / "hs" / "deep"), "min_free_mb": 1}])
    assert not report.errors and any("output directory" in c["msg"] for c in report.to_dict()["checks"])


def test_not_enough_room_is_no_space(tmp_path):
    report = _check([{"path": str(tmp_path / "hs"), "min_free_mb": 1e12}])
    assert report.reason() == "no_space" and "below its min_free_mb" in report.errors[0]


def test_a_reclaimable_directory_counts_its_files_as_free(tmp_path):
    hs = tmp_path / "hs"
    hs.mkdir(mode=0o755)
    (hs / "old.pt").write_bytes(b"x" * (3 * 1048576))
    st = os.statvfs(str(tmp_path))
    free_mb = st.f_bavail * st.f_frsize / 1048576.0
    need = free_mb + 2  # only reachable with the 3 MiB the teardown removes first
    assert _check([{"path": str(hs), "min_free_mb": need}]).reason() == "no_space"
    report = _check([{"path": str(hs), "min_free_mb": need, "reclaimable": True}])
    assert not report.errors, report.errors
    assert any("the teardown removes first" in c["msg"] for c in report.to_dict()["checks"])


def test_a_symlink_or_an_open_directory_is_refused(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    report = _check([{"path": str(tmp_path / "link")}])
    assert report.reason() == "unsafe_dir" and "symlink" in report.errors[0]
    opened = tmp_path / "open"
    opened.mkdir()
    os.chmod(str(opened), 0o777)
    report = _check([{"path": str(opened)}])
    assert report.reason() == "unsafe_dir" and "writable by other users" in report.errors[0]


def test_a_reclaimable_directory_must_be_purgeable():
    report = _check([{"path": "/dev/shm", "reclaimable": True}])
    assert report.reason() == "unsafe_dir" and "shared root" in report.errors[0]


def test_create_makes_missing_directories_with_their_mode(tmp_path):
    path = tmp_path / "a" / "hs"
    made = _outputdirs.create(_outputdirs.parse([{"path": str(path), "mode": "0750"}]))
    assert made == [str(path)] and stat.S_IMODE(os.stat(str(path)).st_mode) == 0o750
    assert _outputdirs.create(_outputdirs.parse([{"path": str(path)}])) == []  # already there: checked, kept


def test_create_refuses_a_symlink_planted_after_the_preflight(tmp_path):
    path = tmp_path / "hs"
    dirs = _outputdirs.parse([{"path": str(path)}])
    assert not _check([{"path": str(path)}]).errors
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.symlink_to(elsewhere)  # another user's race between the plan and the launch
    with pytest.raises(SglangError) as exc:
        _outputdirs.create(dirs)
    assert exc.value.details["reason"] == "unsafe_dir" and "symlink" in exc.value.msg
