"""sglang_probe never shows another user's server environment, not even with detail: true.

Root can read every process's environment (tokens, proxies, paths of other users); the probe
reports such a server (user, pid, ports, state) but its environment only for servers of the
user the module runs as."""
from __future__ import annotations

import json
import os
import sys

from helpers.fixtures import run_module, wait_for

SLEEPER = "import time\ntime.sleep(120)\n"
PRIVATE = "bobs-private-value-7d1e"


def _python3() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def test_another_users_server_env_is_hidden_even_with_detail(shared_tmp, throwaway_user, tmp_path):
    os.mkdir(os.path.join(shared_tmp, "sglang"), 0o755)
    for name, text in (("__init__.py", ""), ("launch_server.py", SLEEPER)):
        path = os.path.join(shared_tmp, "sglang", name)
        with open(path, "w") as fh:
            fh.write(text)
        os.chmod(path, 0o644)
    proc = throwaway_user.start([_python3(), "-m", "sglang.launch_server", "--model-path", "m", "--port", "1"],
                                cwd=shared_tmp, env={"PATH": "/usr/bin:/bin", "NCCL_PROTO": PRIVATE,
                                                     "SGLANG_PRIVATE_SETTING": PRIVATE})
    assert wait_for(lambda: os.path.exists("/proc/%d" % proc.pid), 5)

    def theirs():
        res = run_module("sglang_probe", {"detail": True, "state_dir": str(tmp_path / "state"),
                                          "gpu_backend": "none", "shm_dir": str(tmp_path / "shm"),
                                          "search_paths": []})
        server = next((s for s in res["servers"] if s["user"] == throwaway_user.name), None)
        return (res, server) if server else None

    assert wait_for(theirs, 15, 0.2)
    res, server = theirs()
    assert server["env"] is None and server["env_hidden"] is True, server
    assert PRIVATE not in json.dumps(res)
    # the rest of what the probe says about it is there
    assert server["main"] is True and server["args"]["model_path"] == "m" and server["state"] == "not_listening"
