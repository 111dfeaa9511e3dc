"""Target selection rules over synthetic process snapshots (no process is signalled here)."""
from __future__ import annotations

import os
from typing import Dict, List, Optional

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK, describe_process
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import (
    InstanceFiles, OpenFiles, Scope, World, attribute, build_scope, protected_by, select,
    validate_gpus, validate_pattern)

UID = 1000
OWN_CMD = ["/venv/bin/python", "-m", "ansible_collections.llmops.sglang.plugins.modules.sglang_teardown", "/tmp/a.json"]


def P(pid: int, ppid: int, cmd: List[str], comm: Optional[str] = None, pgid: Optional[int] = None,
      sid: Optional[int] = None, uid: int = UID, state: str = "S", start: float = 1000.0) -> _procs.Proc:
    return _procs.Proc(pid=pid, ppid=ppid, pgid=pgid or pid, sid=sid or pid,
                       comm=comm or (os.path.basename(cmd[0])[:15] if cmd else "kworker"),
                       state=state, uid=uid, start_time=start, cmdline=cmd)


def world(procs: List[_procs.Proc], envs: Optional[Dict[int, Dict[str, str]]] = None,
          listeners: Optional[List[_ports.Listener]] = None, gpu: Optional[_gpus.GpuReport] = None,
          files: Optional[Dict[int, OpenFiles]] = None, instances: Optional[List[InstanceFiles]] = None,
          own: Optional[set] = None, holders: Optional[Dict[int, List[str]]] = None) -> World:
    envs = envs or {}
    files = files or {}
    return World(procs={p.pid: p for p in procs}, environ=lambda pid: envs.get(pid, {"PATH": "/bin"}),
                 listeners=listeners or [], gpu_report=gpu or _gpus.GpuReport("none", []),
                 device_holders=holders or {}, own_pids=own or {900, 901}, euid=UID,
                 files=lambda pid: files.get(pid, OpenFiles(None, [])), instances=instances or [])


def scope(**kw) -> Scope:
    base = dict(name=None, state_dir=None, ports=[], gpus=[], patterns=[], sglang_processes=True,
                all_users=False, protect=[], foreign_gpu_processes="fail", own_cmdlines=[" ".join(OWN_CMD)])
    base.update(kw)
    return build_scope(**base)


def marker(name: str, state_dir: str = "/state") -> Dict[str, str]:
    return {"LLMOPS_SGLANG_INSTANCE": name, "LLMOPS_SGLANG_STATE_DIR": state_dir}


# A host in the shape of the incident: ansible chain, a hand-started nohup server sharing its
# group with the shell, decoys that mention sglang, protected daemons, a kernel thread.
BASE = [
    P(1, 0, ["/sbin/init"], comm="systemd", uid=0),
    P(2, 0, [], comm="kthreadd", uid=0),
    P(3, 2, [], comm="kworker/0:0", uid=0),
    P(900, 1, ["/bin/bash", "-c", "python -m sglang.launch_server"], comm="bash"),   # own ancestor
    P(901, 900, OWN_CMD, comm="python"),
    P(100, 1, ["/bin/bash"], comm="bash"),
    P(110, 100, ["/venv/bin/python", "-m", "sglang.launch_server", "--port", "8000", "--api-key", "s3cret"],
      comm="python", pgid=100, sid=100),
    P(111, 110, ["sglang::scheduler_TP0"], comm="sglang::schedul", pgid=100, sid=100),
    P(112, 110, ["sglang::detokenizer"], comm="sglang::detoken", pgid=100, sid=100),
    P(120, 100, ["tail", "-f", "/logs/sglang.log"], comm="tail", pgid=120, sid=100),
    P(121, 100, ["vim", "sglang_notes.txt"], comm="vim", pgid=121, sid=100),
    P(130, 1, ["/usr/bin/nv-hostengine"], comm="nv-hostengine", uid=0),
    P(131, 1, ["/usr/sbin/sshd", "-D"], comm="sshd", uid=0),
]


