"""The probe's process table on a busy host: every process is listed with its command line only;
parent, name, state, group, uid and environment are read only for processes that can be sglang
(their command line or name says so, python processes for the instance marker, the processes
below a main). Live processes of this test only (children started here, killed here); nothing is
signalled by the code under test."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Dict, Iterator, List, Set

import psutil
import pytest

from helpers.fixtures import wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _discovery
from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

SLEEPERS = 40


@pytest.fixture
def sleepers() -> Iterator[List[int]]:
    """SLEEPERS idle `sleep` processes in one new process group (killed by that group)."""
    script = "for i in $(seq %d); do sleep 600 & done; echo started; exec sleep 600" % SLEEPERS
    group = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    assert group.stdout is not None
    group.stdout.readline()
    try:
        pids = [c.pid for c in psutil.Process(group.pid).children()] + [group.pid]
        yield pids
    finally:
        os.killpg(group.pid, signal.SIGKILL)
        group.wait()


@pytest.fixture
def fake_server(tmp_path) -> Iterator[Dict[str, int]]:
    """`python -m sglang.launch_server` (a stand-in package in tmp_path) with a titled child
    (`sglang::scheduler_TP0` as argv[0]) and a plain `sleep` grandchild below that child."""
    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(textwrap.dedent("""
        import os, subprocess, sys, time
        child = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 bash -c 'sleep 600 & wait'"])
        print(child.pid, flush=True)
        time.sleep(600)
    """))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    main = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--port", "1"], stdout=subprocess.PIPE,
                            env=env, start_new_session=True)
    assert main.stdout is not None
    child = int(main.stdout.readline())
    deadline = time.monotonic() + 10
    grandchild = []
    while not grandchild and time.monotonic() < deadline:
        grandchild = [p.pid for p in psutil.Process(child).children() if p.name() == "sleep"]
        time.sleep(0.05)
    assert grandchild, "the stand-in server's sleep did not start"
    try:
        yield {"main": main.pid, "child": child, "grandchild": grandchild[0]}
    finally:
        os.killpg(main.pid, signal.SIGKILL)
        main.wait()


def _count_row_reads(monkeypatch) -> Set[int]:
    """The pids whose parent, name, state or uid psutil's platform layer (or getpgid) read."""
    asked: Set[int] = set()
    platform = psutil._psplatform.Process  # pylint: disable=protected-access
    for name in ("ppid", "status", "uids", "name"):
        real = getattr(platform, name)

        def wrapper(self, *a, _real=real, **kw):
            asked.add(self.pid)
            return _real(self, *a, **kw)
        monkeypatch.setattr(platform, name, wrapper)
    real_getpgid = os.getpgid

    def getpgid(pid: int) -> int:
        asked.add(pid)
        return real_getpgid(pid)
    monkeypatch.setattr(os, "getpgid", getpgid)
    return asked


def test_probe_table_reads_only_the_command_line_of_other_processes(monkeypatch, sleepers):
    asked = _count_row_reads(monkeypatch)
    procs, _servers = _probe.processes()
    assert set(sleepers) <= set(procs)
    assert all(procs[pid].cmdline[:1] in (["sleep"], ["bash"]) for pid in sleepers)
    read = sorted(set(sleepers) & asked)
    assert read == [], "rows read in full for processes that cannot be sglang: %s" % read


def test_a_live_servers_members_include_every_descendant(fake_server):
    procs = _procs.snapshot()
    servers = [s for s in _discovery.find_servers(procs, with_ports=False) if s.main is not None
               and s.main.pid == fake_server["main"]]
    assert len(servers) == 1
    members = {m.proc.pid: m.role for m in servers[0].members}
    assert members == {fake_server["main"]: "main", fake_server["child"]: "scheduler",
                       fake_server["grandchild"]: "other"}
    row = procs[fake_server["grandchild"]]
    assert row.ppid == fake_server["child"] and row.comm == "sleep" and row.state == "S"
    assert row.pgid == fake_server["main"] and row.sid == fake_server["main"] and row.uid == os.geteuid()


def test_members_without_psutils_one_pass_parent_map(monkeypatch, fake_server):
    """psutil's one-pass parent map is not a public name: without it each main's
    children(recursive=True) gives the same members."""
    monkeypatch.setattr(_procs, "_ONE_PASS_PARENTS", "_no_such_reader")
    procs = _procs.snapshot()
    servers = [s for s in _discovery.find_servers(procs, with_ports=False) if s.main is not None
               and s.main.pid == fake_server["main"]]
    assert len(servers) == 1
    assert sorted(m.proc.pid for m in servers[0].members) == sorted(fake_server.values())


