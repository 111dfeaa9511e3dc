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
  - Answers the question asked. By default the result is a short report - the interpreter and
    every interpreter on the host with sglang, the servers on this host with their state
    (C(state) in RV(servers)), the asked ports and flags, and the diagnosis. O(detail=true) adds the
    full data - command lines, parsed arguments, environments, listeners, C(server_info) and
    C(model_info), every argparse field of each flag, the C(/dev/shm) files.
  - Resolves the Python interpreter that would run sglang (from O(venv) or O(python), never a bare
    C(python3) from C(PATH) unless asked) and reports its Python version and whether sglang is
    installed there, with version, location and entry points. This imports neither torch nor sglang.
    When it lacks sglang or is broken, the diagnosis (and the failure message) names the venv the
    running instance uses (its server's interpreter, or its launch record's), not just any
    sglang install found (RV(suggested_interpreter)). Only an interpreter that nobody but root or
    the module's user can replace is ever suggested; the others are listed in RV(not_suggested).
  - Lists every interpreter on the host that has sglang, read from installed metadata
    (C(sglang-*.dist-info)) under O(search_paths) without starting those interpreters.
  - With O(introspect=true) or O(flags), reads the full command line interface of THAT sglang
    (every flag with type, default, choices and help) by intercepting its argument parser; the
    result is cached per install. A failure is reported with the interpreter's own stderr, never as
    an empty flag set.
  - A flag question (O(flags) as a mapping of flag name to value, for example C(reasoning-parser)
    to C(kimi_k2)) gets a yes or no per flag (RV(flag_answers), RV(accepted)), the valid choices, and a did-you-mean for an
    unknown flag name or an unknown value.
  - Reports the containment a launch would get on this host (RV(containment)) and, per server
    with a launch record, its containment and cgroup, flagging processes attributed to the server
    that are outside its cgroup (C(outside_cgroup) in RV(servers)).
  - Finds running sglang servers by process title, command line and instance marker, groups them
    into servers (main process, ranks, detokenizer, orphaned members), with user, start time,
    interpreter, listening ports (IPv4 and IPv6), instance name and (with O(detail)) the
    environment variables that matter (secrets redacted) - only for servers of the user the
    module runs as (another user's server environment is never shown).
  - With O(ports) (the TCP ports to query, and to report the holder of), asks each port for
    C(/server_info) (fallback C(/get_server_info)) and
    C(/model_info); a port nobody answers on is reported in the result, not as a failure.
    With O(api_key), a port is asked only when every process holding it is a member of a
    recognised sglang server run by O(server_user); anything else gets no request at all and is
    reported with its holder (C(api_key_sent) false in RV(ports), the reason in its C(error)).
  - Reports GPU compute processes (tagged C(sglang) or C(foreign)), sglang-pattern files in
    C(/dev/shm) and whether a live process holds them, and a list of plain-sentence diagnoses.
  - Runs on a broken host too - without psutil or requests it reads what it can, lists what it
    could not in RV(unavailable), and warns naming an interpreter on the host that has them.
  - GPUs that cannot be read (no NVML, no C(nvidia-smi)) are an Ansible warning unless
    O(gpu_backend=none).
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
        reported as an absolute path (unlike M(llmops.sglang.sglang_launch), which refuses one - the
        probe only reads).
      - Mutually exclusive with O(venv).
    type: path
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
      - The flags to ask about (implies O(introspect=true)) - a list of names (does this sglang have
        them?), a mapping of name to value (does it accept this value? a null value asks for the
        name only), or a string C(a,b=v) (the ad-hoc C(-a flags=...) form).
      - Names may be given as C(reasoning-parser), C(--reasoning-parser) or C(reasoning_parser).
      - Each question is answered in RV(flag_answers); unknown names are also listed in
        RV(flags_absent); RV(flags) holds the asked flags that exist.
    type: raw
  detail:
    description:
      - Return the full data (command lines, parsed arguments and environments of servers,
        listeners, C(server_info)/C(model_info) of ports, every argparse field of flags,
        C(/dev/shm) files) instead of the short report.
      - Another user's server environment is not shown even then.
    type: bool
    default: false
  server_user:
    description:
      - The user whose sglang server may receive O(api_key). Default - the user this module runs as
        (the user C(sglang_launch) starts servers as).
      - O(api_key) is sent to a port in O(ports) only when it is held by a recognised sglang server
        (by process title, C(python -m sglang.launch_server) or C(sglang serve) command line, or
        instance marker) of this user in the module's PID namespace. Every holder of the port must
        be wholly this user's - real, effective and saved uids - and run no setuid or setgid
        program; a process with only an sglang title (no command-line main process, no launch
        record in O(state_dir) it belongs to) never counts.
    type: str
  http_timeout:
    description: Seconds each HTTP request to O(ports) may take.
    type: float
    default: 5
  shm_dir:
    description: Shared memory directory scanned for sglang's files.
    type: path
    default: /dev/shm
extends_documentation_fragment:
  - llmops.sglang.common.state_dir
  - llmops.sglang.common.gpu_backend
  - llmops.sglang.common.api_key
  - llmops.sglang.common.ports
  - llmops.sglang.common.introspect_timeout
attributes:
  check_mode:
    support: full
    description: The module never changes the host (only the introspection cache may be written).
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
requirements:
  - Linux (C(/proc)).
  - psutil and requests for the Python that runs the module (the sglang venv has both); without
    them the probe still answers what it can (see RV(unavailable)).
notes:
  - Processes of other users are listed; their open files are only visible to root, and their
    environment is never returned.
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

- name: Does this host's sglang accept these values? (yes/no, choices, did-you-mean)
  llmops.sglang.sglang_probe:
    venv: /root/ml-env
    flags:
      reasoning-parser: kimi_k2
      tool-call-parser: kimi_k2
  register: question

- name: Stop when it does not
  ansible.builtin.assert:
    that: question.accepted
    fail_msg: "{{ question.flag_answers | dict2items | map(attribute='value.answer') | list }}"

- name: Everything the probe knows (command lines, environments, server_info, /dev/shm)
  llmops.sglang.sglang_probe:
    ports: [30000]
    detail: true

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
  description:
    - Every sglang install found under O(search_paths) (and where running servers and launch
      records point), read from metadata.
    - C(trusted) is false when someone other than root or the module's user can replace the
      install (C(untrusted_why) says who or what); such an install is never suggested.
  returned: always
  type: list
  elements: dict
  sample: [{python: /root/ml-env/bin/python, venv: /root/ml-env, sglang_version: 0.5.23,
            location: /root/ml-env/lib/python3.11/site-packages/sglang,
            dist_info: /root/ml-env/lib/python3.11/site-packages/sglang-0.5.23.dist-info,
            trusted: true, untrusted_why: null}]
flags:
  description:
    - Flag name (long form) -> C(type), C(default), C(choices), C(required), C(help); with
      O(detail) also C(option_strings), C(dest), C(nargs), C(action), C(hidden), C(metavar).
    - Only the flags named in O(flags) (and existing) when given.
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
flag_answers:
  description:
    - One answer per O(flags) question, keyed by the name as asked - C(asked), C(flag) (the long
      name, null when there is no such flag), C(exists), C(value), C(accepted), C(choices),
      C(type), C(default), C(did_you_mean) (close flag names for an unknown name, close choices
      for an unknown value) and C(answer) (one sentence starting with V(yes) or V(no)).
  returned: when flags
  type: dict
  sample: {"reasoning-parser": {asked: reasoning-parser, flag: "--reasoning-parser", exists: true,
           value: kimi-k2, accepted: false, choices: [deepseek-r1, kimi_k2, qwen3], type: str,
           default: null, did_you_mean: [kimi_k2],
           answer: "no: sglang 0.5.23 --reasoning-parser does not accept 'kimi-k2'; did you mean kimi_k2?
                    (valid choices: deepseek-r1, kimi_k2, qwen3)"}}
accepted:
  description: True when every O(flags) question is answered yes.
  returned: when flags
  type: bool
introspection:
  description: How the flags were obtained (cached, seconds, sglang_version, interpreter, source, cache_path).
  returned: when introspect or flags
  type: dict
servers:
  description:
    - Running sglang servers. C(main) is false for leftover processes whose main process is gone.
    - Each has id, pid, main, state, instance, user, age_seconds, port, listening_ports,
      model_path, tp_size, interpreter (cmdline, venv), pids, members (pid, role, rank, state,
      orphaned), orphaned, and from its launch record (null without one) containment (V(systemd),
      V(cgroup) or V(none)), cgroup and unit.
    - C(outside_cgroup) - pids the probe attributes to a contained server (by ancestry, session,
      marker, title or listening socket) that are not in its cgroup, so a teardown by cgroup would
      not reach them; present (and a line in RV(diagnosis)) only when there are some.
    - C(state) is V(answering) (its port was asked and answered), V(listening), V(not_listening)
      (starting, or hung before it bound its port), V(stopped) (main process stopped, state T) or
      V(leftover) (no main process).
    - With O(detail) also launch_id, state_dir, start_time, interpreter.exe, argv and args (secrets
      redacted), listeners, other_namespace, env (null and C(env_hidden) true for another user's
      server), the members' ppid, pgid, sid, user, start_time, reason and cmdline, and
      containment_why, cgroup_members (the pids in its cgroup), outside_cgroup and
      containment_notes (why a recorded cgroup was not used, for example one of a later launch).
  returned: always
  type: list
  elements: dict
ports:
  description:
    - One entry per O(ports) item with listening, server (id), holders (foreign pids, command lines
      with secrets masked), reachable, version, model_path and tp_size (from C(server_info)), error,
      and api_key_sent (true only when O(api_key) went to a recognised sglang server of
      O(server_user)).
    - With O(detail) also listeners, endpoint, server_info and model_info (api keys redacted).
  returned: when ports
  type: list
  elements: dict
gpus:
  description: GPU report (backend, note, gpus with processes tagged owner C(sglang) or C(foreign)).
  returned: always
  type: dict
shm:
  description: Files in O(shm_dir) matching sglang's patterns with size, held, held_by (leaks are in the diagnosis either way).
  returned: with detail
  type: list
  elements: dict
containment:
  description:
    - What C(sglang_launch) with C(containment=auto) would use on this host - C(backend)
      (V(systemd), V(cgroup) or V(none)) and C(why).
  returned: always
  type: dict
  sample: {backend: cgroup, why: "auto: PID 1 is not systemd; cgroup v2 at /sys/fs/cgroup is writable by uid 0"}
records:
  description:
    - Launch records in O(state_dir) - path, name, launch_id, pid, port, log_path, interpreter,
      venv, sglang_version, start_time, containment, cgroup - with C(alive), whether their process is still alive
      (null when the process table could not be read).
    - Only C(<name>.json) files are records; an instance's other files (C(<name>.exit.json), the remembered start
      C(<name>.timeline.json), a record kept aside as C(<name>.json.damaged-STAMP), ...) never are.
    - A record that cannot be read is listed with C(path), C(error) and C(reason) (V(record_damaged) for an empty,
      cut-short or non-object file, V(unsafe_record) for one another user could have written).
  returned: always
  type: list
  elements: dict
suggested_interpreter:
  description:
    - For an interpreter without sglang, or one that failed - what this host's instances run with
      (python, venv, sglang_version, source), running servers first, then launch records whose
      server is gone.
  returned: when the interpreter lacks sglang or failed and an instance was found
  type: dict
  sample: {python: /root/ml-env/bin/python, venv: /root/ml-env, sglang_version: 0.5.23,
           source: "the running instance 'serving' (pid 4242)"}
not_suggested:
  description:
    - Interpreters with sglang that this host's servers, launch records or installs point at but
      that someone other than root or the module's user can replace (another user's venv, a
      directory writable by others) - python, venv, sglang_version, source and C(why) (for
      example V(owned by user alice (/home/alice))). They are never named in
      RV(suggested_interpreter) or as advice; when an interpreter lacks sglang, RV(diagnosis)
      lists each as not suggested.
  returned: always
  type: list
  elements: dict
unavailable:
  description:
    - What could not be read, and why - for example the process table without psutil, or a port's
      C(server_info) without requests. Empty when everything was read.
  returned: always
  type: list
  elements: str
  sample: ["port 30000: /server_info and /model_info not read, python /usr/bin/python3 cannot import requests"]
missing_libraries:
  description: psutil and/or requests when the module's interpreter cannot import them.
  returned: when a library is missing
  type: list
  elements: str
interpreter_with_libraries:
  description: An interpreter on the host that has psutil and requests (null when none was found).
  returned: when a library is missing
  type: str
diagnosis:
  description: Short sentences about what looks wrong.
  returned: always
  type: list
  elements: str
  sample: ["python /usr/bin/python3 has no sglang, but /root/ml-env/bin/python has 0.5.23"]
"""

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import redact_result


def _body(module):
    """The probe; its result (or failure) leaves through the one result redaction."""
    secrets = [module.params["api_key"]]
    _probe.check_params(module.params)
    result, failure = _probe.run(module.params, module.warn)
    result = _probe.report(result, module.params["detail"])
    if failure is not None:
        details = dict(failure.details)
        details.setdefault("reason", "probe_failed")
        result.update(details)
        raise SglangError(failure.msg, **redact_result(result, secrets))
    return redact_result(result, secrets)


def main():
    _exit.started()
    module = AnsibleModule(
        # _options imports nothing: the probe starts (and says what it could not read) on a host
        # without psutil.
        argument_spec=_options.merged(
            _options.PYTHON, _options.INTROSPECT_TIMEOUT, _options.ports(), _options.API_KEY,
            _options.GPU_BACKEND, _options.STATE_DIR,
            venv=dict(type="path"),
            search_paths=dict(type="list", elements="str"),
            introspect=dict(type="bool", default=False),
            flags=dict(type="raw"),
            detail=dict(type="bool", default=False),
            server_user=dict(type="str"),
            http_timeout=dict(type="float", default=5),
            shm_dir=dict(type="path", default="/dev/shm"),
        ),
        mutually_exclusive=[("venv", "python")],
        supports_check_mode=True,
    )
    _exit.run(module, _body, "sglang_probe", [module.params["api_key"]])


if __name__ == "__main__":
    main()