def test_title_sweep_is_precise_and_descends_and_protects():
    sel = select(scope(), world(BASE))
    assert set(sel.targets) == {110, 111, 112}
    assert "command line: python -m sglang.launch_server" in sel.targets[110].reasons
    assert any(r.startswith("sglang process title") for r in sel.targets[111].reasons)
    assert "child of 110" in sel.targets[111].reasons
    # the module's own ancestor whose command line mentions sglang is spared, with why
    assert any(s["pid"] == 900 and "ancestors" in s["why_not"] for s in sel.spared) or 900 not in sel.targets
    # secrets never leave in clear
    assert "s3cret" not in sel.targets[110].to_dict()["cmdline"]


def test_named_scope_takes_unmarked_but_not_other_instances():
    procs = BASE + [
        P(200, 1, ["/venv/bin/python", "-m", "sglang.launch_server", "--port", "9000"], comm="python"),
        P(201, 200, ["sglang::scheduler_TP0"], comm="sglang::schedul", pgid=200),
        P(300, 1, ["/venv/bin/python", "-m", "sglang.launch_server", "--port", "9100"], comm="python"),
        P(301, 300, ["sglang::scheduler_TP0"], comm="sglang::schedul", pgid=300),
    ]
    envs = {200: marker("other"), 201: {}, 300: marker("mine"), 301: {}}
    sel = select(scope(name="mine", state_dir="/state"), world(procs, envs))
    assert {110, 111, 112, 300, 301} <= set(sel.targets)     # unmarked (incident) + own
    assert 200 not in sel.targets and 201 not in sel.targets  # env-less child inherits "other"
    assert {o["pid"] for o in sel.other_instances} == {200, 201}
    assert any("instance marker" in r for r in sel.targets[300].reasons)


def test_same_name_other_state_dir_is_another_instance():
    procs = [P(400, 1, ["/venv/bin/python", "-m", "sglang.launch_server"], comm="python")]
    sel = select(scope(name="mine", state_dir="/state", sglang_processes=False),
                 world(procs, {400: marker("mine", "/elsewhere")}))
    assert not sel.targets


def test_other_instance_on_managed_port_is_a_conflict_target():
    procs = [P(200, 1, ["/venv/bin/python", "-m", "sglang.launch_server"], comm="python"),
             P(201, 200, ["sglang::scheduler_TP0"], comm="sglang::schedul", pgid=200)]
    lis = [_ports.Listener(9000, "127.0.0.1", "ipv4", 1, [200])]
    sel = select(scope(name="mine", state_dir="/state", ports=[9000], sglang_processes=False),
                 world(procs, {200: marker("other"), 201: {}}, listeners=lis))
    assert set(sel.targets) == {200, 201}
    assert any("conflict on a managed port" in r for r in sel.targets[200].reasons)


def test_escaped_orphan_found_by_launch_files_not_by_tail():
    procs = [P(500, 1, ["sglang::tokenizer_worker:500"], comm="sglang::tokeniz", pgid=500, sid=500),
             P(501, 1, ["tail", "-f", "/logs/mine.log"], comm="tail"),
             P(502, 1, ["sglang::scheduler_TP0"], comm="sglang::schedul")]
    files = {500: OpenFiles("/state/mine.tmp", [(1, "/logs/mine.log", True), (2, "/logs/mine.log", True)]),
             501: OpenFiles("/home", [(3, "/logs/mine.log", False)]),
             502: OpenFiles("/state/other.tmp", [(1, "/logs/other.log", True)])}
    insts = [InstanceFiles("mine", "/logs/mine.log", "/state/mine.tmp"),
             InstanceFiles("other", "/logs/other.log", "/state/other.tmp")]
    w = world(procs, {500: {}, 501: {"PATH": "/bin"}, 502: {}}, files=files, instances=insts)
    sel = select(scope(name="mine", state_dir="/state", sglang_processes=False), w)
    assert set(sel.targets) == {500}
    assert any("launch log" in r for r in sel.targets[500].reasons)
    assert any("TMPDIR" in r for r in sel.targets[500].reasons)
    # and with the title sweep the other instance's orphan is still left alone
    sel = select(scope(name="mine", state_dir="/state"), w)
    assert set(sel.targets) == {500}
    assert attribute(scope(name="mine", state_dir="/state"), w)[502][:2] == ("other", "other")


