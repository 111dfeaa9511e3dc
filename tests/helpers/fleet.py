"""A local serving fleet behind the real sglang-router, for the fleet tests and the router benchmark.

N emulated workers, each an inventory host of its own (local connection, own instance name, port,
state and log dirs, all under one work dir), launched and rolled by the collection's playbooks,
and a real `sglang_router.launch_router` (from .venv-router, made by scripts/router_venv.sh) on
a free loopback port. Everything started here is killed by what it started (process group of
the router, launch records of the workers), never by name.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

import requests

from helpers.fixtures import ROOT, TEST_MARKER, TEST_RUN_ID, free_port

ROUTER_VERSION = "0.3.2"
MODEL_DIR = os.path.join(ROOT, "inventory", "files", "demo-model")  # local: the router never goes to a hub
PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")


def router_python(version: str = ROUTER_VERSION) -> str:
    """The venv's interpreter with sglang-router `version`, created by scripts/router_venv.sh."""
    venv = os.path.join(ROOT, ".venv-router" if version == ROUTER_VERSION else ".venv-router-%s" % version)
    env = dict(os.environ, SGLANG_ROUTER_VERSION=version)
    subprocess.run([os.path.join(ROOT, "scripts", "router_venv.sh"), venv], env=env, check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=600)
    return os.path.join(venv, "bin", "python")


class _MetricsPortTaken(RuntimeError):
    """The router could not bind its metrics port: another process took it first."""


