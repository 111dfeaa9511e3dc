"""shm cleanup deleted other users' files with all_users=false: only files owned by the module's
user are removed unless all_users is set."""
from __future__ import annotations

import os
import uuid

from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope


def _run(shm: str, all_users: bool, tmp_path) -> dict:
    scope = build_scope("sec-%s" % uuid.uuid4().hex[:6], str(tmp_path / "state"), [], [], [], False, all_users,
                        [], "fail", [])
    opts = _teardown.Options(grace_period=1, timeout=1, shm_dir=shm, gpu_backend="none")
    return _teardown.execute(_teardown.make_plan(scope, opts), opts)


def test_shm_cleanup_keeps_other_users_files(throwaway_user, sticky_shm, tmp_path):
    theirs = [os.path.join(sticky_shm, n) for n in ("sgl_shm_user_1_abc", "nccl-user", "psm_user")]
    throwaway_user.run(["touch", theirs[0], theirs[1]])
    throwaway_user.run(["mkdir", theirs[2]])
    throwaway_user.run(["touch", os.path.join(theirs[2], "seg")])
    mine = os.path.join(sticky_shm, "sgl_shm_root_1_def")
    open(mine, "w").close()
    result = _run(sticky_shm, False, tmp_path)
    assert not result.get("failed"), result.get("msg")
    assert all(os.path.exists(p) for p in theirs), sorted(os.listdir(sticky_shm))
    assert not os.path.exists(mine)
    assert [os.path.basename(f["path"]) for f in result["shm_removed"]] == ["sgl_shm_root_1_def"]
    # all_users: the operator asked for everyone's leftovers
    result = _run(sticky_shm, True, tmp_path)
    assert not result.get("failed"), result.get("msg")
    assert os.listdir(sticky_shm) == []