def test_launch_record_pid_reuse_and_group_members():
    procs = [P(600, 1, ["/usr/bin/python3", "supervisor"], comm="python3", pgid=600, sid=600, start=2000.0),
             P(601, 600, ["/venv/bin/python", "-m", "sglang.launch_server"], pgid=600, sid=600, start=2000.5),
             P(602, 1, ["sleep", "100"], comm="sleep", pgid=600, sid=600, start=2001.0),   # reparented member
             P(603, 1, ["sleep", "100"], comm="sleep", pgid=603, sid=603, start=10.0)]
    record = {"pid": 601, "start_time": 2000.5, "supervisor_pid": 600, "supervisor_start_time": 2000.0,
              "pgid": 600, "sid": 600, "launched_at": 2000.0}
    sel = select(scope(name="mine", state_dir="/state", sglang_processes=False), world(procs), record)
    assert set(sel.targets) == {600, 601, 602}
    assert "launch record main process (pid 601)" in sel.targets[601].reasons
    assert any("process group 600" in r for r in sel.targets[602].reasons)
    # the main pid was reused by an older process: not a target, and said so
    record2 = dict(record, pid=603, start_time=5.0, pgid=None, sid=None, supervisor_pid=None)
    sel = select(scope(name="mine", state_dir="/state", sglang_processes=False), world(procs), record2)
    assert not sel.targets and any("reused" in n for n in sel.record_notes)


def test_other_users_are_spared_unless_all_users_and_port_conflict_fails():
    procs = [P(700, 1, ["/venv/bin/python", "-m", "sglang.launch_server"], comm="python", uid=2000)]
    lis = [_ports.Listener(9000, "::", "ipv6", 1, [700])]
    sel = select(scope(ports=[9000]), world(procs, listeners=lis))
    assert not sel.targets and sel.conflicts and "all_users is false" in sel.spared[0]["why_not"]
    sel = select(scope(ports=[9000], all_users=True), world(procs, listeners=lis))
    assert 700 in sel.targets and not sel.conflicts


def test_protect_conflicts_with_explicit_pattern():
    procs = [P(800, 1, ["/opt/bin/myagent", "--serve"], comm="myagent")]
    sel = select(scope(patterns=["myagent --serve"], protect=["myagent"], sglang_processes=False), world(procs))
    assert not sel.targets
    assert sel.conflicts and "myagent" in sel.conflicts[0] and "protect" in sel.conflicts[0]
    assert protected_by(P(1, 0, ["/usr/bin/dcgm-exporter"], comm="dcgm-exporter"), ["dcgm*"]) == "dcgm*"


def test_group_signal_only_when_whole_group_is_targets():
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown._teardown import signal_steps
    w = world(BASE)
    sel = select(scope(), w)
    steps = signal_steps(sel.targets, w.procs, w.own_pids)
    # the nohup server shares group 100 with the shell (a non-target): pids, not the group
    assert all(s.kind == "pid" for s in steps) and {s.ident for s in steps} == {110, 111, 112}
    procs = [P(10, 1, ["sglang::scheduler_TP0"], pgid=10), P(11, 10, ["sglang::detokenizer"], pgid=10)]
    w = world(procs)
    sel = select(scope(), w)
    steps = signal_steps(sel.targets, w.procs, w.own_pids)
    assert [(s.kind, s.ident) for s in steps] == [("group", 10)]


def _gpu(procs: Dict[int, int]) -> _gpus.GpuReport:
    return _gpus.GpuReport("nvml", [
        _gpus.Gpu(0, "GPU-0", "H200", 9000, 143000, [_gpus.GpuProcess(pid, mib) for pid, mib in procs.items()]),
        _gpus.Gpu(1, "GPU-1", "H200", 0, 143000, [])])


def test_gpu_users_foreign_fuser_view_and_kill_mode():
    procs = [P(10, 1, ["sglang::scheduler_TP0"], pgid=10), P(20, 1, ["/usr/bin/python3", "train.py"], comm="python3"),
             P(30, 1, ["/usr/bin/python3", "cuda_idle.py"], comm="python3")]
    w = world(procs, gpu=_gpu({10: 4096, 20: 8192}), holders={10: ["/dev/nvidia0"], 30: ["/dev/nvidiactl"]})
    sel = select(scope(gpus=None), w)
    assert set(sel.targets) == {10}
    assert any("compute process on managed GPU" in r for r in sel.targets[10].reasons)
    assert [(f["pid"], f["gpus"]) for f in sel.foreign_gpu] == [(20, {"0": 8.0})]
    assert [(d["pid"], d["target"]) for d in sel.device_file_holders] == [(30, False)]
    sel = select(scope(gpus=None, foreign_gpu_processes="kill"), w)
    assert set(sel.targets) == {10, 20} and not sel.foreign_gpu
    sel = select(scope(gpus=["1"]), w)     # GPU 1 holds nothing: nothing foreign
    assert not sel.foreign_gpu


