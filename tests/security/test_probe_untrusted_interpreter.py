"""The probe never suggests an interpreter another user can replace.

When the asked python lacks sglang, the probe points at what this host's instances run with. If
another user's process runs `<their dir>/venv/bin/python -m sglang.launch_server`, suggesting
that venv to root would have root run a file that user controls. Such an interpreter is listed
apart, as owned by that user and not suggested.
"""
from __future__ import annotations

import os
import subprocess
from typing import Any, Dict

import pytest


SYSTEM_PYTHON = "/usr/bin/python3"
FAKE_SERVER = '''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), H).serve_forever()
'''

pytestmark = pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no system python")


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def _chown_tree(root: str, uid: int, gid: int) -> None:
    for base, dirs, files in os.walk(root):
        for name in [base] + [os.path.join(base, n) for n in dirs + files]:
            os.lchown(name, uid, gid)


@pytest.fixture
def their_venv(shared_tmp, throwaway_user) -> Dict[str, Any]:
    """A venv (fake sglang 0.0.1 whose launch_server just listens) in the other user's own directory."""
    home = os.path.join(shared_tmp, "home")
    venv = os.path.join(home, "venv")
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print('python%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    site = os.path.join(venv, "lib", version, "site-packages")
    _write(os.path.join(venv, "pyvenv.cfg"), "home = /usr/bin\ninclude-system-site-packages = false\n")
    _write(os.path.join(site, "sglang", "__init__.py"), "")
    _write(os.path.join(site, "sglang", "launch_server.py"), FAKE_SERVER)
    _write(os.path.join(site, "sglang-0.0.1.dist-info", "METADATA"), "Name: sglang\nVersion: 0.0.1\n\n")
    os.makedirs(os.path.join(venv, "bin"))
    os.symlink(SYSTEM_PYTHON, os.path.join(venv, "bin", "python"))
    _chown_tree(home, throwaway_user.uid, throwaway_user.gid)
    return {"python": os.path.join(venv, "bin", "python"), "venv": venv, "user": throwaway_user}


# In a private PID namespace (so that only this server is running there): the other user's
# server, then the probe, whose result is the last line.
IN_NAMESPACE = r"""
import json, subprocess, sys
from helpers.fixtures import free_port, run_module, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
python, uid, gid, state_dir, shm_dir = sys.argv[1:6]
port = free_port()
server = subprocess.Popen(["setpriv", "--reuid=" + uid, "--regid=" + gid, "--clear-groups", "--", python, "-m",
                           "sglang.launch_server", "--model-path", "m", "--port", str(port)], cwd="/",
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if not wait_for(lambda: bool(_ports.listeners([port])), 15):
    print(json.dumps({"error": "the other user's fake server did not listen"}))
    sys.exit(1)
res = run_module("sglang_probe", {"python": "/usr/bin/python3", "search_paths": [], "gpu_backend": "none",
                                  "state_dir": state_dir, "shm_dir": shm_dir})
server.kill()
print(json.dumps(res))
"""


def test_another_users_venv_is_never_suggested(their_venv, tmp_path, pidns):
    user = their_venv["user"]
    ran = pidns(IN_NAMESPACE, their_venv["python"], str(user.uid), str(user.gid), str(tmp_path / "state"),
                str(tmp_path / "shm"))
    res = ran.data
    assert ran.rc == 0 and res and res.get("_rc") == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert not res["interpreter"]["sglang_installed"]
    theirs = their_venv["python"]
    # it is seen (a running server, an install) ...
    assert [s["interpreter"]["cmdline"] for s in res["servers"]] == [theirs], res["servers"]
    # ... but never offered: not as the suggestion, not in a sentence other than the warning
    assert "suggested_interpreter" not in res, res["suggested_interpreter"]
    offered = [d for d in res["diagnosis"] if theirs in d and "not suggested" not in d]
    assert offered == [], res["diagnosis"]
    listed = [n for n in res["not_suggested"] if n["python"] == theirs]
    assert listed and "owned by user %s" % user.name in listed[0]["why"], res["not_suggested"]
    assert any(theirs in d and "owned by user %s" % user.name in d and "not suggested" in d
               for d in res["diagnosis"]), res["diagnosis"]
    install = [i for i in res["interpreters"] if i.get("python") == theirs]
    assert install and install[0]["trusted"] is False, res["interpreters"]
