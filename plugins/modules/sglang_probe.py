#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only picture of sglang on a host: interpreter, installs, CLI flags, servers, GPUs, shm."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_probe
short_description: Report what sglang looks like on a host, without changing anything
version_added: "0.1.0"
description:
  - Resolves the Python interpreter that would run sglang (from O(venv) or O(python), never a bare
    C(python3) from C(PATH) unless asked) and reports its Python version and whether sglang is
    installed there, with version, location and entry points. This imports neither torch nor sglang.
  - Lists every interpreter on the host that has sglang, read from installed metadata
    (C(sglang-*.dist-info)) under O(search_paths) without starting those interpreters.
  - With O(introspect=true) or O(flags), reads the full command line interface of THAT sglang
    (every flag with type, default, choices and help) by intercepting its argument parser; the
    result is cached per install. A failure is reported with the interpreter's own stderr, never as
    an empty flag set.
  - Finds running sglang servers by process title, command line and instance marker, groups them
    into servers (main process, ranks, detokenizer, orphaned members), with user, start time,
    interpreter, listening ports (IPv4 and IPv6), instance name and the environment variables that
    matter (secrets redacted).
  - With O(ports), asks each port for C(/server_info) (fallback C(/get_server_info)) and
    C(/model_info); a port nobody answers on is reported in the result, not as a failure.
    With O(api_key), a port is asked only when every process holding it is a member of a
    recognised sglang server run by O(server_user); anything else gets no request at all and is
    reported with its holder (RV(ports[].api_key_sent) false, the reason in RV(ports[].error)).
  - Reports GPU compute processes (tagged C(sglang) or C(foreign)), sglang-pattern files in
    C(/dev/shm) and whether a live process holds them, and a list of plain-sentence diagnoses.
author:
  - llmops.sglang contributors (@llmops)
options:
  venv:
    description:
      - Root of the virtual environment whose C(bin/python) runs sglang, for example C(/root/ml-env).
      - Mutually exclusive with O(python). Without both, the interpreter running this module is probed.
    type: path
  python:
    description:
      - Python interpreter to probe. A bare name such as C(python3) is looked up in C(PATH) once and
        reported as an absolute path.
      - Mutually exclusive with O(venv).
    type: str
  search_paths:
    description:
      - Glob patterns of directories (venvs, conda envs, prefixes or C(lib/python3.X) directories)
        searched for sglang installs.
      - Default covers C(/root/*/), C(/root/.venv*), C(/opt/*/), C(/opt/*/*/), C(/home/*/*/),
        C(/home/*/.venv*), C(/usr/local/lib/python3*/), C(/usr/lib/python3*/), conda and pyenv environments.
    type: list
    elements: str
  introspect:
    description:
      - Read the sglang command line interface of the resolved interpreter (takes seconds with a real
        sglang, which imports torch; cached afterwards).
    type: bool
    default: false
  flags:
    description:
      - Return only these flags (implies O(introspect=true)). Names may be given as C(reasoning-parser),
        C(--reasoning-parser) or C(reasoning_parser). Unknown names are listed in RV(flags_absent).
    type: list
    elements: str
  introspect_timeout:
    description: Seconds the introspection may take before it is reported as failed.
    type: int
    default: 180
  ports:
    description:
      - TCP ports to query for C(/server_info) and C(/model_info), and to report the holder of.
    type: list
    elements: int
  api_key:
    description:
      - API key sent as C(Authorization Bearer) to O(ports) - only to a port held by a recognised
        sglang server (by process title, C(python -m sglang.launch_server) or C(sglang serve)
        command line, or instance marker) of O(server_user) in the module's PID namespace. Never
        shown in results.
    type: str
  server_user:
    description:
      - The user whose sglang server may receive O(api_key). Default - the user this module runs as
        (the user C(sglang_launch) starts servers as).
    type: str
  http_timeout:
    description: Seconds each HTTP request to O(ports) may take.
    type: float
    default: 5
  gpu_backend:
    description:
      - How GPUs are read. C(auto) tries NVML (nvidia-ml-py) and then C(nvidia-smi).
    type: str
    choices: [auto, nvml, nvidia-smi, none]
    default: auto
  shm_dir:
    description: Shared memory directory scanned for sglang's files.
    type: path
    default: /dev/shm
  state_dir:
    description:
      - State directory of the collection (launch records, introspection cache).
      - Default C(/var/lib/llmops-sglang) as root, else C(~/.local/state/llmops-sglang).
    type: path
