"""_probe_report: the probe's short report and each server's state."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe_report as R


def server(**kw):
    base = {"id": "10", "pid": 10, "main": True, "port": 8000, "listening_ports": [8000], "user": "root",
            "instance": "serving", "args": {"model_path": "/models/m", "tp_size": "8"},
            "argv": ["/venv/bin/python", "-m", "sglang.launch_server"], "env": {"NCCL_PROTO": "Simple"},
            "interpreter": {"cmdline": "/venv/bin/python", "exe": "/usr/bin/python3.11", "venv": "/venv"},
            "members": [{"pid": 10, "role": "main", "rank": None, "state": "S", "orphaned": False,
                         "cmdline": ["/venv/bin/python"], "ppid": 1}]}
    base.update(kw)
    return base


def test_server_states():
    assert R.server_state(server()) == "listening"
    assert R.server_state(server(), answered=True) == "answering"
    assert R.server_state(server(listening_ports=[])) == "not_listening"
    assert R.server_state(server(main=False)) == "leftover"
    stopped = server(members=[{"pid": 10, "role": "main", "state": "T"}])
    assert R.server_state(stopped, answered=True) == "stopped"


def test_with_states_uses_the_answered_ports_and_names_model_and_tp():
    servers = [server(), server(id="20", pid=20, port=9000, listening_ports=[9000])]
    R.with_states(servers, [{"server": "10", "reachable": True}, {"server": "20", "reachable": False}])
    assert [s["state"] for s in servers] == ["answering", "listening"]
    assert servers[0]["model_path"] == "/models/m" and servers[0]["tp_size"] == "8"


def test_shorten_keeps_the_answers_and_drops_the_bulk():
    full = {"changed": False, "servers": [dict(server(), state="listening", model_path="/models/m", tp_size="8")],
            "ports": [{"port": 8000, "listening": True, "server": "10", "holders": [], "reachable": True,
                       "version": "0.5.23", "error": None, "api_key_sent": False, "listeners": [{}],
                       "server_info": {"model_path": "/models/m", "tp_size": 8, "huge": "x" * 100}}],
            "flags": {"--tp-size": {"option_strings": ["--tp-size"], "dest": "tp_size", "type": "int", "default": 1,
                                    "choices": None, "required": False, "help": "TP", "metavar": None}},
            "shm": [{"path": "/dev/shm/psm_1"}], "diagnosis": ["x"], "unavailable": []}
    short = R.shorten(full)
    assert "shm" not in short and short["diagnosis"] == ["x"] and short["unavailable"] == []
    (srv,) = short["servers"]
    assert "env" not in srv and "argv" not in srv and srv["interpreter"] == {"cmdline": "/venv/bin/python", "venv": "/venv"}
    assert srv["members"] == [{"pid": 10, "role": "main", "rank": None, "state": "S", "orphaned": False}]
    (port,) = short["ports"]
    assert "server_info" not in port and port["model_path"] == "/models/m" and port["tp_size"] == 8
    assert short["flags"] == {"--tp-size": {"type": "int", "default": 1, "choices": None, "required": False, "help": "TP"}}
    assert "shm" in full and "env" in full["servers"][0]  # the full result is left as it was
