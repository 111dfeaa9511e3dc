"""purge_paths follows a swapped symlink: an unprivileged user who owns the dump directory swaps
it for a symlink to a root-only directory between root's listing and its deletes.

The library is driven in-process (plan, swap, execute) so the swap lands exactly between the
listing and the deletes, every time."""
from __future__ import annotations

import os
import uuid
from typing import Callable, List

import pytest

from helpers.fixtures import run_module
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope


def _scope(state_dir: str):
    # a named scope with no record and no title sweep: nothing to signal, only files to clean
    return build_scope("sec-%s" % uuid.uuid4().hex[:6], state_dir, [], [], [], False, False, [], "fail", [])


def _opts(dump: str) -> _teardown.Options:
    return _teardown.Options(grace_period=1, timeout=1, shm_cleanup=False, purge_paths=[dump], gpu_backend="none")


def _victim(base: str) -> str:
    """A root-only directory with a file in it: what the attacker wants emptied."""
    victim = os.path.join(base, "root-only")
    os.mkdir(victim, 0o700)
    with open(os.path.join(victim, "precious"), "w") as fh:
        fh.write("keep me\n")
    return victim


def _swap_at_first_delete(monkeypatch, swap: Callable[[], None]) -> List[bool]:
    """Run `swap` right before root's first unlink: the moment between its listing and its
    deletes, deterministically."""
    done: List[bool] = []
    real_unlink = os.unlink

    def unlink(path, *args, **kw):
        if not done:
            done.append(True)
            swap()
        return real_unlink(path, *args, **kw)
    monkeypatch.setattr(os, "unlink", unlink)
    return done


def test_dump_dir_of_another_user_swapped_for_a_symlink(throwaway_user, sticky_shm, tmp_path, monkeypatch):
    dump = os.path.join(sticky_shm, "sglang_hs")     # like /dev/shm: anyone may create a dir in it
    throwaway_user.run(["mkdir", dump])              # pre-created by the attacker after a reboot
    throwaway_user.run(["touch", os.path.join(dump, "precious")])   # named like the file it wants gone
    victim = _victim(str(tmp_path))
    opts = _opts(dump)
    _teardown.validate_options(opts, str(tmp_path / "state"))

    def swap() -> None:
        throwaway_user.run(["mv", dump, dump + ".moved"])
        throwaway_user.run(["ln", "-s", victim, dump])
    _swap_at_first_delete(monkeypatch, swap)
    refused = None
    try:
        plan = _teardown.make_plan(_scope(str(tmp_path / "state")), opts)
        _teardown.execute(plan, opts)
    except SglangError as exc:
        refused = exc
    monkeypatch.undo()
    assert os.path.exists(os.path.join(victim, "precious")), "root deleted a file through the swapped symlink"
    # a dump dir another user owns is refused when planning, with its own reason
    assert refused is not None and refused.details["reason"] == "unsafe_purge_path", refused
    assert throwaway_user.name in refused.msg


def test_check_mode_refuses_a_dump_dir_another_user_owns(throwaway_user, sticky_shm, tmp_path):
    """The restart role runs the teardown in check mode first: it must refuse too, before
    anything is stopped."""
    dump = os.path.join(sticky_shm, "sglang_hs")
    throwaway_user.run(["mkdir", dump])
    throwaway_user.run(["touch", os.path.join(dump, "old.pt")])
    args = {"name": "sec-%s" % uuid.uuid4().hex[:6], "state_dir": str(tmp_path / "state"), "gpus": [],
            "gpu_backend": "none", "sglang_processes": False, "shm_cleanup": False, "purge_paths": [dump]}
    res = run_module("sglang_teardown", args, check_mode=True)
    assert res.get("failed") and res["reason"] == "unsafe_purge_path", res
    assert os.path.exists(os.path.join(dump, "old.pt"))


