"""sglang-router titles its process `sglang::router` (setproctitle in
sglang_router.launch_router), the prefix of sglang's own server titles. The router is not an
sglang server: a teardown's title sweep (sglang_processes, on by default) must not stop it, and
the probe must not count it as a server process. Synthetic snapshots; nothing is signalled."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _discovery
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from unit.test_targets import BASE, P, scope, select, world

ROUTER = 700


def router(argv: bool = True) -> _procs.Proc:
    """The router as the process table shows it: argv[0] is the title (setproctitle also sets
    comm); its environment reads empty (setproctitle overwrote it)."""
    return P(ROUTER, 1, ["sglang::router"] if argv else [], comm="sglang::router")


def test_the_router_title_is_not_an_sglang_server_process() -> None:
    assert _procs.sglang_reason(router()) is None
    assert _procs.sglang_reason(router(argv=False)) is None
    # the server titles still are, and the router package's own server launcher too
    assert _procs.sglang_reason(P(1, 0, ["sglang::scheduler_TP0"]))
    assert _procs.sglang_reason(P(1, 0, ["sglang::server"]))
    assert _procs.sglang_reason(P(1, 0, [], comm="sglang::detoken"))


def test_a_title_sweep_leaves_the_router_on_the_host_alone() -> None:
    for proc in (router(), router(argv=False)):
        w = world(BASE + [proc], envs={ROUTER: {}})
        for named in ({}, {"name": "qwen", "state_dir": "/state"}):
            sel = select(scope(**named), w)
            assert ROUTER not in sel.targets, sel.targets[ROUTER].reasons
        # the sweep itself still works: the hand-started server of BASE is selected
        assert 110 in select(scope(name="qwen", state_dir="/state"), w).targets


def test_the_probe_does_not_count_the_router_as_a_server(monkeypatch) -> None:
    monkeypatch.setattr(_procs, "read_environ", lambda pid: {})  # no real process is read
    procs = {p.pid: p for p in BASE + [router()]}
    servers = _discovery.find_servers(procs, with_ports=False)
    assert all(ROUTER not in s.pids for s in servers), [s.pids for s in servers]
