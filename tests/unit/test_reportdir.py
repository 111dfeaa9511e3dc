"""_reportdir: the report directory walked with O_NOFOLLOW, created with its mode, judged like
the state dir; files written through a fresh temporary file and a rename."""
from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _reportdir


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def test_creates_missing_directories_with_their_mode_and_writes_files(tmp_path):
    target = tmp_path / "a" / "b"
    old = os.umask(0o077)
    try:
        opened = _reportdir.open_dir(str(target))
    finally:
        os.umask(old)
    try:
        assert opened.created == [str(tmp_path / "a"), str(target)]
        assert _mode(tmp_path / "a") == 0o755 and _mode(target) == 0o755
        assert _reportdir.write_file(opened, "r.html", b"<p>1</p>") is True
        assert _reportdir.write_file(opened, "r.html", b"<p>1</p>") is False  # the same: left alone
        assert _reportdir.write_file(opened, "r.html", b"<p>2</p>") is True
    finally:
        opened.close()
    assert (target / "r.html").read_bytes() == b"<p>2</p>" and _mode(target / "r.html") == 0o644
    assert os.listdir(str(target)) == ["r.html"]  # no temporary file left


def test_a_link_at_the_dir_or_on_the_way_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(str(real), str(tmp_path / "link"))
    for path in (tmp_path / "link", tmp_path / "link" / "below"):
        with pytest.raises(SglangError) as err:
            _reportdir.open_dir(str(path))
        assert err.value.details["reason"] == "unsafe_dir" and "symbolic link" in err.value.msg
    assert os.listdir(str(real)) == []


def test_a_link_at_a_file_name_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    report = tmp_path / "report"
    report.mkdir()
    os.symlink(str(victim), str(report / "r.md"))
    opened = _reportdir.open_dir(str(report))
    try:
        assert _reportdir.write_file(opened, "r.md", b"# report\n")
    finally:
        opened.close()
    assert victim.read_text() == "keep"
    assert not os.path.islink(str(report / "r.md")) and (report / "r.md").read_bytes() == b"# report\n"


def test_group_writable_or_foreign_directories_are_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o775)
    with pytest.raises(SglangError) as err:
        _reportdir.open_dir(str(shared))
    assert err.value.details["reason"] == "unsafe_dir" and "writable by group or others" in err.value.msg
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(str(sticky), 0o1777)
    if os.geteuid() == 0:  # a root-owned sticky directory is fine above the report dir, not as it
        _reportdir.open_dir(str(sticky / "reports")).close()
        os.chown(str(sticky / "reports"), 4321, 4321)
        with pytest.raises(SglangError) as err:
            _reportdir.open_dir(str(sticky / "reports"))
        assert "owned by user 4321" in err.value.msg
    with pytest.raises(SglangError):
        _reportdir.open_dir(str(sticky))


@pytest.mark.parametrize("name", ["", "a/b", "..", ".hidden"])
def test_file_names_are_plain(tmp_path, name):
    opened = _reportdir.open_dir(str(tmp_path))
    try:
        with pytest.raises(SglangError) as err:
            _reportdir.write_file(opened, name, b"x")
        assert err.value.details["reason"] == "invalid_argument"
    finally:
        opened.close()