def test_world_writable_dump_dir_is_refused(shared_tmp, tmp_path):
    """Owned by root but writable by anyone: another user can plant a symlink or swap entries."""
    dump = os.path.join(shared_tmp, "dumps")
    os.mkdir(dump)
    os.chmod(dump, 0o777)
    with open(os.path.join(dump, "a.pt"), "w"):
        pass
    with pytest.raises(SglangError) as err:
        _teardown.make_plan(_scope(str(tmp_path / "state")), _opts(dump))
    assert err.value.details["reason"] == "unsafe_purge_path"
    assert os.path.exists(os.path.join(dump, "a.pt"))


def test_deletes_go_to_the_directory_that_was_checked(shared_tmp, tmp_path, monkeypatch):
    """Even a dump dir that passes the checks is emptied through the descriptor opened when it
    was checked: a path swapped afterwards (here by root itself) leads nowhere."""
    dump = os.path.join(shared_tmp, "dumps")
    os.mkdir(dump, 0o755)
    os.mkdir(os.path.join(dump, "sub"))
    for rel in ("precious", os.path.join("sub", "b.pt")):
        with open(os.path.join(dump, rel), "w"):
            pass
    victim = _victim(str(tmp_path))
    opts = _opts(dump)

    def swap() -> None:
        os.rename(dump, dump + ".moved")
        os.symlink(victim, dump)
    swapped = _swap_at_first_delete(monkeypatch, swap)
    plan = _teardown.make_plan(_scope(str(tmp_path / "state")), opts)
    result = _teardown.execute(plan, opts)
    monkeypatch.undo()
    assert swapped
    assert os.path.exists(os.path.join(victim, "precious"))
    assert os.listdir(dump + ".moved") == []         # the checked directory was emptied
    assert {os.path.basename(f["path"]) for f in result["shm_removed"]} == {"precious", "sub"}


@pytest.mark.parametrize("path", ["/var/lib", "/var/lib/", "/var/log/journal", "/usr/share", "/etc/ssl",
                                  "/home/someone", "/dev", "/", "/var/../var/lib"])
def test_deny_list_is_by_resolved_path_and_prefix(path, tmp_path):
    with pytest.raises(SglangError) as err:
        _teardown.validate_options(_opts(path), str(tmp_path / "state"))
    assert err.value.details["reason"] == "bad_purge_path"


def test_deny_list_sees_through_symlinks(tmp_path):
    link = tmp_path / "innocent"
    os.symlink("/var/lib", str(link))
    with pytest.raises(SglangError) as err:
        _teardown.validate_options(_opts(str(link)), str(tmp_path / "state"))
    assert err.value.details["reason"] == "bad_purge_path" and "/var/lib" in err.value.msg
    state = tmp_path / "state"
    for bad in (str(state), str(state / "x.tmp"), str(tmp_path)):   # the state dir, inside it, above it
        with pytest.raises(SglangError) as err:
            _teardown.validate_options(_opts(bad), str(state))
        assert err.value.details["reason"] == "bad_purge_path"


@pytest.mark.parametrize("check_mode", [True, False])
def test_dump_dir_planted_as_a_symlink_is_refused(throwaway_user, sticky_shm, shared_tmp, tmp_path, check_mode):
    """Another user plants the dump dir itself as a symlink to a root-only directory before the
    run: resolving it would have root empty the target. Refused, the target untouched."""
    victim = _victim(shared_tmp)
    dump = os.path.join(sticky_shm, "sglang_hs")
    throwaway_user.run(["ln", "-s", victim, dump])
    args = {"name": "sec-%s" % uuid.uuid4().hex[:6], "state_dir": str(tmp_path / "state"), "gpus": [],
            "gpu_backend": "none", "sglang_processes": False, "shm_cleanup": False, "purge_paths": [dump]}
    res = run_module("sglang_teardown", args, check_mode=check_mode)
    assert res.get("failed") and res["reason"] == "unsafe_purge_path", res
    assert os.path.exists(os.path.join(victim, "precious"))
