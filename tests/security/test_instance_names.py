"""Instance names cannot collide with another instance's files or smuggle a newline.

`x.exit` named the record `x.exit.json`, which is the exit file of instance `x`; a `$`-anchored
`re.match` let `x\\n` through. Names are now `[A-Za-z0-9][A-Za-z0-9_-]{0,62}` (no dots), matched
whole, and a bad one is refused with reason `bad_name` before anything is touched.
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

# Every file an instance owns is <name> plus one of these: a name ending in one would be another's.
SUFFIXES = (".exit", ".tmp", ".lock", ".restart", ".json", ".log")


@pytest.mark.parametrize("name", ["x\n", "x\r"] + ["x" + s for s in SUFFIXES] + ["x" * 64, "-x", "_x", "x y", "ü"])
def test_colliding_or_malformed_names_are_refused(name):
    with pytest.raises(SglangError) as info:
        _record.validate_name(name)
    assert info.value.details.get("reason") == "bad_name"
    assert "\n" not in info.value.msg.replace("\\n", "")


@pytest.mark.parametrize("name", ["x", "serving", "A-b_9", "x" * 63, "0"])
def test_valid_names(name):
    assert _record.validate_name(name) == name


def test_no_valid_name_can_reach_another_instances_files():
    """The record of a valid name is never the exit file, TMPDIR or lock of another valid name."""
    for suffix in SUFFIXES:
        with pytest.raises(SglangError):
            _record.validate_name("x" + suffix)
    assert _record.record_path("/s", "x") == "/s/x.json"


# The module refuses such a name before anything is touched (no state dir):
# tests/unit/modules/test_sglang_launch.yaml, case name_with_a_trailing_newline (in-process).