class Fleet:
    def __init__(self, workdir: str, size: int = 3, token_delay: float = 0.05, phase_seconds: float = 0.2,
                 tp_size: int = 1, extra_host_vars: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
        self.workdir = workdir
        self.tag = uuid.uuid4().hex[:6]
        self.hosts = ["w%d" % (i + 1) for i in range(size)]
        self.ports = {h: free_port() for h in self.hosts}
        self.router_port = free_port()
        self.token_delay = token_delay
        self.phase_seconds = phase_seconds
        self.tp_size = tp_size
        self.extra_host_vars = extra_host_vars or {}
        self.router: Optional[subprocess.Popen] = None
        os.makedirs(workdir, exist_ok=True)
        self.inventory = self.write_inventory()

    # -- names ----------------------------------------------------------------------------------
    @property
    def router_url(self) -> str:
        return "http://127.0.0.1:%d" % self.router_port

    def worker_url(self, host: str) -> str:
        return "http://127.0.0.1:%d" % self.ports[host]

    def state_dir(self, host: str) -> str:
        return os.path.join(self.workdir, host, "state")

    def name(self, host: str) -> str:
        return "fleet-%s-%s" % (self.tag, host)

    # -- inventory ------------------------------------------------------------------------------
    def interpreter(self) -> str:
        """The controller venv's python; from a checkout whose path has a space, a wrapper without
        one: ansible-core runs an async task's interpreter (the roll's background prewarm) through
        /bin/sh unquoted (docs/limits.md)."""
        python = os.path.join(ROOT, ".venv", "bin", "python")
        if " " not in python:
            return python
        home = self.workdir if " " not in self.workdir else tempfile.mkdtemp(prefix="fleet-python-")
        os.makedirs(home, exist_ok=True)
        wrapper = os.path.join(home, "python")
        with open(wrapper, "w") as fh:
            fh.write("#!/bin/sh\nexec '%s' \"$@\"\n" % python.replace("'", "'\\''"))
        os.chmod(wrapper, 0o755)
        return wrapper

    def write_inventory(self, path: Optional[str] = None, **overrides: Any) -> str:
        hosts: Dict[str, Any] = {}
        for h in self.hosts:
            hostvars = {"sglang_port": self.ports[h], "sglang_name": self.name(h),
                        "sglang_state_dir": self.state_dir(h),
                        "sglang_log_dir": os.path.join(self.workdir, h, "logs"),
                        "sglang_worker_url": self.worker_url(h)}
            hostvars.update(self.extra_host_vars.get(h, {}))
            hosts[h] = hostvars
        group_vars: Dict[str, Any] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": self.interpreter(),
            "sglang_venv": os.path.join(ROOT, ".venv-emulator"),
            "sglang_model_path": MODEL_DIR,
            "sglang_host": "127.0.0.1",
            "sglang_tp_size": self.tp_size,
            "sglang_keep_logs": 2,
            "sglang_startup_timeout": 180,
            "sglang_grace_period": 10,
            "sglang_stop_timeout": 30,
            "sglang_gpu_backend": "none",
            "sglang_gpu_check": False,
            "sglang_managed_gpus": [],
            "sglang_sweep_sglang_processes": False,
            "sglang_args": {"enable-metrics": True},
            "sglang_env": {"SGLANG_EMULATOR_PHASE_SECONDS": str(self.phase_seconds),
                           "SGLANG_EMULATOR_TOKEN_DELAY": str(self.token_delay),
                           "no_proxy": "127.0.0.1,localhost", TEST_MARKER: TEST_RUN_ID},
            "sglang_router_url": self.router_url,
            "sglang_drain_timeout": 120,
            "sglang_drain_settle": 1,
            "sglang_drain_poll_interval": 0.25,
            "sglang_router_timeout": 120,
        }
        group_vars.update(overrides)
        inventory = {"all": {"children": {"fleet": {"hosts": hosts, "vars": group_vars}}}}
        path = path or os.path.join(self.workdir, "inventory.json")
        with open(path, "w") as fh:
            json.dump(inventory, fh, indent=1)  # JSON is YAML: ansible reads it as an inventory
        return path

    # -- playbooks ------------------------------------------------------------------------------
    def play(self, playbook: str, extra: Optional[Dict[str, Any]] = None, inventory: Optional[str] = None,
             timeout: float = 900, check: bool = False) -> subprocess.CompletedProcess:
        argv = [PLAYBOOK, "-i", inventory or self.inventory, os.path.join(ROOT, "playbooks", playbook),
                "-e", json.dumps(dict({"sglang_hosts": "fleet"}, **(extra or {})))]
        if check:
            argv += ["--check", "--diff"]
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=os.path.join(self.workdir, "ansible-tmp"),
                   ANSIBLE_REMOTE_TEMP=os.path.join(self.workdir, "ansible-tmp"))
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)

    def up(self) -> subprocess.CompletedProcess:
        """Every worker at once, exactly as restart_fleet.yml describes them (serving mode)."""
        return self.play("restart_serving.yml", {"sglang_serial": "100%"})

    def down(self) -> subprocess.CompletedProcess:
        return self.play("teardown.yml")

    # -- the router -----------------------------------------------------------------------------
    def start_router(self, python: str, urls: Optional[List[str]] = None, extra: Optional[List[str]] = None,
                     timeout: float = 60) -> subprocess.Popen:
        """The router on router_port with `urls`, once it has them all. Its metrics port is another
        free port: one that another process took between free_port() and the router's bind (the
        router then panics, "failed to install Prometheus metrics exporter ... Address already in
        use") is replaced by a fresh one, twice at most."""
        for attempt in range(3):
            try:
                return self._start_router(python, urls, extra, timeout)
            except _MetricsPortTaken:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start_router(self, python: str, urls: Optional[List[str]], extra: Optional[List[str]],
                      timeout: float) -> subprocess.Popen:
        urls = [self.worker_url(h) for h in self.hosts] if urls is None else urls
        argv = [python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                "--port", str(self.router_port), "--policy", "round_robin",
                "--prometheus-port", str(free_port()), "--log-level", "warn"]
        if urls:
            argv += ["--worker-urls"] + urls
        log_path = os.path.join(self.workdir, "router.log")
        log = open(log_path, "ab")
        offset = log.tell()
        env = dict(os.environ, no_proxy="*", NO_PROXY="*")
        env[TEST_MARKER] = TEST_RUN_ID
        self.router = subprocess.Popen(argv + list(extra or []), stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.router.poll() is not None:
                with open(log_path, "rb") as fh:
                    fh.seek(offset)
                    said = fh.read().decode("utf-8", "replace")
                if "Prometheus metrics exporter" in said and "Address already in use" in said:
                    self.router = None
                    raise _MetricsPortTaken(said)
                raise RuntimeError("router exited %s: see %s/router.log" % (self.router.returncode, self.workdir))
            try:
                ready = requests.get(self.router_url + "/readiness", timeout=2, proxies={"http": None}).json()
                if int(ready.get("healthy_workers", 0)) >= len(urls):
                    return self.router
            except (requests.exceptions.RequestException, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError("router not ready with %d workers after %.0f s" % (len(urls), timeout))

    def stop_router(self) -> None:
        if self.router is None:
            return
        try:
            os.killpg(self.router.pid, signal.SIGKILL)
        except OSError:
            pass
        self.router.wait(timeout=10)
        self.router = None

    def router_workers(self) -> List[Dict[str, Any]]:
        session = requests.Session()
        session.trust_env = False
        return list(session.get(self.router_url + "/workers", timeout=5).json()["workers"])

    def assert_serving(self) -> None:
        """Every worker in the router and healthy: where a test of a shared fleet starts (an
        earlier test that failed may have left one out: then this one cannot start)."""
        routed = self.router_workers()
        assert sorted(w["url"] for w in routed) == sorted(self.worker_url(h) for h in self.hosts) \
            and all(w["is_healthy"] for w in routed), "the shared fleet does not serve: %s" % routed

    # -- the workers ----------------------------------------------------------------------------
    def record(self, host: str) -> Dict[str, Any]:
        with open(os.path.join(self.state_dir(host), "%s.json" % self.name(host))) as fh:
            return dict(json.load(fh))

    def pids(self) -> Dict[str, int]:
        return {h: int(self.record(h)["pid"]) for h in self.hosts}


@contextmanager
def routed(fleet: Fleet, router_py: Optional[str] = None) -> Iterator[Fleet]:
    """The fleet up (restart_serving.yml, all at once) behind a router that has every worker;
    the router stopped and the workers torn down on the way out, whatever happened."""
    try:
        up = fleet.up()
        assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
        fleet.start_router(router_py or router_python())
        yield fleet
    finally:
        fleet.stop_router()
        fleet.down()


def recap(out: str) -> Dict[str, Dict[str, int]]:
    """{host: {ok, changed, failed, ...}} from the PLAY RECAP lines (the last one per host)."""
    found: Dict[str, Dict[str, int]] = {}
    for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", out, re.M):
        found[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return found
