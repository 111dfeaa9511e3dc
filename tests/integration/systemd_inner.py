"""Run INSIDE the systemd container (tests/helpers/systemd_container.py) by
tests/integration/test_containment_systemd.py: launches the emulator with containment systemd
through _launcher.spawn and stops it through _containment.stop, printing one JSON line of
observations per case for the outer test to judge. Not a pytest module.

argv: <repository root> <emulator python>
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from typing import Any, Dict, List

ROOT, EMU_PY = sys.argv[1], sys.argv[2]
sys.path[:0] = [os.path.join(ROOT, "collections"), os.path.join(ROOT, "tests")]

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment_systemd as _systemd  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError  # noqa: E402
from helpers.fixtures import free_port  # noqa: E402
from integration.test_containment import ESCAPER_TITLE, WRAPPER  # noqa: E402

SECRET = "sk-systemd-7c1e9a4b2d"
ENV_SECRET = "hf_systemdtoken5f8e2a"


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as resp:
            return resp.status == 200
    except Exception:  # noqa: BLE001
        return False


def wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def launch(base: str, faults: str = "", escaper: str = "0") -> Dict[str, Any]:
    port = free_port()
    model = os.path.join(base, "model")
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w") as fh:
        json.dump({"architectures": ["LlamaForCausalLM"]}, fh)
    backend, why = _containment.choose("auto")
    env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "HF_TOKEN": ENV_SECRET}
    if faults:
        env["SGLANG_EMULATOR_FAULT"] = faults
    pidfile = os.path.join(base, "escaper.pid")
    spec = _launcher.LaunchSpec(
        name="sd-%s" % uuid.uuid4().hex[:8], state_dir=os.path.join(base, "state"), log_dir=os.path.join(base, "logs"),
        python=EMU_PY, venv=os.path.dirname(os.path.dirname(EMU_PY)),
        argv=[EMU_PY, "-c", WRAPPER, pidfile, escaper, "--model-path", model, "--port", str(port), "--tp-size", "2",
              "--api-key", SECRET],
        env=env, secrets=[SECRET, ENV_SECRET], containment=backend, containment_why=why)
    rec = _launcher.spawn(spec)
    ok = wait(lambda: healthy(port), 30) and (escaper == "none" or wait(lambda: os.path.exists(pidfile), 10))
    return {"rec": rec, "port": port, "ready": ok, "backend": backend, "why": why,
            "escaper": int(open(pidfile).read()) if escaper != "none" and os.path.exists(pidfile) else None}


def observe(run: Dict[str, Any]) -> Dict[str, Any]:
    rec = run["rec"]
    unit = rec.get("unit")
    shown = subprocess.run(["systemctl", "show", "--no-pager", "--", unit], capture_output=True, text=True,
                           check=False).stdout
    sup = _procs.read_proc(rec["supervisor_pid"])
    esc = _procs.read_proc(run["escaper"]) if run["escaper"] else None
    members = _cgroup.members(rec["cgroup"])
    return {
        "backend": run["backend"], "why": run["why"], "ready": run["ready"], "containment": rec["containment"],
        "unit": unit, "cgroup": rec["cgroup"], "cgroup_id_ok": rec["cgroup_id"] == _cgroup.cgroup_id(rec["cgroup"]),
        "expected_cgroup": os.path.join(_cgroup.v2_mount(), "system.slice", "%s.service" % unit[:-len(".service")]),
        "main_pid_is_supervisor": _systemd.main_pid(unit) == rec["supervisor_pid"],
        "supervisor_parent": sup.ppid if sup else None,
        "members_have_all": {rec["supervisor_pid"], rec["pid"]} <= set(members)
        and (run["escaper"] is None or run["escaper"] in members),
        "escaper_sid_differs": bool(esc and esc.sid != rec["sid"]),
        "escaper_title": esc.title if esc else None,
        "escaper_env": _procs.read_environ(run["escaper"]) if run["escaper"] else None,
        "payload_left": os.path.exists(_record.payload_path(rec["state_dir"], rec["name"])),
        "secret_in_unit_properties": SECRET in shown or ENV_SECRET in shown,
        "secret_in_supervisor": any(s in open("/proc/%d/%s" % (rec["supervisor_pid"], f), "rb").read().decode(
            "utf-8", "replace") for s in (SECRET, ENV_SECRET) for f in ("environ", "cmdline")),
        "server_env_has_marker": (_procs.read_environ(rec["pid"]) or {}).get("LLMOPS_SGLANG_INSTANCE") == rec["name"],
        "log_has_server_output": "Uvicorn running" in open(rec["log_path"]).read(),
        "members": members,
    }


def busy_refusal(rec: Dict[str, Any]) -> List[Any]:
    problem = _containment.launch_problem(rec["name"], "systemd")
    try:
        _containment.prepare(rec["name"], "systemd")
        return [problem, None]
    except SglangError as exc:
        return [problem, exc.details.get("reason")]


def stopped(run: Dict[str, Any], grace: float) -> Dict[str, Any]:
    rec = run["rec"]
    result = _containment.stop(rec, grace, time.monotonic() + grace + 20)
    unit_state = _systemd.active_state(rec["unit"])
    return {"result": result, "unit_state": unit_state, "cgroup_exists": os.path.exists(rec["cgroup"]),
            "alive": [p for p in run.get("members_before", []) if _procs.is_alive(p)],
            "port_free": not healthy(run["port"])}


def main() -> None:
    out: Dict[str, Any] = {}
    base = tempfile.mkdtemp(prefix="sd-case-")
    honours = launch(os.path.join(base, "honours"), faults="escape")
    out["honours"] = observe(honours)
    out["busy"] = busy_refusal(honours["rec"])
    honours["members_before"] = out["honours"]["members"]
    out["honours_stop"] = stopped(honours, 15)
    out["honours_stop_again"] = _containment.stop(honours["rec"], 1, time.monotonic() + 5)

    ignores = launch(os.path.join(base, "ignores"), faults="ignore_sigterm,escape", escaper="1")
    out["ignores"] = observe(ignores)
    ignores["members_before"] = out["ignores"]["members"]
    out["ignores_stop"] = stopped(ignores, 1)

    crashed = launch(os.path.join(base, "crashed"), escaper="none")
    out["crashed"] = observe(crashed)
    _systemd.kill(crashed["rec"]["unit"], "SIGKILL")  # the whole instance dies at once
    wait(lambda: not os.path.exists(crashed["rec"]["cgroup"]), 10)
    out["crashed_stop"] = _containment.stop(crashed["rec"], 5, time.monotonic() + 10)
    out["escaper_title"] = ESCAPER_TITLE
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
