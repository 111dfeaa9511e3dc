"""With `inject_facts_as_vars = False` (an ansible.cfg setting) the restart's own outcome is only in
the facts namespace: the role read it as a top-level variable, so every restart - a successful one
included - printed `serving NEW config` and then failed the host (`restart of X failed: see
above`), and the roll, the rollback and the report never saw it. The collection reads
`ansible_facts.sglang_restart_result` everywhere."""
from __future__ import annotations

import json
import os
import subprocess

from helpers import play_runs


def _env():
    return dict(play_runs.env(), ANSIBLE_INJECT_FACT_VARS="False")


def _run(inv, playbook, extra=None):
    argv = [play_runs.PLAYBOOK, "-i", inv, os.path.join(play_runs.ROOT, "playbooks", playbook)]
    if extra:
        argv += ["-e", json.dumps(extra)]
    return subprocess.run(argv, env=_env(), cwd=play_runs.ROOT, capture_output=True, text=True,
                          timeout=600, check=False)


def test_a_restart_succeeds_and_a_crash_rolls_back_with_facts_not_injected(one_host, tmp_path):
    inv, hv = one_host
    first = _run(inv, "restart_serving.yml", {"sglang_report_dir": str(tmp_path / "report")})
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-4000:]
    assert "%s on h1: serving NEW config" % hv["sglang_name"] in out
    assert "failed=0" in out
    # the report found the host's result in the facts namespace
    md = [f for f in os.listdir(tmp_path / "report") if f.endswith(".md")]
    assert md and hv["sglang_name"] in open(tmp_path / "report" / md[0]).read()
    # a crash of the new config: the rollback is seen as due and runs
    crash = _run(inv, "restart_serving.yml", {"sglang_serving_args": {"mem-fraction-static": 0.7},
                                              "sglang_serving_env": {"SGLANG_EMULATOR_FAULT": "oom"}})
    out = crash.stdout + crash.stderr
    assert crash.returncode != 0, out[-4000:]
    assert "%s on h1: serving OLD config (rolled back)" % hv["sglang_name"] in out, out[-4000:]
    assert "restart of %s failed: serving OLD config (rolled back)" % hv["sglang_name"] in out, out[-4000:]
