"""_diagnosis: each rule produces one specific sentence naming what it is about."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _diagnosis as G


def member(pid, role="scheduler", ppid=10, orphaned=False, state="S", title="sglang::scheduler_TP0"):
    return {"pid": pid, "ppid": ppid, "role": role, "orphaned": orphaned, "state": state, "cmdline": [title]}


def test_age():
    assert G.age(0) == "0 seconds"
    assert G.age(3725) == "1 hour 2 minutes"
    assert G.age(2 * 86400 + 3 * 3600 + 59) == "2 days 3 hours"
    assert G.age(None) == "an unknown time"


def test_interpreter_lacks_sglang_names_the_other_install():
    interp = {"path": "/usr/bin/python3", "sglang_installed": False}
    out = G.interpreter(interp, [{"python": "/root/ml-env/bin/python", "sglang_version": "0.5.23"}])
    assert out == ["python /usr/bin/python3 has no sglang, but /root/ml-env/bin/python has 0.5.23: "
                   "use venv/python to point at it"]
    assert "no other sglang install" in G.interpreter(interp, [])[0]
    assert G.interpreter({"path": "/x", "sglang_installed": True}, []) == []


def test_servers_log_level_orphans_dead_main_and_d_state():
    servers = [
        {"id": "10", "pid": 10, "main": True, "args": {"log_level": "warning"}, "start_time": 0,
         "members": [member(10, "main", 1), member(12, ppid=1, orphaned=True), member(13, state="D")]},
        {"id": "orphans-sid-5", "pid": None, "main": False, "args": {}, "start_time": 100.0, "user": "bob",
         "members": [member(20, ppid=1, orphaned=True)]},
    ]
    out = G.servers(servers, now=3700.0)
    assert any("--log-level warning" in s and "ready line" in s for s in out)
    assert any("pid 12" in s and "init (pid 1)" in s for s in out)
    assert any("D state" in s and "pid 13" in s for s in out)
    assert any("no main server process" in s and "1 hour" in s and "bob" in s and "20" in s for s in out)


def test_every_level_the_readiness_wait_calls_quiet_is_named():
    """The probe's sentence and the readiness wait judge the level by the same rule
    (_logpatterns.is_quiet_level): `fatal` and `warn` hide the ready line too."""
    for level, named in (("fatal", True), ("warn", True), ("ERROR", True), ("info", False), ("debug", False)):
        server = {"id": "10", "pid": 10, "main": True, "args": {"log_level": level}, "start_time": 0,
                  "members": [member(10, "main", 1)]}
        out = G.servers([server], now=1.0)
        assert any("ready line" in s for s in out) is named, level


def test_ports_holder_sentences():
    srv = {"id": "10", "pid": 10, "main": True, "user": "root", "start_time": 0.0, "instance": "ext",
           "argv": ["/v/bin/python", "-m", "sglang.launch_server", "--port", "8000"], "pids": [10]}
    reports = [
        {"port": 8000, "listeners": [{"port": 8000}], "server": "10", "holders": []},
        {"port": 8001, "listeners": [{"port": 8001}], "server": None,
         "holders": [{"pid": 7, "user": "alice", "cmdline": ["nc", "-l", "8001"]}], "error": "HTTP 404"},
        {"port": 8002, "listeners": [], "server": None, "holders": []},
    ]
    out = G.ports(reports, {"10": srv}, now=2 * 86400.0)
    assert out[0].startswith("port 8000 is held by sglang server pid 10 (instance ext) of user root, started 2 days ago")
    assert "--port 8000" in out[0]
    assert "port 8001 is held by pid 7 (user alice), not an sglang server: nc -l 8001" in out
    assert "port 8001: HTTP 404" in out
    assert "nothing listens on port 8002 (IPv4 or IPv6)" in out


def test_gpus_foreign_only():
    report = {"gpus": [{"index": 1, "processes": [
        {"pid": 5, "used_mib": 4096, "owner": "foreign", "user": "bob", "cmdline": ["python", "train.py"]},
        {"pid": 6, "used_mib": 1024, "owner": "sglang"}]}]}
    assert G.gpus(report) == ["GPU 1 holds 4.0 GiB for a foreign process: pid 5 (user bob): python train.py"]


def test_shm_leaks():
    entries = [{"path": "/dev/shm/psm_1", "size": 2 * 1024 ** 3, "held": False},
               {"path": "/dev/shm/sgl_shm_x", "size": 5, "held": True}]
    assert G.shm(entries) == ["1 leaked shared-memory segment(s) (2.00 GiB) held by no live process: psm_1"]
    assert G.shm(entries[1:]) == []


def test_flags_absent():
    assert G.flags(["--nope"], "0.5.6") == ["flag --nope does not exist in sglang 0.5.6"]


def test_holder_command_lines_are_masked_in_sentences():
    reports = [{"port": 8000, "listeners": [{"port": 8000}], "server": None,
                "holders": [{"pid": 7, "user": "bob", "cmdline": ["srv --api-key s3cretvalue", "--token", "tok3n"]}]}]
    out = G.ports(reports, {})
    assert out and "s3cretvalue" not in out[0] and "tok3n" not in out[0] and "pid 7 (user bob)" in out[0]


def test_interpreter_names_the_venv_the_running_instance_uses_not_any_install():
    interp = {"path": "/usr/bin/python3", "sglang_installed": False}
    use = [{"python": "/root/ml-env/bin/python", "venv": "/root/ml-env", "sglang_version": "0.5.23",
            "source": "the running instance 'serving' (pid 42)"}]
    out = G.interpreter(interp, [{"python": "/opt/old/bin/python", "sglang_version": "0.5.6"}], use)
    assert out == ["python /usr/bin/python3 has no sglang; the running instance 'serving' (pid 42) uses "
                   "/root/ml-env/bin/python (sglang 0.5.23): use venv: /root/ml-env"]
    bare = dict(use[0], venv=None, sglang_version=None)
    assert G.suggestion(bare).endswith("uses /root/ml-env/bin/python: use python: /root/ml-env/bin/python")


def test_flags_did_you_mean_and_rejected_values():
    answers = {"reasoning-parsr": {"exists": False, "accepted": False, "did_you_mean": ["--reasoning-parser"]},
               "tool-call-parser": {"exists": True, "accepted": False, "flag": "--tool-call-parser",
                                    "answer": "no: sglang 0.5.23 --tool-call-parser does not accept 'x'"},
               "tp-size": {"exists": True, "accepted": True, "flag": "--tp-size", "answer": "yes: ..."}}
    out = G.flags(["reasoning-parsr"], "0.5.23", answers)
    assert out == ["flag reasoning-parsr does not exist in sglang 0.5.23; did you mean --reasoning-parser?",
                   "sglang 0.5.23 --tool-call-parser does not accept 'x'"]


def test_dependencies_sentence():
    assert G.dependencies([], "/usr/bin/python3", None) == []
    named = G.dependencies(["psutil"], "/usr/bin/python3", "/root/ml-env/bin/python")
    assert named == ["python /usr/bin/python3 (running this module) cannot import psutil: rerun with "
                     "`-e ansible_python_interpreter=/root/ml-env/bin/python`"]
    assert "no interpreter on this host" in G.dependencies(["psutil", "requests"], "/usr/bin/python3", None)[0]


def test_untrusted_installs_are_never_named_as_advice_and_are_listed_apart():
    interp = {"path": "/usr/bin/python3", "sglang_installed": False}
    theirs = {"python": "/home/bob/env/bin/python", "sglang_version": "0.5.23", "trusted": False}
    ours = {"python": "/opt/ml/bin/python", "sglang_version": "0.5.22", "trusted": True}
    assert G.interpreter(interp, [theirs, ours]) == [
        "python /usr/bin/python3 has no sglang, but /opt/ml/bin/python has 0.5.22: use venv/python to point at it"]
    only = G.interpreter(interp, [theirs])
    assert "/home/bob" not in only[0] and "not suggested" in only[0]
    lines = G.not_suggested([{"python": "/home/bob/env/bin/python", "sglang_version": "0.5.23",
                              "source": "the running sglang server pid 7 (user bob)",
                              "why": "owned by user bob (/home/bob)"}], "root")
    assert lines == ["python /home/bob/env/bin/python (sglang 0.5.23, the running sglang server pid 7 (user bob)) "
                     "is owned by user bob (/home/bob) - not suggested: only interpreters that nobody but root "
                     "or user root can replace are named"]