attributes:
  check_mode:
    support: full
    description: The module never changes the host (only the introspection cache may be written).
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
notes:
  - Requires Linux C(/proc). Processes of other users are listed, but their environment and open
    files are only visible to root.
seealso:
  - module: llmops.sglang.sglang_launch
  - module: llmops.sglang.sglang_teardown
"""

EXAMPLES = r"""
- name: Which sglang would this venv run, and which flags does it accept?
  llmops.sglang.sglang_probe:
    venv: /root/ml-env
    flags: [reasoning-parser, tool-call-parser]
  register: probe

- name: Fail early when the reasoning parser we need does not exist
  ansible.builtin.assert:
    that: "'kimi_k2' in probe.flags['--reasoning-parser'].choices"

- name: What runs on port 8000 and with which arguments?
  llmops.sglang.sglang_probe:
    ports: [8000]
    api_key: "{{ sglang_api_key }}"
  register: state

- name: The system python lacks sglang; the probe names the interpreter that has it
  llmops.sglang.sglang_probe:
    python: /usr/bin/python3
  register: where
"""

RETURN = r"""
interpreter:
  description: The resolved interpreter (null when it could not be resolved).
  returned: always
  type: dict
  sample:
    path: /root/ml-env/bin/python
    venv: /root/ml-env
    is_venv: true
    python_version: 3.11.7
    sglang_installed: true
    sglang_version: 0.5.23
    sglang_location: /root/ml-env/lib/python3.11/site-packages/sglang
    entrypoints: {launch_server: true, serve: true}
    serve_script: /root/ml-env/bin/sglang
    install_mtime: 1796004270.25
    error: null
    executable: /root/ml-env/bin/python
interpreters:
  description: Every sglang install found under O(search_paths), read from metadata.
  returned: always
  type: list
  elements: dict
  sample: [{python: /root/ml-env/bin/python, venv: /root/ml-env, sglang_version: 0.5.23,
            location: /root/ml-env/lib/python3.11/site-packages/sglang,
            dist_info: /root/ml-env/lib/python3.11/site-packages/sglang-0.5.23.dist-info}]
flags:
  description:
    - Flag name (long form) -> C(option_strings), C(dest), C(type), C(default), C(choices),
      C(nargs), C(required), C(action), C(help), C(hidden), C(metavar).
    - Only the flags named in O(flags) when given.
  returned: when introspect or flags
  type: dict
  sample: {"--reasoning-parser": {option_strings: ["--reasoning-parser"], dest: reasoning_parser,
           type: str, default: null, choices: [deepseek-r1, kimi_k2, qwen3], action: store,
           nargs: null, required: false, help: "Specify the parser for reasoning models."}}
flags_absent:
  description: Names from O(flags) that this sglang does not have.
  returned: when flags
  type: list
  elements: str
introspection:
  description: How the flags were obtained (cached, seconds, sglang_version, interpreter, source, cache_path).
  returned: when introspect or flags
  type: dict
servers:
  description:
    - Running sglang servers. C(main) is false for leftover processes whose main process is gone.
    - Each has id, pid, instance, launch_id, user, start_time, age_seconds, interpreter
      (cmdline, exe, venv), argv and args (secrets redacted), port, listeners, listening_ports, env,
      pids, members (pid, ppid, role, rank, state, orphaned, reason, cmdline) and orphaned.
  returned: always
  type: list
  elements: dict
ports:
  description:
    - One entry per O(ports) item with listening, listeners, server (id), holders (foreign pids,
      command lines with secrets masked), reachable, version, server_info and model_info (api keys
      redacted), error, and api_key_sent (true only when O(api_key) went to a recognised sglang
      server of O(server_user)).
  returned: when ports
  type: list
  elements: dict
gpus:
  description: GPU report (backend, note, gpus with processes tagged owner C(sglang) or C(foreign)).
  returned: always
  type: dict
shm:
  description: Files in O(shm_dir) matching sglang's patterns with size, held, held_by.
  returned: always
  type: list
  elements: dict
records:
  description: Launch records in O(state_dir) with whether their process is still alive.
  returned: always
  type: list
  elements: dict
diagnosis:
  description: Short sentences about what looks wrong.
  returned: always
  type: list
  elements: str
  sample: ["python /usr/bin/python3 has no sglang, but /root/ml-env/bin/python has 0.5.23"]
