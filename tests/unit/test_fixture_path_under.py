"""The test harness kills, at the end of a session, what it launched under its own temp root:
`/tmp/pytest-of-root/pytest-8` is not a part of `/tmp/pytest-of-root/pytest-81` (another session,
perhaps running beside it, whose servers a plain string prefix killed)."""
from __future__ import annotations

from helpers.fixtures import path_under


def test_a_sibling_with_a_longer_name_is_not_under_the_prefix():
    assert not path_under("/tmp/pytest-of-root/pytest-81/t/state", "/tmp/pytest-of-root/pytest-8")
    assert not path_under("/tmp/pytest-of-root/pytest-8x", "/tmp/pytest-of-root/pytest-8/")


def test_the_prefix_itself_and_what_is_inside_it_are():
    assert path_under("/tmp/pytest-of-root/pytest-8", "/tmp/pytest-of-root/pytest-8")
    assert path_under("/tmp/pytest-of-root/pytest-8/popen-gw0/x.log", "/tmp/pytest-of-root/pytest-8")
    assert path_under("/tmp/pytest-of-root/pytest-8/a", "/tmp/pytest-of-root/pytest-8/")
    assert path_under("/anything", "/")
