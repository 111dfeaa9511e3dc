"""The proof of work's own dump removed from the data again - only the one file that appeared
since the request, through directory descriptors, a regular file of the server's user."""
from __future__ import annotations

import os

from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _workproof as wp


def _proof(root, before, path):
    check = wp.WorkCheck(kind="generate", dump_dir=str(root), server_uid=os.geteuid())
    return wp._remove_own(check, before, wp.WorkResult(True, "generate", "POST /generate -> 200", 200, str(path)))


def _file(path, text="x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_one_new_file_is_removed_through_descriptors(tmp_path):
    old = _file(tmp_path / "a" / "old.pt")
    before = wp.list_dumps(str(tmp_path))
    new = _file(tmp_path / "a" / "new.pt")
    result = _proof(tmp_path, before, new)
    assert result.removed is True and not new.exists() and old.exists()
    assert "removed again" in result.msg


def test_nothing_is_removed_when_other_dumps_appeared_too(tmp_path):
    before = wp.list_dumps(str(tmp_path))
    mine, theirs = _file(tmp_path / "mine.pt"), _file(tmp_path / "theirs.pt")
    result = _proof(tmp_path, before, mine)
    assert result.removed is False and mine.exists() and theirs.exists()
    assert "2 files appeared" in result.kept_why


def test_a_file_that_existed_before_is_never_removed(tmp_path):
    old = _file(tmp_path / "grows.pt")
    before = wp.list_dumps(str(tmp_path))
    old.write_text("appended")
    result = _proof(tmp_path, before, old)
    assert result.removed is False and old.exists() and "existed before" in result.kept_why


def test_another_owner_or_a_symlinked_directory_keeps_the_file(tmp_path):
    before = wp.list_dumps(str(tmp_path))
    new = _file(tmp_path / "new.pt")
    check = wp.WorkCheck(kind="generate", dump_dir=str(tmp_path), server_uid=os.geteuid() + 1)
    result = wp._remove_own(check, before, wp.WorkResult(True, "generate", "ok", 200, str(new)))
    assert result.removed is False and new.exists() and "not to the server's user" in result.kept_why
    # a directory on the way swapped for a symlink leads nowhere
    real = tmp_path / "real"
    _file(real / "x.pt")
    link_root = tmp_path / "root"
    link_root.mkdir()
    before = wp.list_dumps(str(link_root))
    os.symlink(str(real), str(link_root / "sub"))
    assert wp._unlink_checked(str(link_root), str(link_root / "sub" / "x.pt"), os.stat(real / "x.pt").st_ino,
                              os.geteuid()) is not None
    assert (real / "x.pt").exists()
