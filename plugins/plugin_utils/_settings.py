# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory's settings, checked once per run on the controller: nothing silently ignored.

Every setting has one public name (docs/roles.md, "Settings"): `sglang_<setting>` where roles and
playbooks share it, the role-prefixed name where only one role has it. The roles' defaults read
the public names, so an inventory value always reaches its module - unless a play sets the
same variable itself (a playbook's mode: `sglang_restart_verify`, the mode's args and env) or
the name is not a setting at all (a typo). Both are said in a warning; an old name still works
for one release and says its new name in a deprecation warning.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

# old public name -> new; each keeps working until REMOVED_IN
RENAMED: Dict[str, str] = {"sglang_stop_grace_period": "sglang_grace_period"}
REMOVED_IN = "2.0.0"
COLLECTION = "llmops.sglang"

# What to set instead of a role variable the restart playbooks build themselves.
PLAY_OWNED_HINTS: Dict[str, str] = {
    "sglang_restart_verify": "the playbook is the mode (restart_extraction.yml, restart_serving.yml)",
    "sglang_restart_args": "set sglang_args, or the mode's sglang_extraction_args / sglang_serving_args",
    "sglang_restart_env": "set sglang_env, sglang_nccl_env, or the mode's sglang_extraction_env / sglang_serving_env",
}

# Variables a role registers or sets as facts: in hostvars from an earlier play, never settings.
_RESULT_SUFFIXES = ("_result", "_failed", "_teardown")

_ROLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles")


def role_options(role: str, roles_dir: str = _ROLES_DIR) -> List[str]:
    """The variables a role documents (its meta/argument_specs.yml, entry point main)."""
    import yaml  # the controller's, with ansible-core

    with open(os.path.join(roles_dir, role, "meta", "argument_specs.yml")) as fh:
        spec = yaml.safe_load(fh)
    return sorted(spec["argument_specs"]["main"]["options"])


def _ignored_line(name: str) -> str:
    hint = PLAY_OWNED_HINTS.get(name, "set its public name instead (docs/roles.md, Settings)")
    return "%s in the inventory is ignored: the play sets it itself; %s" % (name, hint)


def inventory_notes(role: str, inventory: Mapping[str, Any], effective: Callable[[str], Any],
                    known: Iterable[str]) -> Dict[str, List[Any]]:
    """Warnings and deprecations for one host's inventory variables, as Ansible shows them.

    `inventory`: the host's variables from the inventory (hostvars: no play or role variables);
    `effective`: a variable's value as this task sees it (templated); `known`: the role's own
    variables. A role variable the play overrides, and a role-prefixed name the role does not
    have, are warnings; an old public name is a deprecation naming its new one."""
    known_set = set(known)
    warnings: List[str] = []
    deprecations: List[Dict[str, str]] = []
    prefix = role + "_"
    for name in sorted(n for n in inventory if isinstance(n, str) and n.startswith(prefix)):
        if name.endswith(_RESULT_SUFFIXES):
            continue
        if name not in known_set:
            warnings.append("%s in the inventory is not a variable of %s.%s and is ignored (a typo? "
                            "docs/roles.md lists the settings)" % (name, COLLECTION, role))
        elif _differs(inventory, name, effective):
            warnings.append(_ignored_line(name))
    for old, new in sorted(RENAMED.items()):
        if old not in inventory:
            continue
        line = "%s is deprecated: set %s instead" % (old, new)
        if new in inventory:
            line += " (both are set: %s wins)" % new
        deprecations.append({"msg": line, "version": REMOVED_IN, "collection_name": COLLECTION})
    return {"warnings": warnings, "deprecations": deprecations}


def _differs(inventory: Mapping[str, Any], name: str, effective: Callable[[str], Any]) -> bool:
    try:
        return bool(inventory[name] != effective(name))
    except Exception:  # pylint: disable=broad-except  # a value that cannot be templated here is not ours to judge
        return False


def notes_for_task(role: Optional[str], task_vars: Mapping[str, Any],
                   template: Callable[[Any], Any]) -> Dict[str, List[Any]]:
    """inventory_notes for the task's host when the task names its role (`__sglang_settings_role`);
    nothing otherwise (the notes come once per run, from one task of the role)."""
    if not role:
        return {"warnings": [], "deprecations": []}
    host = task_vars.get("inventory_hostname")
    hostvars = task_vars.get("hostvars") or {}
    try:
        inventory = hostvars[host]
        names = list(inventory.keys())
        view = {n: inventory[n] for n in names if isinstance(n, str)
                and (n.startswith(role + "_") or n in RENAMED or n in RENAMED.values())}
        known = role_options(role)
    except Exception:  # pylint: disable=broad-except  # the notes never stop a run
        return {"warnings": [], "deprecations": []}
    return inventory_notes(role, view, lambda n: template(task_vars.get(n)), known)


def show(notes: Mapping[str, List[Any]], display: Any) -> None:
    """Through Ansible's own warning and deprecation lines (shown with the host's task)."""
    for line in notes.get("warnings", []):
        display.warning(line)
    for dep in notes.get("deprecations", []):
        display.deprecated(dep["msg"], version=dep["version"], collection_name=dep["collection_name"])
