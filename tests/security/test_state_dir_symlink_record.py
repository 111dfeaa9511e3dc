"""A state dir whose last component is another user's symlink, and a launch record root did not write.

In a group-writable sticky parent, another user can own the symlink `state` and point it
anywhere, at any moment: after the directory was checked (it pointed at root's own dir) they
swap it to a directory of theirs holding a forged record, and root reads the record from there.
A forged record named a root process in another PID namespace and root SIGKILLed it. Now such a
symlink is refused (`unsafe_dir`), and a record is read through O_NOFOLLOW and refused
(`unsafe_record`) unless root or the module's user owns it and nobody else can write it.
"""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

NAME = "victim"


def _root_state(shared_tmp: str) -> str:
    path = os.path.join(shared_tmp, "root-state")
    os.mkdir(path, 0o700)
    _record.write_record(path, NAME, {"name": NAME, "pid": 1, "start_time": 0.0})
    return path


def _attacker_symlink(user, sticky_shm: str, target: str) -> str:
    link = os.path.join(sticky_shm, "state")
    user.run(["ln", "-s", target, link])
    assert os.lstat(link).st_uid == user.uid
    return link


def test_a_state_dir_that_is_another_users_symlink_is_refused(throwaway_user, shared_tmp, sticky_shm):
    link = _attacker_symlink(throwaway_user, sticky_shm, _root_state(shared_tmp))
    for call in (_record.check_dir, _record.ensure_dir):
        with pytest.raises(SglangError) as info:
            call(link, label="state_dir")
        assert info.value.details["reason"] == "unsafe_dir" and "symlink" in info.value.msg


def test_a_symlink_of_root_is_still_accepted(shared_tmp, sticky_shm):
    real = _root_state(shared_tmp)
    link = os.path.join(sticky_shm, "state")
    os.symlink(real, link)
    _record.check_dir(link, label="state_dir")
    _record.ensure_dir(link, label="state_dir")
    assert _record.read_record(link, NAME)["name"] == NAME


def test_a_record_written_by_another_user_is_refused(throwaway_user, shared_tmp):
    forged = os.path.join(shared_tmp, "forged")
    os.mkdir(forged, 0o755)
    os.chown(forged, throwaway_user.uid, throwaway_user.gid)
    record = os.path.join(forged, "%s.json" % NAME)
    throwaway_user.run(["sh", "-c", "umask 077; printf '%%s' '%s' > %s"
                        % (json.dumps({"name": NAME, "pid": 1, "start_time": 0.0}), record)])
    assert os.stat(record).st_uid == throwaway_user.uid
    with pytest.raises(SglangError) as info:
        _record.read_record(forged, NAME)
    assert info.value.details["reason"] == "unsafe_record"


def test_a_record_others_can_write_or_a_symlinked_record_is_refused(shared_tmp):
    state = _root_state(shared_tmp)
    path = _record.record_path(state, NAME)
    os.chmod(path, 0o622)
    with pytest.raises(SglangError) as info:
        _record.read_record(state, NAME)
    assert info.value.details["reason"] == "unsafe_record"
    os.chmod(path, 0o600)
    other = os.path.join(shared_tmp, "elsewhere")
    os.mkdir(other, 0o700)
    os.rename(path, os.path.join(other, "%s.json" % NAME))
    os.symlink(os.path.join(other, "%s.json" % NAME), path)
    with pytest.raises(SglangError) as info:
        _record.read_record(state, NAME)
    assert info.value.details["reason"] == "unsafe_record"
