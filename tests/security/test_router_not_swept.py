"""sglang-router was stopped by the title sweep of a teardown of an unrelated instance: its
launcher titles the process `sglang::router` (setproctitle), the prefix of sglang's server titles,
so any teardown with sglang_processes on (the default) on the router's host sent it SIGTERM, and
the router exited 0 in the middle of a fleet roll.

Runs inside a private PID namespace (the sweep there sees only what the test started): the real
sglang-router (the fleet tests' venv), a hand-started titled sglang process the sweep must still
take, then the module in check mode and for real."""
from __future__ import annotations

from helpers.fleet import router_python

_SCRIPT = r"""
import json, os, subprocess, sys, tempfile, time
from helpers.fixtures import free_port, run_module, wait_for

router_py = sys.argv[1]
router = subprocess.Popen([router_py, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                           "--port", str(free_port()), "--policy", "round_robin",
                           "--prometheus-port", str(free_port()), "--log-level", "warn"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True, env=dict(os.environ, no_proxy="*", NO_PROXY="*"))
# a hand-started sglang process (nohup'd scheduler title): what the sweep exists for
stray = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 sleep 300"], start_new_session=True)

def title(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        return ""
assert wait_for(lambda: title(router.pid).startswith("sglang::router") and title(stray.pid).startswith("sglang::"),
                timeout=60), (title(router.pid), title(stray.pid))
args = {"name": "unrelated", "state_dir": tempfile.mkdtemp(), "gpus": [], "gpu_backend": "none",
        "shm_cleanup": False, "grace_period": 5, "timeout": 5}
check = run_module("sglang_teardown", args, check_mode=True)
real = run_module("sglang_teardown", args)
time.sleep(0.5)
print(json.dumps({"router": router.pid, "stray": stray.pid, "router_exit": router.poll(),
                  "stray_alive": stray.poll() is None, "check": check, "real": real}))
"""


def test_a_title_sweep_does_not_stop_the_router(pidns):
    res = pidns(_SCRIPT, router_python(), timeout=180)
    assert res.rc == 0 and res.data is not None, (res.stdout[-2000:], res.stderr[-3000:])
    data = res.data
    for run in ("check", "real"):
        result = data[run]
        assert not result.get("failed"), result.get("msg")
        targets = {t["pid"] for t in result["targets"]}
        assert data["router"] not in targets, (run, result["targets"])
        assert data["stray"] in targets, (run, result["targets"])  # the sweep did run
    assert data["router_exit"] is None, data["real"].get("killed")
    assert not data["stray_alive"], data["real"].get("killed")