@pytest.mark.parametrize("bad", ["", " ", ".", ".*", "a*", "(|x)", "x?", "^", "sglang", "[", "python"])
def test_bad_patterns_refused(bad):
    with pytest.raises(SglangError) as err:
        validate_pattern(bad, [" ".join(OWN_CMD)])
    assert err.value.details["reason"] == "bad_pattern"


@pytest.mark.parametrize("kw,reason", [
    (dict(ports=[0]), "bad_port"), (dict(ports=[70000]), "bad_port"), (dict(ports=["http"]), "bad_port"),
    (dict(gpus=["-1"]), "bad_gpus"), (dict(gpus=["x"]), "bad_gpus"), (dict(gpus=["\u00b2"]), "bad_gpus"),
    (dict(gpus=["\u0663"]), "bad_gpus"), (dict(gpus=["1\n"]), "bad_gpus"), (dict(name="../x"), "bad_name"),
    (dict(sglang_processes=False), "empty_scope"), (dict(protect=[""]), "bad_protect"),
    (dict(foreign_gpu_processes="maybe"), "bad_option"),
])
def test_bad_scope_inputs(kw, reason):
    with pytest.raises(SglangError) as err:
        scope(**kw)
    assert err.value.details["reason"] == reason


def test_kernel_threads_pid1_never_even_by_pattern():
    procs = [P(1, 0, ["/sbin/init", "zzunique"], comm="init", uid=UID), P(3, 2, [], comm="zzunique", uid=UID)]
    sel = select(scope(patterns=["zzunique"], sglang_processes=False), world(procs))
    assert not sel.targets


def test_group_and_session_ids_need_their_recorded_leader_or_the_launch_marker():
    procs = [P(600, 1, ["/usr/bin/python3", "supervisor"], comm="python3", pgid=600, sid=600, start=2000.0),
             P(602, 1, ["sleep", "100"], comm="sleep", pgid=600, sid=600, start=2001.0),
             P(603, 1, ["sleep", "100"], comm="sleep", pgid=600, sid=600, start=2001.0)]
    envs = {602: {"PATH": "/bin"}, 603: {"LLMOPS_SGLANG_LAUNCH_ID": "L1"}}
    record = {"launch_id": "L1", "pid": None, "supervisor_pid": 600, "supervisor_start_time": 2000.0,
              "pgid": 600, "sid": 600, "launched_at": 2000.0}
    sc = scope(name="mine", state_dir="/state", sglang_processes=False)
    # leader alive with its recorded start time: the ids count
    assert set(select(sc, world(procs, envs), record).targets) == {600, 602, 603}
    # leader reused (start time differs): only the member carrying this launch's marker
    sel = select(sc, world(procs, envs), dict(record, supervisor_start_time=1500.0))
    assert set(sel.targets) == {603} and any("leader" in n for n in sel.record_notes)
    # the launch's exit file exists: the ids count for nothing (the verified leader stays a target)
    sel = select(sc, world(procs, envs), record, exited=True)
    assert set(sel.targets) == {600} and any("exit file" in n for n in sel.record_notes)
    # a record pid without a start time is never taken (PID reuse cannot be ruled out)
    sel = select(sc, world(procs, envs), dict(record, supervisor_start_time=None, pgid=None, sid=None))
    assert not sel.targets


def test_launch_files_only_support_an_sglang_looking_process():
    procs = [P(500, 1, ["sglang::tokenizer_worker:500"], comm="sglang::tokeniz"),
             P(501, 1, ["/bin/bash"], comm="bash"),
             P(502, 501, ["make"], comm="make")]
    files = {pid: OpenFiles("/state/mine.tmp", [(1, "/logs/mine.log", True)]) for pid in (500, 501, 502)}
    insts = [InstanceFiles("mine", "/logs/mine.log", "/state/mine.tmp")]
    w = world(procs, {500: {}, 501: {"PATH": "/bin"}, 502: {"PATH": "/bin"}}, files=files, instances=insts)
    sel = select(scope(name="mine", state_dir="/state", sglang_processes=False), w)
    assert set(sel.targets) == {500}


