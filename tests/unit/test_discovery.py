"""_discovery: grouping a synthetic process table into servers (no real processes needed)."""
from __future__ import annotations

import os
from typing import Dict, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _discovery as D
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host._procs import Proc

BASE = 4_000_000  # above pid_max: never a real process
VENV_PY = "/root/ml-env/bin/python"


def P(pid: int, ppid: int, argv: List[str], pgid: int = 0, sid: int = 0, comm: str = "python", state: str = "S") -> Proc:
    return Proc(pid=BASE + pid, ppid=(BASE + ppid) if ppid > 1 else ppid, pgid=BASE + (pgid or pid),
                sid=BASE + (sid or pid), comm=comm, state=state, uid=0, start_time=1000.0 + pid, cmdline=argv)


def table(*procs: Proc) -> Dict[int, Proc]:
    return {p.pid: p for p in procs}


@pytest.fixture
def environs(monkeypatch):
    envs: Dict[int, Dict[str, str]] = {}
    monkeypatch.setattr(_procs, "read_environ", envs.get)
    return envs


def server_tp2(main_ppid: int = 1) -> List[Proc]:
    main = [VENV_PY, "-m", "sglang.launch_server", "--model-path", "m", "--port", "8000", "--tp-size", "2",
            "--api-key", "s3cret", "--log-level", "warning"]
    return [
        P(10, main_ppid, main, pgid=10, sid=10),
        P(11, 10, [VENV_PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(5)"], 10, 10),
        P(12, 10, ["sglang::scheduler_TP0"], 10, 10, comm="sglang::schedul"),
        P(13, 10, ["sglang::scheduler_TP1"], 10, 10, comm="sglang::schedul"),
        P(14, 10, ["sglang::detokenizer"], 10, 10, comm="sglang::detoken"),
    ]


def test_groups_main_ranks_detokenizer_and_tracker(environs):
    procs = table(*server_tp2(), P(99, 1, ["tail", "-f", "sglang.log"]), P(98, 1, ["bash"]))
    environs[BASE + 10] = {"LLMOPS_SGLANG_INSTANCE": "extract", "LLMOPS_SGLANG_LAUNCH_ID": "abc",
                           "NCCL_PROTO": "Simple", "CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "hf_x",
                           "HOME": "/root"}
    servers = D.find_servers(procs, with_ports=False)
    assert len(servers) == 1
    s = servers[0].to_dict(now=2010.0)
    assert s["pid"] == BASE + 10 and s["main"] and s["instance"] == "extract" and s["launch_id"] == "abc"
    roles = {m["pid"] - BASE: m["role"] for m in s["members"]}
    assert roles == {10: "main", 11: "resource_tracker", 12: "scheduler", 13: "scheduler", 14: "detokenizer"}
    ranks = {m["pid"] - BASE: m["rank"] for m in s["members"]}
    assert ranks[12] == "TP0" and ranks[13] == "TP1"
    assert s["orphaned"] == [] and s["port"] == 8000 and s["age_seconds"] == 1000.0
    assert s["args"]["tp_size"] == "2" and s["args"]["api_key"] == "********"
    assert "s3cret" not in str(s)
    assert s["env"] == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "********", "LLMOPS_SGLANG_INSTANCE": "extract",
                        "LLMOPS_SGLANG_LAUNCH_ID": "abc", "NCCL_PROTO": "Simple"}
    assert s["interpreter"]["cmdline"] == VENV_PY


def test_escaped_rank_is_grouped_and_marked_orphaned(environs):
    procs = server_tp2()
    procs[3] = P(13, 1, ["sglang::scheduler_TP1"], 10, 10)  # reparented to init, same group
    servers = D.find_servers(table(*procs), with_ports=False)
    assert len(servers) == 1
    assert servers[0].to_dict()["orphaned"] == [BASE + 13]


def test_escaped_rank_in_new_session_grouped_by_launch_id(environs):
    procs = server_tp2()
    procs[3] = P(13, 1, ["sglang::scheduler_TP1"], 13, 13)
    environs[BASE + 10] = {"LLMOPS_SGLANG_INSTANCE": "a", "LLMOPS_SGLANG_LAUNCH_ID": "L1"}
    environs[BASE + 13] = {"LLMOPS_SGLANG_INSTANCE": "a", "LLMOPS_SGLANG_LAUNCH_ID": "L1"}
    servers = D.find_servers(table(*procs), with_ports=False)
    assert len(servers) == 1 and BASE + 13 in servers[0].pids


def test_leftovers_without_main_form_their_own_server(environs):
    procs = table(P(12, 1, ["sglang::scheduler_DP0_TP0_EP0"], 10, 10), P(13, 1, ["sglang::scheduler_DP1_TP1_EP1"], 10, 10),
                  P(14, 1, [], 10, 10, comm="sglang::detoken"))
    servers = D.find_servers(procs, with_ports=False)
    assert len(servers) == 1
    s = servers[0].to_dict()
    assert s["main"] is False and s["pid"] is None and s["id"].startswith("orphans-")
    assert sorted(s["orphaned"]) == [BASE + 12, BASE + 13, BASE + 14]
    assert {m["rank"] for m in s["members"]} >= {"DP0_TP0_EP0", "DP1_TP1_EP1"}


def test_two_servers_and_zombies_and_supervisor(environs):
    a = server_tp2(main_ppid=50)
    sup = P(50, 1, ["/usr/bin/python3", "-c", "supervisor"], 50, 50)
    b = [P(20, 1, ["/opt/env/bin/sglang", "serve", "--model-path", "x", "--port=9000"], 20, 20),
         P(21, 20, ["sglang::scheduler_TP0"], 20, 20)]
    zombie = P(30, 1, [], 30, 30, comm="sglang::schedul", state="Z")
    environs[BASE + 50] = {"LLMOPS_SGLANG_LAUNCH_ID": "L", "LLMOPS_SGLANG_INSTANCE": "i"}
    environs[BASE + 10] = {"LLMOPS_SGLANG_LAUNCH_ID": "L", "LLMOPS_SGLANG_INSTANCE": "i"}
    servers = {s.id: s.to_dict() for s in D.find_servers(table(*a, sup, *b, zombie), with_ports=False)}
    assert set(servers) == {str(BASE + 10), str(BASE + 20)}
    assert servers[str(BASE + 20)]["port"] == 9000
    roles = {m["role"] for m in servers[str(BASE + 10)]["members"]}
    assert "supervisor" in roles


def test_marked_stray_process_is_reported(environs):
    environs[BASE + 60] = {"LLMOPS_SGLANG_INSTANCE": "gone", "LLMOPS_SGLANG_LAUNCH_ID": "Z"}
    servers = D.find_servers(table(P(60, 1, ["/usr/bin/python3", "-c", "x"])), with_ports=False)
    assert len(servers) == 1 and servers[0].members[0].role == "marked"
    assert servers[0].to_dict()["instance"] == "gone"


def test_parse_args_forms():
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--port=1", "--trust-remote-code", "--x", "y"]
    assert D.parse_args(argv) == {"model_path": "m", "port": "1", "trust_remote_code": True, "x": "y"}
    assert D.parse_args(["sglang", "serve", "--enable-metrics"]) == {"enable_metrics": True}


def test_role_of_truncated_comm():
    assert D.role_of(P(1, 0, [], comm="sglang::schedul")) == "scheduler"
    assert D.role_of(P(1, 0, ["sglang::tokenizer_worker:123"])) == "tokenizer_worker"
    assert D.role_of(P(1, 0, ["sglang::data_parallel_controller"])) == "data_parallel_controller"
    assert D.role_of(P(1, 0, ["sglang::something_new"])) == "something_new"


# --- who may receive an api key ---------------------------------------------------------------

def _sock(*pids: int):
    from ansible_collections.llmops.sglang.plugins.module_utils._host._ports import Listener
    return [Listener(8000, "127.0.0.1", "ipv4", 1, [BASE + p for p in pids])]


@pytest.fixture
def identities(monkeypatch):
    """The real/effective/saved uids and executable of the synthetic pids (default: wholly root's
    venv python, not setuid); a test changes one entry to play an impostor."""
    facts: Dict[int, D.Identity] = {}

    def identity(pid: int):
        return facts.get(pid, D.Identity((0, 0, 0), VENV_PY, 0o100755))

    monkeypatch.setattr(D, "identity", identity)
    return facts


def test_credentials_go_only_to_a_recognised_server_of_the_user(environs, monkeypatch, identities):
    servers = D.find_servers(table(*server_tp2()), with_ports=False)
    root = _procs.username(0)
    assert D.credential_refusal(servers, _sock(10), root) is None
    # an escaped worker of the same server holding the socket too is still that server
    assert D.credential_refusal(servers, _sock(10, 12), root) is None
    assert "sglang server of user %s, not of alice" % root in D.credential_refusal(servers, _sock(10), "alice")


def test_a_setuid_program_or_another_users_uids_get_no_credentials(environs, identities):
    """A rank whose effective uid is the server user's is not enough: another user's setuid
    program has that effective uid (real and saved uids differ), or runs a setuid executable."""
    servers = D.find_servers(table(*server_tp2()), with_ports=False)
    root = _procs.username(0)
    identities[BASE + 12] = D.Identity((1234, 0, 0), "/usr/bin/passwd", 0o104755)
    why = D.credential_refusal(servers, _sock(10, 12), root)
    assert why is not None and "pid %d runs with real/effective/saved uids 1234/0/0" % (BASE + 12) in why
    identities[BASE + 12] = D.Identity((0, 0, 1234), VENV_PY, 0o100755)
    assert "uids 0/0/1234" in D.credential_refusal(servers, _sock(12), root)
    identities[BASE + 12] = D.Identity((0, 0, 0), "/usr/bin/su", 0o104755)
    assert "setuid/setgid program /usr/bin/su" in D.credential_refusal(servers, _sock(12), root)
    identities[BASE + 12] = D.Identity((0, 0, 0), "/usr/bin/wall", 0o102755)
    assert "setuid/setgid program /usr/bin/wall" in D.credential_refusal(servers, _sock(12), root)
    del identities[BASE + 12]
    assert D.credential_refusal(servers, _sock(10, 12), root) is None


def test_unreadable_identity_gets_no_credentials(environs, monkeypatch):
    servers = D.find_servers(table(*server_tp2()), with_ports=False)
    monkeypatch.setattr(D, "identity", lambda pid: None)
    assert "cannot be read" in D.credential_refusal(servers, _sock(10), _procs.username(0))


def test_a_title_alone_gets_no_credentials_unless_a_launch_record_ties_it(environs, identities):
    """An sglang title with no command-line main process is free for anyone to take; a leftover
    rank of a recorded launch (its marker names the record's launch id) still counts."""
    stray = P(30, 1, ["sglang::scheduler_TP0"], comm="passwd")
    servers = D.find_servers(table(stray), with_ports=False)
    assert len(servers) == 1 and servers[0].main is None
    root = _procs.username(0)
    why = D.credential_refusal(servers, _sock(30), root)
    assert why is not None and "only looks like an sglang process" in why and "sglang::scheduler_TP0" in why
    assert "only looks like" in D.credential_refusal(servers, _sock(30), root, launch_ids=["L-other"])
    environs[BASE + 30] = {"LLMOPS_SGLANG_INSTANCE": "a", "LLMOPS_SGLANG_LAUNCH_ID": "L1"}
    marked = D.find_servers(table(stray), with_ports=False)
    assert D.credential_refusal(marked, _sock(30), root) is not None
    assert D.credential_refusal(marked, _sock(30), root, launch_ids=["L1"]) is None


def test_an_unknown_server_user_gets_no_credentials(environs, identities):
    servers = D.find_servers(table(*server_tp2()), with_ports=False)
    assert "not of no-such-user-llmops-x" in D.credential_refusal(servers, _sock(10), "no-such-user-llmops-x")


def test_identity_of_a_real_process():
    import sys
    ident = D.identity(os.getpid())
    assert ident is not None and ident.uids == (os.getuid(), os.geteuid(), os.getresuid()[2])
    assert ident.exe == os.path.realpath(sys.executable) and not ident.mode & 0o6000
    assert D.identity(BASE + 99) is None


def test_no_credentials_for_a_plain_or_invisible_listener(environs, monkeypatch):
    servers = D.find_servers(table(*server_tp2()), with_ports=False)
    plain = P(50, 1, ["python3", "-m", "http.server", "8000", "--api-key", "s3cret"])
    monkeypatch.setattr(_procs, "read_proc", lambda pid: plain if pid == plain.pid else None)
    why = D.credential_refusal(servers, _sock(50), _procs.username(0))
    assert why.startswith("pid %d (user " % plain.pid) and "not an sglang server" in why
    assert "s3cret" not in why and "http.server" in why
    assert "not visible" in D.credential_refusal(servers, _sock(), _procs.username(0))
    assert D.credential_refusal(servers, [], _procs.username(0)) == "nothing listens there"


def test_member_command_lines_are_masked_also_inside_titles(environs):
    procs = server_tp2()
    procs.append(P(20, 10, ["sglang::tokenizer_worker --api-key s3cret"], 10, 10))
    servers = D.find_servers(table(*procs), with_ports=False)
    text = repr([s.to_dict(0) for s in servers])
    assert "s3cret" not in text and "********" in text


def test_another_users_server_environment_is_never_shown(environs):
    """Root can read every environment; the probe shows only its own user's (or server_user's)."""
    theirs = [P(60, 1, [VENV_PY, "-m", "sglang.launch_server", "--model-path", "m", "--port", "8100"])]
    theirs[0].uid = 4321
    environs[theirs[0].pid] = {"NCCL_PROTO": "Simple", "LLMOPS_SGLANG_INSTANCE": "bob-inst"}
    mine = server_tp2()
    environs[mine[0].pid] = {"NCCL_PROTO": "LL"}
    servers = {s.id: s for s in D.find_servers(table(*theirs, *mine), with_ports=False)}
    bob = servers[str(BASE + 60)].to_dict(0)
    assert bob["env"] is None and bob["env_hidden"] is True
    assert bob["instance"] == "bob-inst"  # the launch marker still identifies it
    own = servers[str(BASE + 10)].to_dict(0)
    assert own["env"] == {"NCCL_PROTO": "LL"} and own["env_hidden"] is False
    shown = servers[str(BASE + 60)].to_dict(0, env_users=[_procs.username(4321)])
    assert shown["env"] == {"LLMOPS_SGLANG_INSTANCE": "bob-inst", "NCCL_PROTO": "Simple"}
