"""A setuid program that another user starts under an sglang title never receives the probe's key.

The attack: an unprivileged user opens a listening socket, then execs a setuid-root binary
(/usr/bin/passwd, waiting at its prompt on a terminal) with argv[0] `sglang::scheduler_TP0`,
the socket inherited. The process now has the effective uid of root and the title of an sglang
rank, and it is the only holder of the port: root's probe took it for root's own sglang server
and sent the api_key into a socket the attacker opened. A holder counts as the server user's
only when its real, effective and saved uids are all that user's and its executable is neither
setuid nor setgid; and an sglang title alone (no command-line main process, no launch record)
never counts.
"""
from __future__ import annotations

import json
import os
import pty
import signal
import sys
import time
from typing import Dict, Iterator, List, Tuple

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from helpers.fixtures import free_port, run_module, wait_for

SECRET = "setuid-lookalike-key-0c9d2e"
PASSWD = "/usr/bin/passwd"
TITLE = "sglang::scheduler_TP0"
# Runs as the throwaway user: bind, listen, then become the setuid program with the socket.
ATTACKER = r"""
import os, socket, sys
port, exe, title = int(sys.argv[1]), sys.argv[2], sys.argv[3]
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", port))
sock.listen(16)
os.set_inheritable(sock.fileno(), True)
os.execv(exe, [title])
"""


def _setuid_root(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == 0 and bool(st.st_mode & 0o4000)


pytestmark = pytest.mark.skipif(not _setuid_root(PASSWD), reason="needs a setuid-root %s" % PASSWD)


def _python3() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _connections(port: int) -> List[Tuple[str, int]]:
    """(state, receive queue bytes) of every non-listening TCP socket on local port `port`: a
    request sent to the listener sits in such a socket's receive queue."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if int(local.rsplit(":", 1)[1], 16) == port and state != "0A":  # 0A: LISTEN
                out.append((state, int(queues.split(":")[1], 16)))
    return out


@pytest.fixture
def setuid_lookalike(throwaway_user) -> Iterator[Dict]:
    """The attacker's setuid process on a terminal (so it waits at its prompt), holding the port."""
    port = free_port()
    pid, master = pty.fork()
    if pid == 0:  # the child: become the throwaway user, then the attacker script
        try:
            argv = throwaway_user.argv([_python3(), "-c", ATTACKER, str(port), PASSWD, TITLE])
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    try:
        def holding() -> bool:
            socks = _ports.listeners([port])
            return bool(socks) and pid in socks[0].pids and os.readlink("/proc/%d/exe" % pid) == PASSWD
        assert wait_for(holding, 15), "the setuid lookalike did not come up"
        yield {"pid": pid, "port": port, "user": throwaway_user}
    finally:
        os.kill(pid, signal.SIGKILL)  # runs as root now: only root (this test) can end it
        os.waitpid(pid, 0)
        os.close(master)


def test_a_setuid_program_under_an_sglang_title_gets_no_key(setuid_lookalike, tmp_path):
    pid, port = setuid_lookalike["pid"], setuid_lookalike["port"]
    with open("/proc/%d/status" % pid) as fh:
        uids = next(line.split()[1:] for line in fh if line.startswith("Uid:"))
    assert uids[1] == "0" and uids[0] == str(setuid_lookalike["user"].uid)  # effective root, real attacker

    res = run_module("sglang_probe", {"ports": [port], "api_key": SECRET, "http_timeout": 2,
                                      "state_dir": str(tmp_path / "state"), "gpu_backend": "none",
                                      "shm_dir": str(tmp_path / "shm"), "search_paths": [], "detail": True})
    assert res["_rc"] == 0, res
    rep = res["ports"][0]
    assert rep["api_key_sent"] is False and "api_key was not sent" in rep["error"], rep
    assert "pid %d" % pid in rep["error"]
    time.sleep(0.2)  # a connection made by the probe would show here at once; none must exist
    assert _connections(port) == [], _connections(port)
    assert SECRET not in json.dumps(res)
