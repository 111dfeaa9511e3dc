"""Run the collection's playbooks against localhost inventories of one or more hosts.

Every host is `ansible_connection: local` with its own instance name, free port, state and log
directories under the test's tmp_path, so a test starts and tears down only its own servers.
"""
from __future__ import annotations

import os
import signal
import subprocess
import uuid
from typing import Any, Dict, List, Optional

import yaml

from helpers.fixtures import ROOT, controller_python, free_port

PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
ANSIBLE = os.path.join(ROOT, ".venv", "bin", "ansible")


def demo_vars() -> Dict[str, Any]:
    """The group vars of inventory/local.yml with the checkout-relative paths made absolute."""
    with open(os.path.join(ROOT, "inventory", "local.yml")) as fh:
        data = yaml.safe_load(fh)
    group = dict(data["all"]["children"]["gpu_8x"]["vars"])
    group.update(sglang_venv=os.path.join(ROOT, ".venv-emulator"),
                 sglang_model_path=os.path.join(ROOT, "inventory", "files", "demo-model"))
    return group


def host_vars(base: str, label: str, **extra: Any) -> Dict[str, Any]:
    """One localhost alias with its own instance: name, port, state/log/dump dirs under `base`."""
    root = os.path.join(base, label)
    out = {
        "ansible_connection": "local",
        "ansible_python_interpreter": controller_python(),
        "sglang_name": "t%s-%s" % (uuid.uuid4().hex[:6], label),
        "sglang_port": free_port(),
        "sglang_state_dir": os.path.join(root, "state"),
        "sglang_log_dir": os.path.join(root, "logs"),
        "sglang_extraction_dump_dir": os.path.join(root, "hs"),
    }
    out.update(extra)
    return out


def write_inventory(path: str, hosts: Dict[str, Dict[str, Any]], **group: Any) -> str:
    """An inventory with `hosts` in group gpu_8x (the playbooks' default hosts)."""
    group_vars = demo_vars()
    group_vars.update(group)
    data = {"all": {"children": {"gpu_8x": {"hosts": hosts, "vars": group_vars}}}}
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return path


def env() -> Dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                ANSIBLE_NOCOLOR="1", PYTHONDONTWRITEBYTECODE="1")


def argv(inventory: str, playbook: str, extra: Optional[List[str]] = None) -> List[str]:
    return [PLAYBOOK, "-i", inventory, os.path.join(ROOT, "playbooks", playbook)] + list(extra or [])


def play(inventory: str, playbook: str, *extra: str, timeout: float = 420,
         wrap: Optional[List[str]] = None) -> subprocess.CompletedProcess:
    """ansible-playbook to completion (output in .stdout + .stderr); `wrap` prefixes the argv."""
    return subprocess.run(list(wrap or []) + argv(inventory, playbook, list(extra)), cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def start(inventory: str, playbook: str, log_path: str, *extra: str) -> subprocess.Popen:
    """ansible-playbook in the background, in its own session (its process group = its pid)."""
    out = open(log_path, "wb")
    try:
        return subprocess.Popen(argv(inventory, playbook, list(extra)), cwd=ROOT, env=env(), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        out.close()


def kill_tree(leader: int) -> None:
    """SIGKILL `leader` and every descendant (ansible workers detach into sessions of their own
    but stay its children; modules are the workers' children)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as fh:
                    parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    victims, frontier = {leader}, [leader]
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in victims:
                victims.add(child)
                frontier.append(child)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def teardown(inventory: str) -> subprocess.CompletedProcess:
    return play(inventory, "teardown.yml", timeout=300)


def localhosts(base: str, *labels: str) -> Dict[str, Dict[str, Any]]:
    """Host vars of localhost aliases (host_vars), each with its own instance."""
    return {label: host_vars(base, label) for label in labels}


def tear_down_hosts(base: str, hosts: Dict[str, Dict[str, Any]]) -> None:
    """Every server of `hosts` torn down (teardown.yml); the teardown must succeed."""
    down = teardown(write_inventory(os.path.join(base, "teardown-inventory.yml"), hosts))
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
