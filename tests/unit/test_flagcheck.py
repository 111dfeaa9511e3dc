"""_flagcheck: a yes/no per flag question, the valid choices, and a did-you-mean."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _flagcheck as F
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


def flag(name, **kw):
    entry = {"option_strings": ["--" + name], "dest": name.replace("-", "_"), "type": "str", "default": None,
             "choices": None, "nargs": None, "required": False, "action": "store", "help": ""}
    entry.update(kw)
    return entry


FLAGS = {
    "--reasoning-parser": flag("reasoning-parser", choices=["deepseek-r1", "kimi_k2", "qwen3"]),
    "--tool-call-parser": flag("tool-call-parser", choices=["kimi_k2", "qwen25"]),
    "--tp-size": dict(flag("tp-size", type="int", default=1), option_strings=["--tp-size", "--tp"]),
    "--mem-fraction-static": flag("mem-fraction-static", type="float"),
    "--enable-metrics": flag("enable-metrics", type="bool", nargs=0, action="store_true", default=False),
    "--lora-paths": flag("lora-paths", nargs="*"),
    "--model-path": flag("model-path", required=True),
}


def test_questions_in_every_form():
    assert F.questions(["reasoning-parser", "--tp"]) == [("reasoning-parser", None, False), ("--tp", None, False)]
    assert F.questions({"reasoning-parser": "kimi_k2", "tp-size": None}) == [
        ("reasoning-parser", "kimi_k2", True), ("tp-size", None, False)]
    assert F.questions("reasoning-parser=kimi_k2, tp-size") == [
        ("reasoning-parser", "kimi_k2", True), ("tp-size", None, False)]
    assert F.questions(None) == []
    with pytest.raises(SglangError) as err:
        F.questions(5)
    assert err.value.details["reason"] == "bad_input"


def test_accepted_value_and_existence():
    yes = F.answer(FLAGS, "reasoning-parser", "kimi_k2", True, "0.5.23")
    assert yes["accepted"] is True and yes["flag"] == "--reasoning-parser" and yes["exists"]
    assert yes["choices"] == ["deepseek-r1", "kimi_k2", "qwen3"]
    assert yes["answer"] == "yes: sglang 0.5.23 --reasoning-parser accepts kimi_k2"
    exists = F.answer(FLAGS, "tp_size", None, False, "0.5.23")
    assert exists["accepted"] is True and exists["flag"] == "--tp-size"
    alias = F.answer(FLAGS, "--tp", "2", True, "0.5.23")
    assert alias["accepted"] is True and alias["flag"] == "--tp-size"


def test_unknown_value_gets_choices_and_did_you_mean():
    no = F.answer(FLAGS, "reasoning-parser", "kimi-k2", True, "0.5.23")
    assert no["accepted"] is False and no["exists"] is True
    assert no["did_you_mean"] == ["kimi_k2"]
    assert no["answer"] == ("no: sglang 0.5.23 --reasoning-parser does not accept 'kimi-k2'; did you mean "
                            "kimi_k2? (valid choices: deepseek-r1, kimi_k2, qwen3)")


def test_unknown_name_gets_did_you_mean():
    no = F.answer(FLAGS, "reasoning-parsr", "kimi_k2", True, "0.5.6")
    assert no["accepted"] is False and no["exists"] is False and no["flag"] is None
    assert no["did_you_mean"] == ["--reasoning-parser"]
    assert no["answer"] == "no: sglang 0.5.6 has no flag --reasoning-parsr; did you mean --reasoning-parser?"
    far = F.answer(FLAGS, "completely-different", None, False, None)
    assert far["did_you_mean"] == [] and far["answer"] == "no: sglang ? has no flag --completely-different"


@pytest.mark.parametrize("name,value,ok", [
    ("tp-size", 2, True), ("tp-size", "2", True), ("tp-size", "two", False), ("tp-size", [1, 2], False),
    ("mem-fraction-static", "0.8", True), ("mem-fraction-static", "most", False),
    ("enable-metrics", True, True), ("enable-metrics", "false", True), ("enable-metrics", "kimi", False),
    ("lora-paths", ["a", "b"], True), ("lora-paths", "a b", True),
    ("tool-call-parser", "qwen25", True), ("tool-call-parser", "qwen3", False),
])
def test_value_types_switches_and_lists(name, value, ok):
    got = F.answer(FLAGS, name, value, True, "0.5.23")
    assert got["accepted"] is ok, got
    assert got["answer"].startswith("yes: " if ok else "no: ")


def test_answers_keyed_by_the_name_as_asked():
    got = F.answers(FLAGS, {"reasoning-parser": "kimi_k2", "--tool-call-parser": "qwen3"}, "0.5.23")
    assert list(got) == ["reasoning-parser", "--tool-call-parser"]
    assert got["reasoning-parser"]["accepted"] and not got["--tool-call-parser"]["accepted"]
