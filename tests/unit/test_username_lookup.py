"""A uid is named as the user database names it at the moment of asking: a name remembered from
an earlier lookup would name a deleted user whose uid now belongs to another (a long-lived
process, such as a test session that creates and removes users, asks again)."""
from __future__ import annotations

import pwd

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs


def test_a_reused_uid_is_named_after_its_current_user(monkeypatch):
    names = iter(["alice", "bob"])

    def getpwuid(uid: int):
        return pwd.struct_passwd((next(names), "x", uid, uid, "", "/", "/bin/sh"))
    monkeypatch.setattr(_procs.pwd, "getpwuid", getpwuid)
    assert _procs.username(4242) == "alice"
    assert _procs.username(4242) == "bob"


def test_an_unknown_uid_is_its_number(monkeypatch):
    def getpwuid(uid: int):
        raise KeyError(uid)
    monkeypatch.setattr(_procs.pwd, "getpwuid", getpwuid)
    assert _procs.username(4343) == "4343" and _procs.username(-1) == "?"
