"""sglang_probe answers the question asked: a short report by default (interpreters, servers with
their state, the diagnosis), everything with detail: true; a flag question gets a yes or no; a
broken interpreter is pointed at the venv the running instance uses.

The probes that look at running servers run in a private PID namespace with only the server the
test starts (helpers.bare_python.run_in_private_pidns), so what they find is that server."""
from __future__ import annotations

import os

from helpers.bare_python import run_in_private_pidns
from helpers.fixtures import controller_python, free_port, run_module

INSTANCE = "probe-report"


def _venv(emulator_python: str) -> str:
    return os.path.dirname(os.path.dirname(emulator_python))


def _server(emulator_python: str, port: int, tmp_path, *extra: str) -> dict:
    return {"argv": [emulator_python, "-m", "sglang.launch_server", "--model-path", "org/model", "--port", str(port),
                     "--tp-size", "2"] + list(extra),
            "env": {"PATH": os.environ["PATH"], "SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "NCCL_PROTO": "Simple",
                    "LLMOPS_SGLANG_INSTANCE": INSTANCE},
            "port": port, "log": str(tmp_path / "server.log")}


def _args(tmp_path, **kw) -> dict:
    base = {"state_dir": str(tmp_path / "state"), "gpu_backend": "none", "shm_dir": str(tmp_path / "shm")}
    base.update(kw)
    return base


def test_default_is_the_short_report_and_detail_has_everything(emulator_python, tmp_path):
    port = free_port()
    server = _server(emulator_python, port, tmp_path)
    short = run_in_private_pidns(controller_python(), "sglang_probe", _args(tmp_path, ports=[port]), server=server)
    assert short["_rc"] == 0, short
    (srv,) = short["servers"]
    assert srv["state"] == "answering" and srv["instance"] == INSTANCE and srv["port"] == port
    assert srv["model_path"] == "org/model" and srv["tp_size"] == "2"
    assert set(srv) == {"id", "pid", "main", "state", "instance", "user", "age_seconds", "port", "listening_ports",
                        "model_path", "tp_size", "interpreter", "pids", "members", "orphaned", "containment",
                        "cgroup", "unit"}
    assert srv["containment"] is None  # started by hand: no launch record
    assert all(set(m) == {"pid", "role", "rank", "state", "orphaned"} for m in srv["members"])
    assert "shm" not in short and "argv" not in srv and "env" not in srv
    (rep,) = short["ports"]
    assert rep["reachable"] and rep["server"] == srv["id"] and rep["model_path"] == "org/model"
    assert "server_info" not in rep and "model_info" not in rep
    assert short["unavailable"] == [] and "diagnosis" in short and "interpreters" in short

    full = run_in_private_pidns(controller_python(), "sglang_probe", _args(tmp_path, ports=[port], detail=True),
                                server=_server(emulator_python, free_port(), tmp_path))
    (srv,) = full["servers"]
    assert srv["env"]["NCCL_PROTO"] == "Simple" and srv["env_hidden"] is False
    assert srv["argv"][0] == emulator_python and srv["args"]["tp_size"] == "2"
    assert srv["state"] == "listening"  # its port was not among the asked ones
    assert full["shm"] == [] and "cmdline" in srv["members"][0]


def test_a_server_that_never_binds_is_not_listening(emulator_python, tmp_path):
    port = free_port()
    server = dict(_server(emulator_python, port, tmp_path), settle=1.5)
    server["env"]["SGLANG_EMULATOR_FAULT"] = "hang"  # ranks stop while loading: the port is never bound
    res = run_in_private_pidns(controller_python(), "sglang_probe", _args(tmp_path, ports=[port]), server=server)
    (srv,) = res["servers"]
    assert srv["state"] == "not_listening" and srv["listening_ports"] == [], srv
    assert res["ports"][0]["listening"] is False