"""

import glob
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import _diagnosis, _exit, _procs
from ansible_collections.llmops.sglang.plugins.module_utils._discovery import (
    credential_refusal, find_servers, server_of_pid)
from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._gpus import BACKENDS, query_gpus
from ansible_collections.llmops.sglang.plugins.module_utils._interpreter import (
    DEFAULT_SEARCH_PATHS, discover, resolve, running_interpreter_roots)
from ansible_collections.llmops.sglang.plugins.module_utils._introspect import flag_lookup, introspect
from ansible_collections.llmops.sglang.plugins.module_utils._ports import listeners
from ansible_collections.llmops.sglang.plugins.module_utils._record import default_state_dir, read_json
from ansible_collections.llmops.sglang.plugins.module_utils._redact import mask_cmdline, redact_result, redact_tree
from ansible_collections.llmops.sglang.plugins.module_utils._shm import scan


def _holder(pid, procs):
    proc = procs.get(pid) or _procs.read_proc(pid)
    if proc is None:
        return {"pid": pid, "user": None, "cmdline": []}
    return {"pid": pid, "user": proc.user, "cmdline": mask_cmdline(proc.cmdline) or ["[%s]" % proc.comm]}


def probe_port(port, servers, procs, api_key, timeout, server_user):
    """Who holds `port`, and what it says about itself. The api key goes only to a recognised
    sglang server of `server_user`; to anything else with a key given, nothing is sent."""
    # Imported here: ansible.module_utils.urls costs ~0.15 s, paid only when ports are asked for.
    from ansible_collections.llmops.sglang.plugins.module_utils import _http

    socks = listeners([port])
    rep = {"port": port, "listening": bool(socks), "listeners": [s.to_dict() for s in socks],
           "server": None, "holders": [], "reachable": False, "version": None,
           "server_info": None, "model_info": None, "endpoint": None, "error": None,
           "api_key_sent": False}
    if not socks:
        rep["error"] = "nothing listens on port %d (IPv4 or IPv6)" % port
        return rep
    for pid in sorted({p for s in socks for p in s.pids}):
        server = server_of_pid(servers, pid)
        if server is not None:
            rep["server"] = server.id
        else:
            rep["holders"].append(_holder(pid, procs))
    if api_key:
        refusal = credential_refusal(servers, socks, server_user)
        if refusal is not None:
            rep["error"] = ("the api_key was not sent and nothing was asked: %s (the key goes only to an "
                            "sglang server of user %s)" % (refusal, server_user))
            return rep
        rep["api_key_sent"] = True
    info, error, endpoint = _http.server_info(socks[0].address, port, api_key, timeout)
    rep["endpoint"] = endpoint
    if info is None:
        rep["error"] = "port %d does not answer %s: %s" % (port, endpoint, error)
        return rep
    secrets = [api_key]
    rep["reachable"] = True
    rep["server_info"] = redact_tree(info, secrets=secrets)
    rep["version"] = info.get("version")
    model, model_error = _http.model_info(socks[0].address, port, api_key, timeout)
    rep["model_info"] = redact_tree(model, secrets=secrets) if model is not None else None
    if model_error:
        rep["model_info_error"] = model_error
    return rep


def tag_gpus(report, servers, procs):
    data = report.to_dict()
    for gpu in data["gpus"]:
        for proc in gpu["processes"]:
            server = server_of_pid(servers, proc["pid"])
            if server is not None:
                proc.update(owner="sglang", server=server.id)
            else:
                proc.update(owner="foreign", **{k: v for k, v in _holder(proc["pid"], procs).items() if k != "pid"})
    return data


def read_records(state_dir):
    out = []
    for path in sorted(glob.glob(os.path.join(state_dir, "*.json"))):
        if path.endswith(".exit.json"):
            continue
        try:
            rec = read_json(path) or {}
        except SglangError as exc:
            out.append({"path": path, "error": exc.msg})
            continue
        pid, start = rec.get("pid"), rec.get("start_time")
        out.append({"path": path, "name": rec.get("name"), "launch_id": rec.get("launch_id"),
                    "pid": pid, "port": rec.get("port"), "log_path": rec.get("log_path"),
                    "alive": bool(isinstance(pid, int) and _procs.is_alive(pid, start))})
    return out


def select_flags(all_flags, names):
    picked, absent = {}, []
    for name in names:
        entry = flag_lookup(all_flags, name)
        if entry is None:
            absent.append(name)
        else:
            key = next((o for o in entry["option_strings"] if o.startswith("--")), entry["option_strings"][0])
            picked[key] = entry
    return picked, absent


def run_probe(module):
    p = module.params
    result = {"changed": False, "interpreter": None, "diagnosis": []}
    failure = None
    state_dir = p["state_dir"] or default_state_dir()
    try:
        interp = resolve(venv=p["venv"], python=p["python"])
        result["interpreter"] = interp.to_dict()
    except SglangError as exc:
        interp, failure = None, exc
    # The search globs plus the installs that running servers use (a venv in an unusual place).
    result["interpreters"] = discover(list(p["search_paths"] or DEFAULT_SEARCH_PATHS) + running_interpreter_roots())
    if interp is not None and not interp.sglang_installed:
        own = os.path.abspath(interp.path)
        elsewhere = [i for i in result["interpreters"] if not i["python"] or os.path.abspath(i["python"]) != own]
        result["diagnosis"] += _diagnosis.interpreter(result["interpreter"], elsewhere)
    if failure is None and interp is not None and (p["introspect"] or p["flags"]):
        if not interp.sglang_installed:
            failure = SglangError(result["diagnosis"][0] if result["diagnosis"] else
                                  "python %s has no sglang" % interp.path, reason="sglang_missing")
        else:
            try:
                intro = introspect(interp, cache_dir=os.path.join(state_dir, "introspect-cache"),
                                   timeout=p["introspect_timeout"])
            except SglangError as exc:
                failure = exc
            else:
                flags = intro.pop("flags")
                if p["flags"]:
                    flags, absent = select_flags(flags, p["flags"])
                    result["flags_absent"] = absent
                    result["diagnosis"] += _diagnosis.flags(absent, intro["sglang_version"])
                result["flags"] = flags
                result["introspection"] = intro

    procs = _procs.snapshot()
    servers = find_servers(procs)
    now = time.time()
    result["servers"] = [s.to_dict(now) for s in servers]
    result["diagnosis"] += _diagnosis.servers(result["servers"], now)
    if p["ports"]:
        user = p["server_user"] or _procs.username(os.geteuid())
        result["ports"] = [probe_port(port, servers, procs, p["api_key"], p["http_timeout"], user)
                           for port in p["ports"]]
        result["diagnosis"] += _diagnosis.ports(result["ports"], {s["id"]: s for s in result["servers"]}, now)
    result["gpus"] = tag_gpus(query_gpus(p["gpu_backend"]), servers, procs)
    result["diagnosis"] += _diagnosis.gpus(result["gpus"])
    result["shm"] = [e.to_dict() for e in scan(p["shm_dir"])]
    result["diagnosis"] += _diagnosis.shm(result["shm"])
    result["records"] = read_records(state_dir) if os.path.isdir(state_dir) else []
    result["diagnosis"] += ["launch record %s names pid %s, which is gone" % (r["path"], r["pid"])
                            for r in result["records"] if r.get("pid") and not r.get("alive")]
    return result, failure


def _body(module):
    """The probe; its result (or failure) leaves through the one result redaction."""
    secrets = [module.params["api_key"]]
    for port in module.params["ports"] or []:
        if not 1 <= port <= 65535:
            raise SglangError("port %d is not in 1..65535" % port, reason="bad_input")
    result, failure = run_probe(module)
    if failure is not None:
        details = dict(failure.details)
        details.setdefault("reason", "probe_failed")
        result.update(details)
        raise SglangError(failure.msg, **redact_result(result, secrets))
    return redact_result(result, secrets)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path"),
            python=dict(type="str"),
            search_paths=dict(type="list", elements="str"),
            introspect=dict(type="bool", default=False),
            flags=dict(type="list", elements="str"),
            introspect_timeout=dict(type="int", default=180),
            ports=dict(type="list", elements="int"),
            api_key=dict(type="str", no_log=True),
            server_user=dict(type="str"),
            http_timeout=dict(type="float", default=5),
            gpu_backend=dict(type="str", choices=list(BACKENDS), default="auto"),
            shm_dir=dict(type="path", default="/dev/shm"),
            state_dir=dict(type="path"),
        ),
        mutually_exclusive=[("venv", "python")],
        supports_check_mode=True,
    )
    _exit.run(module, _body, "sglang_probe", [module.params["api_key"]])


if __name__ == "__main__":
    main()
