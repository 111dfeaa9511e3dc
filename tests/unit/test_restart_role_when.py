"""The restart's decisions live in its state machine, not in Jinja: every `when:` of the roles
and playbooks has at most 3 conditions (a list item or an `and`/`or` operand
each), and the role's step tasks read one decision of the state machine."""
from __future__ import annotations

import glob
import os
import re
from typing import Any, Iterator, List, Tuple

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = sorted(glob.glob(os.path.join(ROOT, "roles", "sglang_restart", "tasks", "*.yml"))) + [
    os.path.join(ROOT, "playbooks", name) for name in ("restart_extraction.yml", "restart_serving.yml")]
# every role and playbook, for the rule on `when:`
ALL_FILES = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
                   + glob.glob(os.path.join(ROOT, "playbooks", "*.yml")))


def _whens(node: Any, where: str) -> Iterator[Tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "when":
                yield "%s: %s" % (where, node.get("name", "?")), value
            else:
                yield from _whens(value, where)
    elif isinstance(node, list):
        for item in node:
            yield from _whens(item, where)


def _conditions(when: Any) -> int:
    items: List[str] = [str(w) for w in when] if isinstance(when, list) else [str(when)]
    return sum(1 + len(re.findall(r"\b(?:and|or)\b", re.sub(r"'[^']*'|\"[^\"]*\"", "", w))) for w in items)


def test_no_when_has_more_than_three_conditions():
    too_many = []
    assert len(ALL_FILES) > len(FILES)
    for path in ALL_FILES:
        with open(path) as fh:
            for where, when in _whens(yaml.safe_load(fh), os.path.relpath(path, ROOT)):
                if _conditions(when) > 3:
                    too_many.append("%s: %r" % (where, when))
    assert not too_many, "\n".join(too_many)


def _role_text() -> str:
    """main.yml and its entry points (plan, replace, ready, rollback, teardown, launch)."""
    return "".join(open(p).read() for p in FILES if "/roles/" in p)


def test_the_steps_read_the_state_machines_decisions():
    text = _role_text()
    # the decisions after the plan (and after the launch), rendered once each and kept
    for decision in ("teardown_alone", "launch_due", "ready_due"):
        assert "when: __sglang_restart_decided.%s\n" % decision in text, decision
    assert text.count('__sglang_restart_decided: "{{ __sglang_restart_decision }}"\n') == 2
    assert text.count("when: __sglang_restart_now.rollback_due | default(false)\n") == 2


def test_every_task_of_the_restart_carries_a_role_prefixed_tag():
    """node_exporter's habit: a step can be picked by `sglang_restart_<step>` (the short tags stay).
    A task's tags are its own and those of the imports that lead to it (main.yml's entry points)."""
    tasks_dir = os.path.join(ROOT, "roles", "sglang_restart", "tasks")

    def leaves(items, inherited):
        for item in items or []:
            tags = list(inherited) + list(item.get("tags") or [])
            if "block" in item:
                for key in ("block", "rescue", "always"):
                    yield from leaves(item.get(key), tags)
            elif "ansible.builtin.import_tasks" in item:
                with open(os.path.join(tasks_dir, item["ansible.builtin.import_tasks"])) as fh:
                    yield from leaves(yaml.safe_load(fh), tags)
            else:
                yield item.get("name"), tags

    with open(os.path.join(tasks_dir, "main.yml")) as fh:
        doc = yaml.safe_load(fh)
    missing = []
    seen = 0
    for name, tags in leaves(doc, []):
        seen += 1
        if set(tags) == {"always"}:
            continue  # bookkeeping that runs whatever the tags (set_fact, the rollback, the failure)
        if not any(str(t).startswith("sglang_restart") for t in tags):
            missing.append(name)
    assert seen >= 12 and not missing, missing
