"""One layer of defaults: each role's defaults/main.yml equals its meta/argument_specs.yml and the
module's own default for the option it feeds; the playbooks' inventory mapping falls back to
the same values; the restart role reuses the thin roles' tasks instead of calling their modules
with a copy of their options, and keeps its own facts private."""
from __future__ import annotations

import ast
import os
import re
from typing import Any, Dict

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = ("sglang_launch", "sglang_teardown", "sglang_ready", "sglang_restart", "sglang_report")
UNSET = object()

# role variable -> (module, option); state_dir is left to the module (null) everywhere.
FEEDS = {
    "sglang_launch": {s: ("sglang_launch", s) for s in (
        "name", "entrypoint", "host", "port", "tp_size", "args", "env", "keep_logs", "gpu_check",
        "foreign_port_holders", "min_free_mb", "spawn_timeout", "containment", "shm_min_free_mb",
        "ignore_changes", "identity_paths")},
    "sglang_teardown": {s: ("sglang_teardown", s) for s in (
        "ports", "patterns", "sglang_processes", "all_users", "protect", "foreign_gpu_processes",
        "grace_period", "timeout", "shm_cleanup", "purge_paths", "clear_cache")},
    "sglang_ready": {s: ("sglang_ready", s) for s in (
        "timeout", "poll_interval", "extra_ready_patterns", "extra_fatal_patterns", "require_ready_line",
        "health", "settle")},
    "sglang_restart": dict(
        {s: ("sglang_launch", s) for s in (
            "name", "entrypoint", "host", "port", "tp_size", "args", "env", "keep_logs", "gpu_check",
            "foreign_port_holders", "min_free_mb", "spawn_timeout", "containment")},
        **{s: ("sglang_teardown", s) for s in (
            "patterns", "sglang_processes", "all_users", "protect", "foreign_gpu_processes", "grace_period",
            "shm_cleanup", "purge_paths", "clear_cache")},
        teardown_timeout=("sglang_teardown", "timeout"),
        **{s: ("sglang_ready", s)
           for s in ("timeout", "poll_interval", "extra_ready_patterns", "extra_fatal_patterns", "health")},
        ready_settle=("sglang_ready", "settle")),
}


def _yaml(*parts: str) -> Any:
    with open(os.path.join(ROOT, *parts)) as fh:
        return yaml.safe_load(fh)


def module_defaults(module: str) -> Dict[str, Any]:
    with open(os.path.join(ROOT, "plugins", "modules", module + ".py")) as fh:
        tree = ast.parse(fh.read())
    doc = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
               and any(getattr(t, "id", "") == "DOCUMENTATION" for t in n.targets))
    return {k: v.get("default") for k, v in yaml.safe_load(doc)["options"].items()}


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_match_the_defaults(role):
    defaults = _yaml("roles", role, "defaults", "main.yml") or {}
    options = _yaml("roles", role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(set(defaults) - set(options)) == [], "defaults without a spec"
    wrong = {}
    for name, spec in options.items():
        value = defaults.get(name, UNSET)
        if value is UNSET:
            continue
        if isinstance(value, str) and "{{" in value:  # a template is documented in words
            continue
        if spec.get("default", None) != value:
            wrong[name] = (spec.get("default", None), value)
    assert wrong == {}, "argument_specs default != defaults/main.yml: %s" % wrong


@pytest.mark.parametrize("role", sorted(FEEDS))
def test_role_defaults_are_the_module_defaults(role):
    defaults = _yaml("roles", role, "defaults", "main.yml")
    wrong = {}
    for suffix, (module, option) in FEEDS[role].items():
        mine = defaults["%s_%s" % (role, suffix)]
        theirs = module_defaults(module)[option]
        if mine != theirs:
            wrong["%s_%s" % (role, suffix)] = (mine, "%s.%s" % (module, option), theirs)
        assert defaults.get("%s_state_dir" % role, None) is None, "state_dir: the modules' rule (null)"
    assert wrong == {}, wrong


def test_the_inventory_mapping_falls_back_to_the_role_defaults():
    defaults = _yaml("roles", "sglang_restart", "defaults", "main.yml")
    with open(os.path.join(ROOT, "playbooks", "vars", "sglang_restart.yml")) as fh:
        lines = [ln for ln in fh if ln.startswith("sglang_restart_")]
    checked = 0
    for line in lines:
        name, expr = line.split(":", 1)
        m = re.search(r"\|\s*default\(([^()]*)\)\)?\s*}}", expr)
        if not m:
            continue
        fallback = yaml.safe_load(m.group(1).replace("none", "null"))
        assert fallback == defaults[name], "%s falls back to %r, the role default is %r" % (name, fallback, defaults[name])
        checked += 1
    assert checked >= 20


def _tasks(role: str):
    d = os.path.join(ROOT, "roles", role, "tasks")
    for fn in sorted(os.listdir(d)):
        with open(os.path.join(d, fn)) as fh:
            yield fn, fh.read()


def test_the_restart_reuses_the_thin_roles_tasks():
    text = "".join(t for _path, t in _tasks("sglang_restart"))
    assert "llmops.sglang.sglang_launch:" not in text and "llmops.sglang.sglang_ready:" not in text
    # no direct module call: the dump directory is checked by the plan's own preflight (output_dirs)
    assert "llmops.sglang.sglang_teardown:" not in text
    for role, tasks_from in (("sglang_launch", "launch.yml"), ("sglang_teardown", "teardown.yml"),
                             ("sglang_ready", "ready.yml")):
        assert re.search(r"name: llmops\.sglang\.%s\n\s+tasks_from: %s" % (role, tasks_from), text), role
        assert os.path.exists(os.path.join(ROOT, "roles", role, "tasks", tasks_from))


def test_the_restart_keeps_its_facts_private():
    public = {"sglang_restart_result", "sglang_restart_failed", "sglang_restart_teardown"}
    for fn, text in _tasks("sglang_restart"):
        for name in re.findall(r"register: (\w+)", text):
            assert name.startswith("__sglang_restart_"), (fn, name)
        for block in re.findall(r"set_fact:\n((?:\s{8,}.*\n)+)", text):
            for name in re.findall(r"^\s+(\w+):", block, re.M):
                assert name.startswith("__sglang_restart_") or name in public or not name.startswith("sglang"), (fn, name)


def test_no_role_or_playbook_keeps_a_purge_deny_list():
    """The directories that are never purged live in plugins/module_utils/_host/_purge.py alone."""
    pattern = re.compile(r"""['"]/(usr|etc|boot|proc|sys|sbin|lib|root|home)['"]""")
    for top in ("roles", "playbooks"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for fn in files:
                if fn.endswith((".yml", ".yaml", ".j2")):
                    with open(os.path.join(dirpath, fn)) as fh:
                        assert not pattern.search(fh.read()), os.path.join(dirpath, fn)
