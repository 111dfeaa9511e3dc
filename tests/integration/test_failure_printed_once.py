"""A preflight error of restart_extraction.yml is printed ONCE in the default output.

The preflight fails before anything is stopped (a flag value the installed SGLang refuses, a
venv that does not exist). The operator reads the play's default output (the `default`
callback, yaml result format, as ansible.cfg sets it; no -v): the decisive message must be in
it exactly once, not repeated by the failing task's result dump, the rescue, the summary, the
final fail and the report. Counted over the whole output with YAML's line wrapping undone.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from typing import Any, Dict

import pytest

from helpers.fixtures import ROOT, free_port
from ansible_collections.llmops.sglang.plugins.module_utils._core import _http


def _play(extra: Dict[str, Any], tmp_path) -> subprocess.CompletedProcess:
    vars_file = tmp_path / ("extra-%s.json" % uuid.uuid4().hex[:6])
    vars_file.write_text(json.dumps(extra))
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventory", "local.yml"),
            os.path.join(ROOT, "playbooks", "restart_extraction.yml"), "-e", "@%s" % vars_file]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1")
    # the operator's default output: no callback or verbosity override from the caller's shell
    for key in ("ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_RESULT_FORMAT", "ANSIBLE_VERBOSITY",
                "ANSIBLE_DISPLAY_FAILED_STDERR"):
        env.pop(key, None)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)


def _flat(text: str) -> str:
    """The output with YAML's wrapping undone: every run of whitespace (a line break plus the
    continuation's indent included) is one space; a quoted scalar's doubled quote is one."""
    return re.sub(r"\s+", " ", text).replace("''", "'")


CASES = {
    # SGLang's own argparse choices for --reasoning-parser (kimi_k9 does not exist)
    "bad_flag_value": ({"sglang_extraction_args": {"reasoning-parser": "kimi_k9"}},
                       "--reasoning-parser='kimi_k9' is not a valid choice"),
    "missing_venv": ({"sglang_venv": "{tmp}/no-such-venv"}, "venv {tmp}/no-such-venv does not exist"),
}


# Printed 6 times today: the plan task's failure (the [ERROR] line, then msg, decision,
# preflight.checks and preflight.errors of its result dump) and the summary's plan line. Strict:
# this marker must go with the role change that prints it once (the plan task does not fail on
# a refused preflight; a short fail task right after it stops the host; the summary lists the
# errors), and the test then guards it.
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_preflight_error_is_printed_once(tmp_path, case):
    overrides, decisive = CASES[case]
    tmp = str(tmp_path)
    extra: Dict[str, Any] = {"sglang_demo_dir": str(tmp_path / "demo"), "sglang_port": free_port(),
                             "sglang_report_dir": str(tmp_path / "report")}
    extra.update(json.loads(json.dumps(overrides).replace("{tmp}", tmp)))
    decisive = decisive.replace("{tmp}", tmp)
    run = _play(extra, tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    flat = _flat(out)
    # where the failure is: before anything was stopped, and nothing was launched
    assert "FAILED, nothing was stopped: no server serves" in flat, out[-4000:]
    assert "Launch the new server" not in out
    assert _http.request("127.0.0.1", extra["sglang_port"], "/health", timeout=2).status is None
    count = flat.count(decisive)
    assert count == 1, "the decisive message %r is printed %d times:\n%s" % (decisive, count, out)
    # the restart's failure in at most 60 lines (the report's own tasks apart), no module result
    # dumped (that takes -v)
    restart = out.split("TASK [llmops.sglang.sglang_report :", 1)[0].splitlines()
    assert len(restart) <= 60, "%d lines:\n%s" % (len(restart), out)
    assert "preflight:" not in out and "checks:" not in out, out
