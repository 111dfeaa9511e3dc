"""One layer of defaults: each role's defaults/main.yml equals its meta/argument_specs.yml and the
module's own default for the option it feeds (a default that reads the public inventory name,
`"{{ sglang_port | default(30000) }}"`, falls back to that value); one fallback per public name
across the roles; no play overrides the inventory but for its mode; the restart role reuses the
thin roles' tasks instead of calling their modules with a copy of their options, and keeps its
own facts private."""
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
    # (ports: the instance's port and sglang_extra_ports, as the restart manages them; purge_paths:
    # sglang_purge_paths and, with sglang_purge_dumps_on_teardown, the extraction dump dir)
    "sglang_teardown": {s: ("sglang_teardown", s) for s in (
        "patterns", "sglang_processes", "all_users", "protect", "foreign_gpu_processes",
        "grace_period", "timeout", "shm_cleanup", "clear_cache")},
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


PUBLIC = re.compile(r"^\{\{\s*(sglang_\w+)\s*\|\s*default\(", re.S)


def public_default(value: Any) -> Any:
    """(public name, fallback) of a default that only reads a public name,
    `{{ sglang_port | default(30000) }}`, else (None, value)."""
    m = PUBLIC.match(value.strip()) if isinstance(value, str) else None
    if not m:
        return None, value
    text, depth = value.strip(), 0
    for end in range(m.end() - 1, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    inner, rest = text[m.end():end], text[end + 1:].strip()
    if rest != "}}":
        return None, value
    if PUBLIC.match("{{ %s }}" % inner):  # an old name in between: default(sglang_stop_grace_period | default(30))
        return m.group(1), public_default("{{ %s }}" % inner)[1]
    try:
        return m.group(1), yaml.safe_load(inner.replace("none", "null"))
    except yaml.YAMLError:
        return None, value


def fallback(value: Any) -> Any:
    return public_default(value)[1]


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
        value = fallback(defaults.get(name, UNSET))
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
        mine = fallback(defaults["%s_%s" % (role, suffix)])
        theirs = module_defaults(module)[option]
        if mine != theirs:
            wrong["%s_%s" % (role, suffix)] = (mine, "%s.%s" % (module, option), theirs)
        assert fallback(defaults.get("%s_state_dir" % role, None)) is None, "state_dir: the modules' rule (null)"
    assert wrong == {}, wrong


def test_one_fallback_per_public_name():
    seen: Dict[str, Any] = {}
    for role in ROLES + ("sglang_rolling",):
        for name, value in (_yaml("roles", role, "defaults", "main.yml") or {}).items():
            public, value = public_default(value)
            if public is None:
                continue
            assert seen.setdefault(public, value) == value, "%s falls back to %r here, %r elsewhere" % (
                public, value, seen[public])
    assert len(seen) >= 25


def test_every_public_name_is_in_the_settings_table():
    with open(os.path.join(ROOT, "docs", "roles.md")) as fh:
        table = fh.read().split("## Settings", 1)[1].split("\n## ", 1)[0]
    names = set()
    for role in ROLES + ("sglang_rolling",):
        for value in (_yaml("roles", role, "defaults", "main.yml") or {}).values():
            if isinstance(value, str):
                names.update(re.findall(r"\b(sglang_[a-z_]+)\s*\|\s*default", value))
    missing = sorted(n for n in names if "`%s`" % n not in table)
    assert missing == [], "public names missing from docs/roles.md's Settings table: %s" % missing


def test_no_play_overrides_the_inventory_but_for_its_mode():
    """A play variable beats the inventory: the playbooks set only what their mode is (and each
    of those is named in a warning when the inventory sets it too: plugin_utils/_settings)."""
    from ansible_collections.llmops.sglang.plugins.plugin_utils._settings import PLAY_OWNED_HINTS

    role_vars = set()
    for role in ROLES + ("sglang_rolling",):
        role_vars.update(_yaml("roles", role, "defaults", "main.yml") or {})
    for fn in sorted(os.listdir(os.path.join(ROOT, "playbooks"))):
        if not fn.endswith(".yml"):
            continue
        for play in _yaml("playbooks", fn):
            assert "vars_files" not in play, fn
            overridden = sorted(n for n in play.get("vars", {}) if n in role_vars and n not in PLAY_OWNED_HINTS)
            assert overridden == [], "%s: play vars hide the inventory's %s" % (fn, overridden)
    assert not os.path.exists(os.path.join(ROOT, "playbooks", "vars"))


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
    public = {"sglang_restart_result", "sglang_restart_failed", "sglang_restart_teardown",
              # the thin roles' own registers, which the restart's steps fill: emptied at its start
              "sglang_launch_result", "sglang_teardown_result", "sglang_ready_result"}
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
