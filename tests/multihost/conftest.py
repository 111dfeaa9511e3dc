"""Fixtures for the multi-host checks: the harness hosts (tests/multihost/harness.sh).

scripts/multihost.sh creates the hosts and exports LLMOPS_MH_DIR; without it (a bare
`pytest tests/multihost` as root) the `mh` fixture creates them itself and removes them at the
end of the module.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from typing import Dict, Iterator, List, Optional, Sequence

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HARNESS = os.path.join(HERE, "harness.sh")
ANSIBLE_BIN = os.path.join(ROOT, ".venv", "bin")


def _read_env(path: str) -> Dict[str, str]:
    env = {}
    with open(path) as fh:
        for line in fh:
            m = re.match(r"export (\w+)=(.*)$", line.strip())
            if m:
                env[m.group(1)] = m.group(2)
    return env


class Hosts:
    """The harness hosts h1..hN (inventory names mh1..mhN) and how to look inside them."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.env = _read_env(os.path.join(directory, "env"))
        self.net = self.env["LLMOPS_MH_NET"]
        self.n = int(self.env["LLMOPS_MH_NHOSTS"])
        self.inventory = self.env["LLMOPS_MH_INVENTORY"]
        self.names = ["mh%d" % i for i in range(1, self.n + 1)]

    # -- addresses and per-host paths (the same values the harness wrote into the inventory) --
    def index(self, host: str) -> int:
        return int(host.lstrip("mh"))

    def addr(self, host: str) -> str:
        return "%s.1%d" % (self.net, self.index(host))

    def port(self, host: str) -> int:
        return 31000 + self.index(host)

    def mn_port(self, host: str) -> int:
        return 33000 + self.index(host)

    def state_dir(self, host: str) -> str:
        return os.path.join(self.dir, "h%d" % self.index(host), "state")

    def sshd_log(self, host: str) -> str:
        return os.path.join(self.dir, "h%d" % self.index(host), "sshd.log")

    # -- running things ------------------------------------------------------------------------
    def run_env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        env["ANSIBLE_CONFIG"] = os.path.join(ROOT, "ansible.cfg")
        env["ANSIBLE_FORCE_COLOR"] = "0"
        env["ANSIBLE_NOCOLOR"] = "1"
        env["ANSIBLE_DEPRECATION_WARNINGS"] = "0"
        return env

    def playbook(self, playbook: str, *extra: str, overlays: Sequence[Dict] = (),
                 timeout: float = 240) -> "Run":
        argv = [os.path.join(ANSIBLE_BIN, "ansible-playbook"), "-i", self.inventory]
        for k, overlay in enumerate(overlays):
            path = os.path.join(self.dir, "overlay-%d-%d.json" % (os.getpid(), k))
            with open(path, "w") as fh:
                json.dump({"all": {"hosts": overlay}}, fh)
            argv += ["-i", path]
        argv += [os.path.join(ROOT, "playbooks", playbook)] + list(extra)
        proc = subprocess.run(argv, cwd=ROOT, env=self.run_env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        return Run(argv, proc)

    def adhoc_shell(self, pattern: str, command: str) -> Dict[str, dict]:
        """One ad-hoc shell command over ssh; {host: {status, rc, stdout}} (minimal callback)."""
        env = self.run_env()
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.minimal"
        argv = [os.path.join(ANSIBLE_BIN, "ansible"), "-i", self.inventory, pattern,
                "-m", "ansible.builtin.shell", "-a", command]
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, check=False)
        results = {}
        for m in re.finditer(r"^(\S+) \| (\w+) \| rc=(\d+) >>\n(.*?)(?=^\S+ \| \w+ \||\Z)",
                             proc.stdout, re.M | re.S):
            results[m.group(1)] = {"status": m.group(2), "rc": int(m.group(3)), "stdout": m.group(4).strip()}
        if not results:
            raise AssertionError("ansible shell gave no result (rc=%d)\n%s\n%s"
                                 % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
        return results

    def inside(self, host: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A command in the host's network, PID and mount namespaces (not through ssh)."""
        return subprocess.run([HARNESS, "exec", self.dir, "h%d" % self.index(host)] + list(argv),
                              capture_output=True, text=True, timeout=60, check=check)

    # -- observations --------------------------------------------------------------------------
    def record(self, host: str, name: str) -> Optional[dict]:
        path = os.path.join(self.state_dir(host), "%s.json" % name)
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            return json.load(fh)

    def alive(self, host: str, record: dict) -> bool:
        """The record's pid lives in that host's PID namespace and IS this launch (marker)."""
        proc = self.inside(host, "sh", "-c", "cat /proc/%d/stat && tr '\\0' '\\n' </proc/%d/environ"
                           % (record["pid"], record["pid"]), check=False)
        if proc.returncode != 0:
            return False
        state = proc.stdout.split(")", 1)[1].split()[0]
        return state != "Z" and ("LLMOPS_SGLANG_LAUNCH_ID=%s" % record["launch_id"]) in proc.stdout.splitlines()

    def instance_pids(self, host: str, name: str) -> List[int]:
        """Pids in the host carrying the instance marker LLMOPS_SGLANG_INSTANCE=<name>."""
        script = ('for p in /proc/[0-9]*; do tr "\\0" "\\n" <$p/environ 2>/dev/null '
                  '| grep -qx "LLMOPS_SGLANG_INSTANCE=%s" && echo ${p#/proc/}; done; true' % name)
        out = self.inside(host, "sh", "-c", script).stdout
        return [int(x) for x in out.split()]

    def health(self, host: str, port: int, path: str = "/health") -> Optional[int]:
        """HTTP status of http://<host's netns address>:port/path from the controller."""
        url = "http://%s:%d%s" % (self.addr(host), port, path)
        handler = urllib.request.ProxyHandler({})
        try:
            with urllib.request.build_opener(handler).open(url, timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def server_info(self, host: str, port: int) -> dict:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open("http://%s:%d/server_info" % (self.addr(host), port), timeout=5) as resp:
            return json.loads(resp.read())

    def ssh_sessions(self, host: str) -> List[int]:
        """Pids (in the host's namespace) of sshd session processes: children of its PID 1."""
        out = self.inside(host, "ps", "-o", "pid=,ppid=,args=", "-e").stdout
        pids = []
        for line in out.splitlines():
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[1] == "1" and parts[2].startswith("sshd: root@"):
                pids.append(int(parts[0]))
        return pids

    def end_ssh_sessions(self, host: str) -> List[int]:
        """Kill (by pid, inside the host) the ssh sessions left by the play (ControlPersist)."""
        pids = self.ssh_sessions(host)
        for pid in pids:
            self.inside(host, "kill", "-KILL", str(pid), check=False)
        return pids


class Run:
    def __init__(self, argv: List[str], proc: subprocess.CompletedProcess) -> None:
        self.argv = argv
        self.rc = proc.returncode
        self.out = proc.stdout + proc.stderr

    def recap(self) -> Dict[str, Dict[str, int]]:
        stats = {}
        for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", self.out, re.M):
            stats[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        return stats

    def explain(self) -> str:
        return "%s\nrc=%d\n...%s" % (" ".join(self.argv), self.rc, self.out[-6000:])


@pytest.fixture(scope="session")
def mh() -> Iterator[Hosts]:
    if os.geteuid() != 0:
        pytest.skip("the multi-host harness needs root (network namespaces, sshd)")
    directory = os.environ.get("LLMOPS_MH_DIR")
    created = False
    if not directory:
        proc = subprocess.run([HARNESS, "up", "--hosts", os.environ.get("MH_HOSTS", "3")],
                              capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError("harness up failed:\n%s" % proc.stderr)
        directory = proc.stdout.strip().splitlines()[-1]
        created = True
    try:
        yield Hosts(directory)
    finally:
        if created:
            subprocess.run([HARNESS, "down", directory], timeout=120, check=False)
