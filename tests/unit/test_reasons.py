"""Every failure reason the code sets is in the registry (_core/_errors.REASONS): a new code is
a choice made there, with its meaning, not a typo in a raise."""
from __future__ import annotations

import os
import re

from ansible_collections.llmops.sglang.plugins.module_utils._core import _errors, _exit
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# reason="x" (SglangError, dict(...)) and "reason": "x" (result literals)
LITERAL = re.compile(r"""\breason\s*=\s*["']([a-z_]+)["']|["']reason["']\s*:\s*["']([a-z_]+)["']""")
# launch decisions returned in `reason` on success, not failures
DECISIONS = {"new", "not_running", "unchanged", "released", "not_held", "taken", "taken_over", "held"}


def _set_in_code():
    found = {}
    for top, _dirs, files in os.walk(os.path.join(ROOT, "plugins")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(top, name)
                with open(path, encoding="utf-8") as fh:
                    for match in LITERAL.finditer(fh.read()):
                        found.setdefault(match.group(1) or match.group(2), os.path.relpath(path, ROOT))
    return found


def test_every_reason_set_in_the_code_is_registered():
    unknown = {code: where for code, where in _set_in_code().items()
               if code not in _errors.REASONS and code not in DECISIONS}
    assert not unknown, "reasons not in _core/_errors.REASONS: %s" % unknown


def test_the_derived_reasons_are_registered():
    derived = set(_exit._OS_REASONS.values()) | {"io_error"} | set(_preflight._REASONS.values()) | {"preflight_failed"}
    assert derived <= set(_errors.REASONS), derived - set(_errors.REASONS)


def test_every_reason_has_a_meaning_and_bad_input_one_name():
    assert all(re.fullmatch(r"[a-z][a-z_]*", c) and text.strip() for c, text in _errors.REASONS.items())
    assert _errors.BAD_INPUT in _errors.REASONS
    older = [c for c, text in _errors.REASONS.items() if "older name of %s" % _errors.BAD_INPUT in text]
    assert sorted(older) == ["bad_option", "invalid_argument"]
