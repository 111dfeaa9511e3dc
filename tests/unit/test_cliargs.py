"""args mapping -> argv, validation against introspected flags, fingerprint and diff."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK

# The shape _introspect.introspect() returns (subset).
FLAGS = {
    "--model-path": {"option_strings": ["--model-path", "--model"], "dest": "model_path", "type": "str",
                     "choices": None, "nargs": None, "action": "store"},
    "--tp-size": {"option_strings": ["--tp-size", "--tensor-parallel-size"], "dest": "tp_size", "type": "int",
                  "choices": None, "nargs": None, "action": "store"},
    "--reasoning-parser": {"option_strings": ["--reasoning-parser"], "dest": "reasoning_parser", "type": "str",
                           "choices": ["deepseek-r1", "kimi_k2", "qwen3"], "nargs": None, "action": "store"},
    "--mem-fraction-static": {"option_strings": ["--mem-fraction-static"], "type": "float", "choices": None,
                              "nargs": None, "action": "store"},
    "--context-length": {"option_strings": ["--context-length"], "type": "human_readable_int", "choices": None,
                         "nargs": None, "action": "store"},
    "--trust-remote-code": {"option_strings": ["--trust-remote-code"], "type": "bool", "choices": None,
                            "nargs": 0, "action": "store_true"},
    "--disable-cuda-graph": {"option_strings": ["--disable-cuda-graph"], "type": "bool", "choices": None,
                             "nargs": 0, "action": "DeprecatedStoreTrueAction"},
    "--cuda-graph-bs": {"option_strings": ["--cuda-graph-bs"], "type": "int", "choices": None,
                        "nargs": "+", "action": "store"},
    "--log-level": {"option_strings": ["--log-level"], "type": "str", "choices": None, "nargs": None,
                    "action": "store"},
}


@pytest.mark.parametrize("key,flag", [("reasoning-parser", "--reasoning-parser"),
                                      ("reasoning_parser", "--reasoning-parser"),
                                      ("tp-size", "--tp-size")])
def test_normalize_key_accepts_both_spellings(key, flag):
    assert _cliargs.normalize_key(key) == flag


@pytest.mark.parametrize("key,needle", [("--reasoning-parser", "starts with '-'"),
                                        ("reasoning-parser kimi_k2", "whitespace"),
                                        (" port", "whitespace"),
                                        ("a=b", "characters"),
                                        ("", "non-empty")])
def test_normalize_key_refuses_command_line_fragments(key, needle):
    with pytest.raises(ValueError, match=needle):
        _cliargs.normalize_key(key)


def test_normalize_args_reports_every_bad_key_and_duplicates():
    norm, errors = _cliargs.normalize_args({"--x": 1, "y z": 2, "reasoning_parser": "a",
                                            "reasoning-parser": "b", "ok": [1, {"a": 1}]})
    assert list(norm) == ["--reasoning-parser"]
    assert len(errors) == 4
    assert any("twice" in e for e in errors)
    assert any("list items" in e for e in errors)


def test_argv_mapping_rules():
    args, _problems = _cliargs.normalize_args({
        "trust-remote-code": True, "disable-cuda-graph": False, "chat-template": None,
        "reasoning-parser": "kimi_k2", "mem-fraction-static": 0.88, "lora-paths": ["a", "b"],
        "cuda-graph-bs": [1, 2, 4], "json-model-override-args": {"x": 1},
    })
    argv = _cliargs.args_to_argv(args, FLAGS)
    assert argv == ["--trust-remote-code", "--reasoning-parser", "kimi_k2", "--mem-fraction-static", "0.88",
                    "--lora-paths", "a", "--lora-paths", "b", "--cuda-graph-bs", "1", "2", "4",
                    "--json-model-override-args", '{"x": 1}']


def test_server_argv_keeps_values_literal():
    weird = "/models/my model's \"dir\"; rm -rf $HOME `x`"
    argv = _cliargs.server_argv(["py", "-m", "sglang.launch_server"], weird, "127.0.0.1", 8000, 2,
                                {"--served-model-name": "a|b&c"}, api_key="k3y")
    assert argv[argv.index("--model-path") + 1] == weird
    assert argv[argv.index("--served-model-name") + 1] == "a|b&c"
    assert argv[argv.index("--api-key") + 1] == "k3y"


def test_unknown_flag_names_version_and_suggests():
    errors = _cliargs.validate_against_flags({"--reasoning-parsr": "kimi_k2"}, FLAGS, "0.5.6")
    assert len(errors) == 1
    assert "sglang 0.5.6 has no flag --reasoning-parsr" in errors[0]
    assert "--reasoning-parser" in errors[0]


def test_invalid_choice_lists_valid_choices():
    errors = _cliargs.validate_against_flags({"--reasoning-parser": "kimi_k3"}, FLAGS, "0.5.6")
    assert len(errors) == 1
    assert "'kimi_k3' is not a valid choice in sglang 0.5.6" in errors[0]
    assert "deepseek-r1, kimi_k2, qwen3" in errors[0]
    assert not _cliargs.validate_against_flags({"--reasoning-parser": "kimi_k2"}, FLAGS, "0.5.6")


@pytest.mark.parametrize("flag,value,ok", [
    ("--tp-size", 2, True), ("--tp-size", "2", True), ("--tp-size", "two", False), ("--tp-size", 2.5, False),
    ("--tp-size", True, False),
    ("--mem-fraction-static", 0.8, True), ("--mem-fraction-static", "0.8", True),
    ("--mem-fraction-static", "lots", False),
    ("--context-length", "32k", True), ("--context-length", 32768, True), ("--context-length", "big", False),
    ("--trust-remote-code", True, True), ("--trust-remote-code", False, True),
    ("--trust-remote-code", "yes", False), ("--disable-cuda-graph", 1, False),
    ("--reasoning-parser", True, False),
    ("--cuda-graph-bs", [1, 2], True), ("--cuda-graph-bs", [1, "x"], False),
])
def test_types(flag, value, ok):
    errors = _cliargs.validate_against_flags({flag: value}, FLAGS, "v")
    assert (not errors) == ok, errors


def test_dedicated_flags_caught_by_name_and_alias():
    assert _cliargs.dedicated_conflicts({"--port": 1})
    assert _cliargs.dedicated_conflicts({"--api-key": "x"})[0].startswith("args --api-key duplicates the 'api_key'")
    assert _cliargs.dedicated_conflicts({"--tensor-parallel-size": 2})  # static alias list
    # an alias only the introspected option_strings know about
    flags = {"--tp-size": {"option_strings": ["--tp-size", "--tp"]}}
    assert _cliargs.dedicated_conflicts({"--tp": 2}, flags)
    assert not _cliargs.dedicated_conflicts({"--tp": 2})


def test_quiet_log_level_and_expect():
    assert _logpatterns.quiet_flag({"--log-level": "WARNING"}) == ("--log-level", "WARNING")
    assert _logpatterns.quiet_flag({"--log-level-http": "error"})
    assert _logpatterns.quiet_flag({"--log-level": "info"}) is None
    expect = _cliargs.expected_server_info("/m", 8, 8000, {"--reasoning-parser": "kimi_k2",
                                                           "--tool-call-parser": "kimi_k2",
                                                           "--trust-remote-code": True})
    assert expect == {"model_path": "/m", "tp_size": 8, "port": 8000, "reasoning_parser": "kimi_k2",
                      "tool_call_parser": "kimi_k2"}


def _fp(api_key="k1", env=None, args=None):
    hashed, redacted = _cliargs.fingerprint_inputs("/v/bin/python", "0.5.23", "launch_server", "/m", "127.0.0.1",
                                                   8000, 1, args or {"--reasoning-parser": "kimi_k2"},
                                                   env or {"HF_TOKEN": "hf_secret", "A": "1"}, api_key)
    return _cliargs.fingerprint(hashed), hashed, redacted


def test_fingerprint_changes_with_secret_but_never_stores_it():
    fp1, hashed, redacted = _fp()
    fp2, _hashed2, redacted2 = _fp(api_key="k2")
    fp3, _hashed3, _redacted3 = _fp(env={"HF_TOKEN": "hf_other", "A": "1"})
    assert len({fp1, fp2, fp3}) == 3
    assert fp1 == _fp()[0]
    text = repr(redacted) + repr(hashed)
    assert "k1" not in repr(redacted) and "hf_secret" not in text
    assert redacted["api_key"] == MASK and redacted["env"]["HF_TOKEN"] == MASK
    changes = _cliargs.diff_inputs(redacted, redacted2, fingerprints_differ=True)
    assert changes[0]["key"] == "secret" and "api_key" in changes[0]["note"]


def test_fingerprint_ignores_arg_order_and_false_flags():
    a = _fp(args={"--a": "1", "--b": "2"})[0]
    b = _fp(args={"--b": "2", "--a": "1", "--c": False, "--d": None})[0]
    assert a == b


def test_diff_inputs_per_key():
    _fp_before, _hashed_before, before = _fp()
    _fp_after, _hashed_after, after = _fp(args={"--reasoning-parser": "qwen3"})
    changes = _cliargs.diff_inputs(before, after)
    assert changes == [{"key": "args.--reasoning-parser", "before": "kimi_k2", "after": "qwen3"}]
    assert _cliargs.inputs_text(after).startswith("{")


def test_secret_args_masked():
    _fp_adm, hashed, redacted = _fp(args={"--admin-api-key": "adm1n"})
    assert redacted["args"]["--admin-api-key"] == MASK
    assert "adm1n" not in repr(hashed)
    assert _cliargs.argv_secrets("k", {"--admin-api-key": "adm1n"}, {"HF_TOKEN": "t0k"}) == ["k", "adm1n", "t0k"]