def test_flag_questions_get_yes_or_no_choices_and_did_you_mean(emulator_python, tmp_path):
    venv = _venv(emulator_python)
    yes = run_module("sglang_probe", _args(tmp_path, venv=venv, flags={"reasoning-parser": "kimi_k2", "tp-size": 2}))
    assert yes["_rc"] == 0 and yes["accepted"] is True, yes
    ans = yes["flag_answers"]["reasoning-parser"]
    assert ans["accepted"] is True and ans["flag"] == "--reasoning-parser" and "kimi_k2" in ans["choices"]
    assert ans["answer"].startswith("yes: sglang 0.5.23")
    assert yes["flag_answers"]["tp-size"]["accepted"] is True

    no = run_module("sglang_probe", _args(tmp_path, venv=venv, flags={"reasoning-parser": "kimi-k2",
                                                                      "reasoning-parsr": "kimi_k2"}))
    assert no["_rc"] == 0 and no["accepted"] is False, no
    value = no["flag_answers"]["reasoning-parser"]
    assert value["accepted"] is False and value["did_you_mean"][0] == "kimi_k2" and "kimi_k2" in value["choices"]
    name = no["flag_answers"]["reasoning-parsr"]
    assert name["exists"] is False and name["did_you_mean"] == ["--reasoning-parser"]
    assert any("does not accept 'kimi-k2'; did you mean kimi_k2" in d for d in no["diagnosis"]), no["diagnosis"]
    assert any("reasoning-parsr does not exist" in d and "did you mean --reasoning-parser?" in d
               for d in no["diagnosis"])

    adhoc = run_module("sglang_probe", _args(tmp_path, venv=venv, flags="reasoning-parser=qwen3,tp-size"))
    assert adhoc["accepted"] is True and set(adhoc["flag_answers"]) == {"reasoning-parser", "tp-size"}
    # flags that are neither a list nor a string: tests/unit/modules/test_sglang_probe.yaml (in-process)


def _fake_install(root, version: str) -> str:
    """An sglang install found by metadata (never running): what the old probe suggested too."""
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "sglang").mkdir(parents=True)
    (site / ("sglang-%s.dist-info" % version)).mkdir()
    (site / ("sglang-%s.dist-info" % version) / "METADATA").write_text("Name: sglang\nVersion: %s\n\n" % version)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(os.path.realpath(controller_python()))
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return str(root)


def test_a_python_without_sglang_is_pointed_at_the_running_instances_venv(emulator_python, nosglang_venv, tmp_path):
    other = _fake_install(tmp_path / "old-env", "0.5.6")
    port = free_port()
    res = run_in_private_pidns(controller_python(), "sglang_probe",
                               _args(tmp_path, venv=nosglang_venv, search_paths=[other + "/"]),
                               server=_server(emulator_python, port, tmp_path))
    assert res["_rc"] == 0, res
    venv = _venv(emulator_python)
    (sentence,) = [d for d in res["diagnosis"] if "has no sglang" in d]
    assert sentence == ("python %s/bin/python has no sglang; the running instance '%s' (pid %s) uses %s/bin/python "
                        "(sglang 0.5.23+emulator): use venv: %s"
                        % (nosglang_venv, INSTANCE, res["servers"][0]["pid"], venv, venv)), sentence
    assert other not in sentence  # an install nobody runs is not the suggestion
    assert res["suggested_interpreter"]["venv"] == venv


def test_a_broken_venv_fails_naming_the_running_instances_venv(emulator_python, tmp_path):
    res = run_in_private_pidns(controller_python(), "sglang_probe",
                               _args(tmp_path, venv=str(tmp_path / "gone-env")),
                               server=_server(emulator_python, free_port(), tmp_path))
    assert res.get("failed") is True and res["reason"] == "venv_missing", res
    venv = _venv(emulator_python)
    assert res["msg"].startswith("venv %s does not exist; the running instance '%s'" % (tmp_path / "gone-env", INSTANCE))
    assert res["msg"].endswith("use venv: %s" % venv)
    assert res["servers"] and res["suggested_interpreter"]["venv"] == venv