def test_pid_2_in_a_pid_namespace_is_not_a_kernel_thread():
    from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import is_kernel_thread
    assert not is_kernel_thread(P(2, 1, ["/venv/bin/python", "-m", "sglang.launch_server"], comm="python"))
    assert is_kernel_thread(P(2, 0, [], comm="kthreadd")) and is_kernel_thread(P(77, 2, [], comm="kworker/1:1"))
    assert is_kernel_thread(_procs.Proc(pid=9, ppid=5, pgid=0, sid=0, comm="x", state="S", uid=0, start_time=1.0,
                                        kthread=True))


def test_other_pid_namespace_never_a_target_unless_the_record_names_it():
    procs = [P(10, 1, ["/venv/bin/python", "-m", "sglang.launch_server"], comm="python", start=3000.0),
             P(11, 10, ["sglang::scheduler_TP0"], comm="sglang::schedul", start=3000.5),
             P(20, 1, ["/venv/bin/python", "-m", "sglang.launch_server"], comm="python", start=3000.0),
             P(21, 20, ["sleep", "1"], comm="sleep", start=3000.5)]
    w = world(procs)
    w.own_pidns = "pid:[1]"
    w.pidns = {10: "pid:[2]", 11: "pid:[2]", 20: "pid:[1]", 21: "pid:[2]"}.get
    sel = select(scope(), w)
    assert set(sel.targets) == {20}
    assert {o["pid"] for o in sel.other_namespaces} == {10, 11, 21}
    assert all(o["pid_namespace"] for o in sel.other_namespaces) and not sel.spared
    record = {"pid": 10, "start_time": 3000.0}
    sel = select(scope(name="mine", state_dir="/state", sglang_processes=False), w, record)
    assert set(sel.targets) == {10}          # named by the record; its container child is not
    assert {o["pid"] for o in sel.other_namespaces} == {11}


@pytest.mark.parametrize("bad", ["\u00b2", "\u0663", "1\u00b2", "\uff11", "1\n", "-1", "1.0", "", True])
def test_gpu_indexes_are_ascii_digits_only(bad):
    # str.isdigit accepts superscripts and other scripts' digits: "\u00b2" ended in int() raising
    # (internal_error) and "\u0663" was silently read as GPU 3.
    with pytest.raises(SglangError) as err:
        validate_gpus([bad])
    assert err.value.details["reason"] == "bad_gpus" and repr(bad) in err.value.msg


def test_gpu_indexes_ascii():
    assert validate_gpus([3, "1", " 2 ", 1]) == [1, 2, 3] and validate_gpus(None) is None


SECRET = "zzSECRETzz"


@pytest.mark.parametrize("argv", [
    ["srv --api-key %s --port 1" % SECRET],                       # one-string title (setproctitle)
    ["srv --token=%s" % SECRET],
    ["/venv/bin/python", "-m", "srv", "--hf-token", SECRET],
    ["/venv/bin/python", "-m", "srv", "--token", SECRET],
])
def test_process_descriptions_mask_secrets_in_titles_and_token_flags(argv):
    target = P(50, 1, argv + ["zzdesc"], comm="python")
    other = P(51, 1, argv + ["zzdesc"], comm="python", uid=0)      # another user's: spared
    sel = select(scope(patterns=["zzdesc"], sglang_processes=False), world([target, other]))
    assert set(sel.targets) == {50} and [s["pid"] for s in sel.spared] == [51]
    shown = [sel.targets[50].to_dict()["cmdline"], sel.spared[0]["cmdline"], describe_process(target)["cmdline"]]
    for text in shown:
        assert SECRET not in text and MASK in text, text
    assert describe_process(P(52, 2, [], comm="kworker/0:1"))["cmdline"] == "[kworker/0:1]"
    # a target is described by the same describer, with what a teardown signals it by
    assert set(sel.targets[50].to_dict()) == {"pid", "name", "user", "cmdline", "pgid", "sid", "start_time",
                                              "reasons"}
