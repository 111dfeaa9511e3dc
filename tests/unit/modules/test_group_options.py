"""Every module of the `llmops.sglang.sglang` action group accepts the group's shared options
(state_dir, gpu_backend, api_key), so that `module_defaults: {group/llmops.sglang.sglang: ...}`
sets them once for a play. Ansible gives a group's defaults to each module of the group: one that
did not know an option failed the task ("Unsupported parameters"), so before this the group's
module_defaults could not carry them at all (sglang_prewarm knew none, sglang_router and
sglang_drain only api_key, sglang_lock only state_dir).

Each module's real main() runs in-process with the three options and one unknown option: the
argument spec must refuse the unknown one alone (nothing past validation runs)."""
from __future__ import annotations

import os
from typing import Any, List

import pytest
import yaml

from uthelper import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
GROUP = {"state_dir": "/nonexistent/llmops-ut-state", "gpu_backend": "none", "api_key": "sk-ut-group-key"}
# each module's required options (checked before unknown ones), so that validation gets that far
REQUIRED = {"sglang_launch": {"model_path": "/nonexistent/model", "python": "/nonexistent/python"}, "sglang_ready": {"name": "ut"},
            "sglang_router": {"router_url": "http://127.0.0.1:9"}, "sglang_drain": {"port": 9},
            "sglang_prewarm": {"model_path": "/nonexistent/model"}, "sglang_lock": {"name": "ut"}}


def _group_members() -> List[str]:
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as fh:
        return list(yaml.safe_load(fh)["action_groups"]["sglang"])


@pytest.mark.parametrize("module", _group_members())
def test_a_group_module_accepts_the_group_options(module: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    args = dict(GROUP, no_such_option_ut=1, **REQUIRED.get(module, {}))
    rc, result, _err = run_main(module, args, str(tmp_path), monkeypatch, capsys)
    assert rc != 0 and result.get("failed"), result
    msg = result.get("msg", "")
    assert "Unsupported parameters" in msg and "no_such_option_ut" in msg, result
    unsupported = msg.split("Unsupported parameters", 1)[1].split("Supported parameters", 1)[0]
    assert not [k for k in GROUP if k in unsupported], result
    assert GROUP["api_key"] not in str(result)  # no_log: never echoed


def test_the_lock_action_plugin_accepts_the_group_options() -> None:
    from ansible_collections.llmops.sglang.plugins.action.sglang_lock import ActionModule

    assert set(GROUP) <= set(ActionModule._VALID_ARGS), sorted(ActionModule._VALID_ARGS)


def test_every_module_that_acts_on_a_host_is_in_the_group() -> None:
    """A module left out of the group would not get the play's module_defaults: its state dir
    would silently be another one. Out: sglang_report (writes on the controller) and
    sglang_restart_outcome (the restart role's own last step, given the role's state dir)."""
    modules = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "plugins", "modules"))
                     if f.startswith("sglang_") and f.endswith(".py"))
    assert sorted(set(modules) - set(_group_members())) == ["sglang_report", "sglang_restart_outcome"]


def test_the_router_plugin_keeps_the_servers_key_out_of_the_routers_payload() -> None:
    """The router's task usually runs on the router's host: the servers' api_key that
    module_defaults give every module of the group never travels there."""
    from ansible_collections.llmops.sglang.plugins.action.sglang_router import module_args

    task = dict(GROUP, router_url="http://router:30000", router_api_key="sk-router", state="listed")
    assert module_args(task) == {"router_url": "http://router:30000", "router_api_key": "sk-router", "state": "listed"}