def test_a_row_whose_process_exited_reads_as_gone():
    child = subprocess.Popen(["sleep", "600"])
    try:
        # the snapshot must see it as sleep: right after fork it may still be this interpreter
        # (or between exec's halves, with no command line yet)
        assert wait_for(lambda: open("/proc/%d/cmdline" % child.pid, "rb").read() == b"sleep\x00600\x00", 10)
        procs = _procs.snapshot()
    finally:
        child.kill()
        child.wait()
    row = procs[child.pid]
    assert row.cmdline == ["sleep", "600"]
    assert row.state == "X" and row.is_zombie and row.uid == -1 and row.pgid == 0


def _params(tmp_path, **kw) -> Dict[str, object]:
    p: Dict[str, object] = dict(venv=None, python=sys.executable, search_paths=[str(tmp_path / "none")],
                                introspect=False, flags=None, detail=False, introspect_timeout=30, ports=None,
                                api_key=None, server_user=None, http_timeout=5, gpu_backend="none",
                                shm_dir=str(tmp_path), state_dir=str(tmp_path / "state"))
    p.update(kw)
    return p


def test_the_interpreter_answers_while_the_table_is_read(monkeypatch, tmp_path):
    """The asked interpreter's probe is a process of its own: it is started before the process
    table is read and collected afterwards, not waited for first."""
    me = psutil.Process()
    before = {c.pid for c in me.children()}
    running: List[int] = []
    real = _probe.processes

    def processes():
        running.extend(c.pid for c in me.children() if c.pid not in before)
        return real()
    monkeypatch.setattr(_probe, "processes", processes)
    result, failure = _probe.run(_params(tmp_path), lambda msg: None)
    assert failure is None
    assert result["interpreter"]["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert running, "the interpreter was asked only after the process table"
    assert not [c for c in me.children() if c.pid in running], "the interpreter's probe was not reaped"


def test_a_bad_interpreter_still_fails_after_the_table(tmp_path):
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    script.chmod(0o755)
    result, failure = _probe.run(_params(tmp_path, python=str(script)), lambda msg: None)
    assert failure is not None and failure.details["reason"] == "python_failed" and "broken" in failure.msg
    assert result["interpreter"] is None and isinstance(result["servers"], list)


def test_a_plain_probe_compiles_neither_the_flag_reader_nor_the_port_reader():
    """Modules are compiled from source on every run (AnsiballZ ships no bytecode): the flag
    reader (_flagcheck, _introspect) is imported only for flags/introspect, the port reader
    (_ports) only when there are servers or ports to look at."""
    from helpers.fixtures import COLLECTIONS

    code = ("import sys\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _discovery\n"
            "print(sorted(m.rsplit('.', 1)[-1] for m in sys.modules if m.rsplit('.', 1)[-1] in "
            "('_flagcheck', '_introspect', '_ports')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# Runs as PID 1 of a private PID namespace (a pattern and title sweep sees only what it started):
# the teardown's plan over idle processes that nothing selects.
_PLAN = r"""
import json, os, signal, subprocess, sys
import psutil
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope

sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(20)]
asked = set()
platform = psutil._psplatform.Process
for name in ("ppid", "status", "name"):
    real = getattr(platform, name)
    def wrapper(self, *a, _real=real, **kw):
        asked.add(self.pid)
        return _real(self, *a, **kw)
    setattr(platform, name, wrapper)
scope = build_scope(None, None, [], [], ["zz-nothing-matches"], True, False, [], "fail", [])
plan = _teardown.make_plan(scope, _teardown.Options(shm_cleanup=False, gpu_backend="none"))
print(json.dumps({"targets": sorted(plan.targets), "read": sorted(asked & {s.pid for s in sleepers})}))
"""


def test_teardown_discovery_reads_no_state_or_parent_of_unselected_processes():
    from helpers.fixtures import COLLECTIONS

    if os.geteuid() != 0:
        pytest.skip("a private PID namespace needs root")
    out = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c", _PLAN],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=COLLECTIONS),
                         stdin=subprocess.DEVNULL, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data == {"targets": [], "read": []}


def test_the_process_layer_parses_no_proc_stat_status_or_net_tcp_by_hand():
    """psutil reads those; by hand only what it has no API for (fd links, namespaces, maps).
    One exception: _ports reads /proc/net/tcp{,6} itself, because psutil's net_connections maps
    sockets to pids by reading every fd on the host (another user's million fds would stretch
    every port question: tests/security/test_teardown_port_scan_bounded.py)."""
    import ast
    import inspect

    from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _portowner
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _shm
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _targets

    for module in (_procs, _discovery, _probe, _targets, _shm, _gpus, _ports, _portowner):
        tree = ast.parse(inspect.getsource(module))
        docs = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        paths = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and id(n) not in docs and any(p in n.value for p in ("/stat", "/status", "net/tcp"))
                 and not (module is _ports and "net/tcp" in n.value)]
        assert paths == [], "%s reads %s by hand" % (module.__name__, paths)
