"""Module tests in-process, from YAML cases (the shape of community.general's
tests/unit/plugins/modules/uthelper.py): each case runs the module's real main() with its
arguments in this process - the argument spec, check mode, diff, the one exit path and its
redaction as a task would meet them, without an ansible or Python process per case.

A test file is three lines::

    from .uthelper import cases_of
    test_module = cases_of("sglang_teardown", __file__)

with test_sglang_teardown.yaml beside it, a list of cases::

    - id: negative_grace_period             # the test id
      host:                                 # optional: the synthetic host, made before the run
        dirs: ["{tmp}/empty"]
        files: {"{tmp}/model.safetensors": "0123456789"}
      input: {name: ut, grace_period: -1, state_dir: "{tmp}/s"}
      flags: {check: false, diff: false}    # optional
      output: {failed: true, reason: bad_option}   # keys that must equal these values
      present: [servers]                    # optional: keys the result must have, whatever their value
      has: {msg: ["grace_period"]}          # optional: substrings of (dotted) result keys
      lacks: ["sk-secret"]                  # optional: texts found nowhere in the result (secrets)
      absent: ["{tmp}/s"]                   # optional: paths that must not exist afterwards

`{tmp}` in any string is the case's own tmp_path. For bad input, check mode and option plumbing:
what needs a server, signals, the module's own process identity (its command line) or another
interpreter stays in tests/integration. Signals are refused while a case runs (os.kill, killpg,
pidfd_send_signal raise): a case that gets past validation fails instead of acting.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import signal
from typing import Any, Callable, Dict, List, Tuple

import pytest
import yaml

MODULE_PKG = "ansible_collections.llmops.sglang.plugins.modules"
KNOWN_KEYS = {"id", "host", "input", "flags", "output", "present", "has", "lacks", "absent"}


def _fill(value: Any, tmp: str) -> Any:
    if isinstance(value, str):
        return value.replace("{tmp}", tmp)
    if isinstance(value, list):
        return [_fill(v, tmp) for v in value]
    if isinstance(value, dict):
        return {_fill(k, tmp): _fill(v, tmp) for k, v in value.items()}
    return value


def _no_signals(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("an in-process module case tried to send a signal %r: such a case belongs in "
                         "tests/integration" % (args,))


def run_main(module: str, args: Dict[str, Any], tmp: str, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture, check: bool = False, diff: bool = False) -> Tuple[int, Dict[str, Any], str]:
    """(exit status, result, stderr) of the module's main() run here with `args`."""
    from ansible.module_utils import basic

    payload = dict(args, _ansible_check_mode=check, _ansible_diff=diff, _ansible_tmpdir=tmp,
                   _ansible_remote_tmp=tmp, _ansible_keep_remote_files=False)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": payload}).encode())
    # the JSON profile a module run as a program gets by default (ansible-core >= 2.19)
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    main = importlib.import_module("%s.%s" % (MODULE_PKG, module)).main
    # A case runs inside pytest's process, whose identity is not a module's: a case that got past
    # validation must not signal anything it would then select (pytest's own process included).
    for owner, name in ((os, "kill"), (os, "killpg"), (signal, "pidfd_send_signal")):
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, _no_signals)
    capsys.readouterr()
    try:
        with pytest.raises(SystemExit) as ended:
            main()
    finally:
        gc.unfreeze()  # _exit.ending froze what was alive: this process goes on
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert lines, "module %s printed no result; stderr: %s" % (module, err)
    return int(ended.value.code or 0), json.loads(lines[-1]), err


def load_cases(path: str) -> List[Dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        cases = yaml.safe_load(fh)
    assert isinstance(cases, list) and cases, "%s: a list of cases" % path
    ids = [c.get("id") for c in cases]
    assert len(set(ids)) == len(ids) and all(ids), "%s: every case needs its own id" % path
    for case in cases:
        unknown = set(case) - KNOWN_KEYS
        assert not unknown, "%s: case %s: unknown keys %s" % (path, case["id"], sorted(unknown))
    return cases


def _make_host(host: Dict[str, Any], tmp: str) -> None:
    paths = list(host.get("dirs") or []) + list(host.get("files") or {})
    outside = [p for p in paths if not os.path.abspath(p).startswith(tmp + os.sep)]
    assert not outside, "a case's host lives in its tmp_path ({tmp}/...): %s" % outside
    for path in host.get("dirs") or []:
        os.makedirs(path)
    for path, text in (host.get("files") or {}).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


def _dig(result: Dict[str, Any], dotted: str) -> Any:
    value: Any = result
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def check_case(module: str, case: Dict[str, Any], tmp: str, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture) -> None:
    _make_host(_fill(case.get("host") or {}, tmp), tmp)
    flags = case.get("flags") or {}
    rc, result, err = run_main(module, _fill(case.get("input") or {}, tmp), tmp, monkeypatch, capsys,
                               check=bool(flags.get("check")), diff=bool(flags.get("diff")))
    expected = _fill(case.get("output") or {}, tmp)
    got = {k: result.get(k) for k in expected}
    assert got == expected, result
    assert (rc != 0) == bool(result.get("failed")), (rc, result)
    missing = [k for k in case.get("present") or [] if k not in result]
    assert not missing, ("keys missing", missing, result)
    for key, texts in _fill(case.get("has") or {}, tmp).items():
        value = _dig(result, key)
        for text in texts:
            assert isinstance(value, str) and text in value, (key, text, result)
    whole = json.dumps(result)
    for text in _fill(case.get("lacks") or [], tmp):
        assert text not in whole, (text, result)
    # a failure is never an unexpected exception, nor a stack trace as the message (a reason is
    # set where the module raised it; the argument spec's own refusals carry none: `output` says)
    if result.get("failed"):
        assert result.get("reason") != "internal_error", result
        assert "Traceback" not in result.get("msg", "") and "Traceback" not in err, (result, err)
    for path in _fill(case.get("absent") or [], tmp):
        assert not os.path.lexists(path), "%s exists after case %s" % (path, case["id"])


def cases_of(module: str, test_file: str) -> Callable[..., None]:
    """The parametrized test of the YAML file named after `test_file` (.py -> .yaml)."""
    cases = load_cases(os.path.splitext(test_file)[0] + ".yaml")

    @pytest.mark.parametrize("case", cases, ids=[c["id"] for c in cases])
    def test_module(case: Dict[str, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture) -> None:
        check_case(module, case, str(tmp_path), monkeypatch, capsys)

    return test_module
