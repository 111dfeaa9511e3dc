"""Host lists keep the inventory's order. ansible-core's difference/union/intersect filters go
through a Python set, so a roll that stopped at w1 said "w3, w2 not touched" under some hash
seeds and "w2, w3" under others (seen in CI). The collection's own hosts_in/hosts_without keep
the first list's order; every host list in the roles and playbooks goes through them."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.filter.host_order import hosts_in, hosts_without

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS = ["w%d" % i for i in range(8)]
FAILING = ["w1", "w2", "w5", "w6"]  # four, so a set's order is almost never the inventory's
SET_FILTER = re.compile(r"\|\s*(difference|union|intersect|symmetric_difference)\b")


def test_hosts_without_keeps_the_first_lists_order_and_names_each_host_once():
    assert hosts_without(["w3", "w1", "w2", "w1", "w0"], ["w1"]) == ["w3", "w2", "w0"]
    assert hosts_without(HOSTS, []) == HOSTS and hosts_without(HOSTS, None) == HOSTS
    assert hosts_without([], HOSTS) == []


def test_hosts_in_keeps_the_first_lists_order_not_the_seconds():
    assert hosts_in(HOSTS, ["w6", "w1", "w5", "w2", "w1"]) == FAILING
    assert hosts_in(HOSTS, None) == []


@pytest.mark.parametrize("bad", ["w1,w2", b"w1", 3])
def test_a_string_or_a_number_is_refused_not_split_into_letters(bad):
    with pytest.raises(ValueError, match="list of host names"):
        hosts_without(bad, [])


def _yaml_files():
    for top in ("roles", "playbooks", "molecule"):
        for base, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".yml", ".yaml")):
                    yield os.path.join(base, name)


def test_no_role_or_playbook_orders_hosts_by_a_set():
    hits = []
    for path in _yaml_files():
        with open(path, encoding="utf-8") as fh:
            for no, line in enumerate(fh, 1):
                if SET_FILTER.search(line.split("#", 1)[0]):
                    hits.append("%s:%d: %s" % (os.path.relpath(path, ROOT), no, line.strip()))
    assert not hits, "use llmops.sglang.hosts_in/hosts_without, which keep the inventory's order:\n" + "\n".join(hits)


def _untouched_expression() -> str:
    with open(os.path.join(ROOT, "roles", "sglang_rolling", "tasks", "main.yml"), encoding="utf-8") as fh:
        text = fh.read()
    found = re.search(r"sglang_rolling_untouched: >-\n((?:\s{10}.*\n)+)", text)
    assert found, "sglang_rolling_untouched is no longer set in the rolling role"
    return " ".join(found.group(1).split())


def _run(tmp_path, seed: int) -> dict:
    """One playbook: four hosts fail and drop out; the survivors render the restart role's
    roll_stopped, then a serial play renders the rolling role's untouched list at each host."""
    out = tmp_path / str(seed)
    out.mkdir()
    write = {"ansible.builtin.copy": {"dest": str(out) + "/{{ inventory_hostname }}-{{ what }}.json",
                                      "content": "{{ got | to_json }}", "mode": "0600"}}
    plays = [
        {"hosts": "all", "gather_facts": False,
         "vars_files": [os.path.join(ROOT, "roles", "sglang_restart", "vars", "main.yml")],
         "tasks": [{"ansible.builtin.fail": {"msg": "down"}, "when": "inventory_hostname in %s" % FAILING},
                   dict(write, vars={"what": "stopped", "got": "{{ __sglang_restart_roll_stopped }}"})]},
        {"hosts": "all", "gather_facts": False, "serial": 1,
         "tasks": [dict(write, vars={"what": "untouched",
                                     "got": {"all": "{{ ansible_play_hosts_all }}", "batch": "{{ ansible_play_batch }}",
                                             "untouched": _untouched_expression()}})]},
    ]
    book = tmp_path / ("play%d.yml" % seed)
    book.write_text(yaml.safe_dump(plays))
    # YAML, not INI: an interpreter path with a space (a checkout under "/tmp/ci run") stays one value
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in HOSTS}}},
        sort_keys=False))
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    done = subprocess.run(["ansible-playbook", "-i", str(inv), str(book)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=180, check=False)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]  # the four failed hosts
    return {p.name[:-5]: json.loads(p.read_text()) for p in out.iterdir()}


@pytest.mark.parametrize("seed", [1, 2])
def test_the_roles_name_hosts_in_inventory_order_under_any_hash_seed(tmp_path, seed):
    got = _run(tmp_path, seed)
    for host in ("w0", "w3", "w4", "w7"):
        # a host of the roll after a failure is not touched, and says which hosts failed, in order
        assert got[host + "-stopped"] == FAILING, (seed, host, got[host + "-stopped"])
    for host in ("w0", "w3", "w4", "w7"):
        seen = got[host + "-untouched"]
        after = seen["all"][seen["all"].index(host) + 1:]
        assert seen["untouched"] == [h for h in after if h not in seen["batch"]], (seed, host, seen)
    assert len(got["w0-untouched"]["untouched"]) >= 3  # enough hosts for a set to scramble them
