"""Instance names cannot collide with another instance's files or smuggle a newline.

`x.exit` named the record `x.exit.json`, which is the exit file of instance `x`; a `$`-anchored
`re.match` let `x\\n` through. Names are now `[A-Za-z0-9][A-Za-z0-9_-]{0,62}` (no dots), matched
whole, and a bad one is refused with reason `bad_name` before anything is touched.
"""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from helpers.fixtures import free_port, run_module

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


def test_module_refuses_a_trailing_newline(tmp_path):
    state = str(tmp_path / "state")
    result = run_module("sglang_launch", {"name": "sec\n", "python": "/usr/bin/python3", "model_path": "org/m",
                                          "port": free_port(), "state_dir": state, "gpu_backend": "none"},
                        check_mode=True)
    assert result["_rc"] != 0 and result["reason"] == "bad_name", result
    assert not os.path.exists(state)
