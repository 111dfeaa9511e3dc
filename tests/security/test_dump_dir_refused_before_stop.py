"""The extraction restart refuses a dump directory it would not purge, before anything is
stopped: a symlink, a directory another user owns, or one that is group/other-writable. The
rule is the teardown module's own (_purge), applied by the plan's preflight (the launch's
output_dirs), not a second copy in YAML."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from helpers import play_runs
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http


def _record(hv: dict) -> dict:
    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        return json.load(fh)


@pytest.fixture
def extraction(tmp_path):
    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    run = play_runs.play(inv, "restart_extraction.yml")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    yield inv, hv
    dump = hv["sglang_extraction_dump_dir"]
    if os.path.islink(dump):
        os.unlink(dump)
    down = play_runs.teardown(inv)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def _make_symlink(dump: str, tmp_path, _user) -> str:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (target / "precious").write_text("keep me")
    shutil.rmtree(dump)
    os.symlink(str(target), dump)
    return str(target / "precious")


def _make_foreign(dump: str, _tmp_path, user) -> str:
    os.chown(dump, user.uid, user.gid)
    return ""


def _make_writable(dump: str, _tmp_path, _user) -> str:
    os.chmod(dump, 0o777)
    return ""


@pytest.mark.parametrize("make", [_make_symlink, _make_foreign, _make_writable], ids=["symlink", "foreign_owner",
                                                                                      "group_other_writable"])
def test_unsafe_dump_dir_is_refused_before_anything_is_stopped(extraction, tmp_path, throwaway_user, make):
    inv, hv = extraction
    before = _record(hv)
    dump = hv["sglang_extraction_dump_dir"]
    keep = make(dump, tmp_path, throwaway_user)
    run = play_runs.play(inv, "restart_extraction.yml", "-e", "sglang_force=true")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    # the purge rule, refused by the plan's preflight (the dump directory is an output_dir)
    assert "output directory %s cannot be used: " % dump in out, out[-3000:]
    assert "symlink" in out or "belongs to another user" in out or "writable by other users" in out, out[-3000:]
    assert "nothing was stopped" in out.lower()
    assert _record(hv)["pid"] == before["pid"], "the old server was replaced"
    assert _http.request("127.0.0.1", hv["sglang_port"], "/health", timeout=5).status == 200
    if keep:
        with open(keep) as fh:
            assert fh.read() == "keep me"
