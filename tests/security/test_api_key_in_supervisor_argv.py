"""The API key reaches the server's command line (sglang needs it there) and nothing else.

The supervisor used to carry the whole server command line, key included, in its own argv: a
second process showing the key to every local user in `ps`. It now gets the server's argv
through a pipe on its stdin.
"""
from __future__ import annotations

import os

from _launchsec import kill_session, sleeper, spec
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from helpers.fixtures import wait_for

KEY = "sk-sec-7d41c0ffee9b"


def _raw(pid: int, what: str) -> bytes:
    with open("/proc/%d/%s" % (pid, what), "rb") as fh:
        return fh.read()


def test_supervisor_argv_and_environment_hold_no_key(tmp_path):
    state = str(tmp_path / "state")
    rec = _launcher.spawn(spec(state, str(tmp_path / "logs"), sleeper("--api-key", KEY), secrets=[KEY]))
    try:
        sup, server = rec["supervisor_pid"], rec["pid"]
        assert KEY.encode() in _raw(server, "cmdline")  # the server still gets it
        assert KEY.encode() not in _raw(sup, "cmdline")
        assert KEY.encode() not in _raw(sup, "environ")
        assert KEY not in " ".join(_procs.read_proc(sup).cmdline)
        # The server's stdin is /dev/null again, not the pipe the supervisor read its argv from.
        assert wait_for(lambda: os.readlink("/proc/%d/fd/0" % server) == "/dev/null", 10)
        for root, _dirs, files in os.walk(state):
            for name in files:
                with open(os.path.join(root, name), "rb") as fh:
                    assert KEY.encode() not in fh.read(), name
    finally:
        kill_session(rec["sid"])
