#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until one SGLang launch is ready, proven by identity; fail fast with the cause."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_ready
short_description: Wait until an SGLang launch is ready, judged by identity rather than health
version_added: "0.1.0"
description:
  - Follows the log of one launch (from the launch record written by
    M(llmops.sglang.sglang_launch)) incrementally from the launch's byte offset, and declares
    the server ready only when B(all) of these hold.
  - The ready line (V(The server is fired up and ready to roll!)) appears in this launch's log
    after the launch offset; lines written before the offset (an appended log, an earlier run)
    never count.
  - C(Uvicorn running on http://HOST:PORT) for the expected port appeared and no bind error
    (C(error while attempting to bind on address)) did.
  - Every listening socket on the port that collides with the launch's address belongs to this
    launch (the record's pid, its descendants, its process group or session, or a process
    carrying C(LLMOPS_SGLANG_LAUNCH_ID) equal to the record's launch_id). Sockets collide when
    they have the same address family and address, or one is a wildcard (an IPv6 wildcard is
    taken as dual-stack); a listener on V(::1) does not collide with a server on V(127.0.0.1).
  - C(/server_info) (or the deprecated C(/get_server_info)) reports the expected fields
    (compared normalised - V(8) equals V("8"), trailing slashes in paths are ignored).
  - The requested health endpoint answers 200.
  - Then readiness must hold for the O(settle) window (process alive, port still this
    launch's). A death inside the window is reported like a crash, with its decisive lines.
    The verdict comes O(settle) seconds after the proofs held (RV(proven_at)).
  - Fails fast, with a RV(reason) code and the decisive log lines (a traceback from C(Traceback)
    to the exception line, capped at about 40 lines, secrets redacted) when the launch exits,
    prints a fatal line inside a traceback of its start, loses its port to another process, or
    reports another configuration. A crashed launch is reported within about one
    O(poll_interval) plus a short time used to capture the rest of the traceback.
  - "A fatal pattern decides only when the process exits, or when the line sits inside a
    traceback before the ready line. Known harmless lines never decide and are never named as
    the cause: warnings such as C(Ignore import error when loading X: No module named Y) that
    healthy servers print when an optional dependency is missing (see O(extra_benign_patterns))."
  - A server that already listens on its port when the check begins (a re-check of a running
    server) is judged by the port owner, C(/server_info) and health. Its log is used only for
    the startup up to the ready line, if the log still has it; later lines (recovered
    per-request errors, hours of access lines) are never read, and a rotated, truncated or
    deleted log is no failure (RV(already_running)).
  - Tolerates log rotation (new inode - the old file is drained, the new one followed from
    byte 0) and truncation (restarts from 0 and notes it in RV(log_events)).
  - The log must be a regular file. It is opened without blocking and checked before any
    read; a FIFO, device, socket or directory at the log path fails at once with
    RV(reason=bad_log).
  - Read-only. In check mode it observes exactly the same way and changes nothing.
  - Nodes with O(node_rank) >= 1 have no HTTP server; the
    C(Dummy health check server started) log line is their readiness signal and HTTP checks
    are skipped.
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - Linux (C(/proc) is read directly for processes and sockets).
options:
  name:
    description:
      - Instance name; the launch record is read from O(state_dir)/C(<name>.json).
      - One of O(name) or O(record) is required.
    type: str
  state_dir:
    description:
      - Directory holding the launch records.
      - Defaults to C(/var/lib/llmops-sglang) as root, else C(~/.local/state/llmops-sglang).
    type: path
  record:
    description:
      - The launch record itself (for example RV(llmops.sglang.sglang_launch#module:record)),
        instead of reading it from O(state_dir).
      - Needs at least C(pid) and C(log_path); C(start_time), C(log_offset), C(port),
        C(launch_id), C(pgid), C(sid), C(exit_path), C(argv) and C(expect) make the checks
        stronger.
    type: dict
  timeout:
    description:
      - Seconds to wait for readiness before failing with RV(reason=timeout).
    type: float
    default: 1200
  poll_interval:
    description:
      - Seconds between two polls of the log and the process (sub-second is cheap).
      - HTTP checks run at most every max(O(poll_interval), 0.5) seconds.
      - Must be between 0.01 and 60.
    type: float
    default: 0.2
  ready_patterns:
    description:
      - Regular expressions (Python C(re.search)) that mark the ready line. Replaces the default.
    type: list
    elements: str
  extra_ready_patterns:
    description:
      - Regular expressions added to O(ready_patterns) (or to its default).
    type: list
    elements: str
    default: []
  fatal_patterns:
    description:
      - Regular expressions that mark a fatal line (RV(reason=fatal_log)). Replaces the default
        list (missing modules, not enough memory, CUDA out of memory, CUDA graph capture failure,
        unbalanced memory, scheduler exception/death, initialization failure, sigquit from a
        child). The bind error is always fatal.
      - A fatal line fails the wait while the process lives only inside a traceback printed
        before the ready line; otherwise it explains the failure once the process exits.
    type: list
    elements: str
  extra_fatal_patterns:
    description:
      - Regular expressions added to O(fatal_patterns) (or to its default).
    type: list
    elements: str
    default: []
  extra_benign_patterns:
    description:
      - Regular expressions of harmless lines, added to the built-in list of warnings that
        SGLang prints on healthy hosts with the words of a fatal pattern (C(Ignore import error
        when loading ...), C(Failed to import from custom_ar with ModuleNotFoundError(...)), and
        others read from the 0.5.23 source). A line that matches one, and its continuation lines
        without a timestamp, never decides and is never named as a cause.
    type: list
    elements: str
    default: []
  settle:
    description:
      - Seconds that readiness must keep holding after every proof held - the launched process
        alive and the port still owned by this launch - before the module answers ready.
      - A death inside the window is reported like a crash (RV(reason=fatal_log) or
        RV(reason=exited)) with its decisive lines.
      - This time comes on top of the time to the proofs and may run past O(timeout) by at most
        its own length. V(0) answers at the moment the proofs hold.
      - Must be between 0 and 600.
    type: float
    default: 2.0
  expect:
    description:
      - "C(/server_info) fields that must match, for example C({tp_size: 8, model_path: /models/x})."
      - Defaults to the record's C(expect) (model path, tp_size, port and the parser flags given
        at launch). V({}) disables the comparison.
    type: dict
  health:
    description:
      - Health endpoint that must answer 200 after the identity and configuration checks.
      - V(health_generate) runs a one-token generation on the server.
      - With V(none), a server that was already running when the check began and whose log no
        longer shows its ready line is still checked with C(/health), which answers 200 only
        after the warmup - the only remaining proof that its start completed.
    type: str
    choices: [none, health, health_generate]
    default: health
  api_key:
    description:
      - The server's C(--api-key). Sent as a bearer token; never returned.
    type: str
  node_rank:
    description:
      - Node rank of this host in a multi-node launch. Defaults to the record's C(node_rank), else V(0).
      - For ranks >= 1 the ready signal is C(Dummy health check server started) (plus any
        non-default O(ready_patterns)/O(extra_ready_patterns)), and no HTTP check runs.
    type: int
  require_ready_line:
    description:
      - When V(false), the ready line is not required. Use it only for launches with a quiet
        C(--log-level) (warning, error) that hides the ready line; readiness then rests on the
        Uvicorn line (when the HTTP log level shows it), port owner identity, C(/server_info)
        and health.
      - When V(true) and the record's argv has a quiet C(--log-level), the module fails at once
        with RV(reason=ready_line_hidden) instead of waiting for a line that never comes.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Observes the same way in check mode; the module never changes anything.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
notes:
  - Failures are C(fail_json) with C(msg) (one precise sentence) and C(reason), one of
    V(exited), V(fatal_log), V(stale_server), V(config_mismatch), V(unauthorized),
    V(log_missing), V(log_truncated), V(bad_log), V(timeout), V(ready_line_hidden),
    V(record_missing), V(record_invalid), V(invalid_argument), V(bad_name), V(io_error),
    V(permission_denied), V(error) (the code is the one set where the failure was found).
  - A stale server that answers C(/health) 200 on the port never makes a failed launch ready.
seealso:
  - module: llmops.sglang.sglang_launch
  - module: llmops.sglang.sglang_teardown
"""

EXAMPLES = r"""
- name: Wait for the extraction server launched just before
  llmops.sglang.sglang_ready:
    name: extraction
    timeout: 1800

- name: Use the record returned by sglang_launch, and run a generation as the health check
  llmops.sglang.sglang_ready:
    record: "{{ launch.record }}"
    health: health_generate
    api_key: "{{ vault_sglang_api_key }}"

- name: Require a specific configuration (overrides the record's expect)
  llmops.sglang.sglang_ready:
    name: serving
    expect:
      tp_size: 8
      reasoning_parser: kimi_k2
      model_path: /models/Kimi-K2.5

- name: Treat a site-specific line as fatal too
  llmops.sglang.sglang_ready:
    name: extraction
    extra_fatal_patterns:
      - "hidden state dump failed"

- name: A launch with --log-level warning (the ready line is hidden)
  llmops.sglang.sglang_ready:
    name: quiet
    require_ready_line: false

- name: A harmless site-specific warning must never decide; answer as soon as the proofs hold
  llmops.sglang.sglang_ready:
    name: extraction
    extra_benign_patterns:
      - "optional tracer not installed"
    settle: 0

- name: Second node of a two-node launch (no HTTP server there)
  llmops.sglang.sglang_ready:
    name: kimi
    node_rank: 1
"""

RETURN = r"""
ready:
  description: Whether the launch is ready (always V(true) on success).
  returned: always
  type: bool
reason:
  description: V(ready), or the failure code (see notes).
  returned: always
  type: str
  sample: fatal_log
elapsed:
  description: Seconds since the module started.
  returned: always
  type: float
since_launch:
  description: Seconds since the launch (record C(launched_at)).
  returned: always
  type: float
timeline:
  description:
    - Startup phases in the order seen, each with seconds since launch and the line. Phases are
      C(init distributed), C(weight load begin), C(weight load end), C(kv cache),
      C(memory pool), C(cuda graph begin), C(cuda graph end), C(http up), C(warmup), C(ready)
      (or C(dummy health server) on node_rank >= 1).
  returned: always
  type: list
  elements: dict
  sample: [{phase: weight load begin, seconds: 4.1, line: "[2025-01-01 10:00:04 TP0] Load weight begin. avail mem=78.50 GB"}]
phase:
  description: The furthest phase reached (null before the first startup line).
  returned: always
  type: str
server_version:
  description: C(version) from C(/server_info).
  returned: always
  type: str
matched:
  description: Expected fields and the values the server reported (secrets masked).
  returned: always
  type: dict
expected:
  description: The fields that were compared.
  returned: always
  type: dict
mismatches:
  description: Expected vs actual table for RV(reason=config_mismatch).
  returned: on config_mismatch
  type: list
  elements: dict
  sample: [{field: tp_size, expected: 8, actual: 2}]
listeners:
  description: Listening sockets on the port, with their owner processes and whether they belong to this launch.
  returned: always
  type: list
  elements: dict
stale_owners:
  description: >-
    Processes holding the port on a colliding address that are not this launch (pid, user,
    cmdline, start time, address, family).
  returned: on stale_server
  type: list
  elements: dict
health:
  description: Endpoint checked and its last HTTP status.
  returned: always
  type: dict
decisive_lines:
  description: The log lines that explain a failure (traceback to the exception line), redacted, at most about 40.
  returned: always (empty on success)
  type: list
  elements: str
log_tail:
  description: The last 40 lines of this launch's log, redacted.
  returned: always (empty on success)
  type: list
  elements: str
exit_status:
  description: >-
    When the launch exited - the exit file of this launch (returncode, signal, exited_at), or
    C(unknown) when no exit file with this launch_id exists.
  returned: always (null while the process lives)
  type: raw
log_events:
  description: What happened to the log file (truncated, rotated, missing).
  returned: always
  type: list
  elements: dict
pid:
  description: The launched process.
  returned: always
  type: int
launch_id:
  description: The launch's id.
  returned: always
  type: str
log_path:
  description: The log followed.
  returned: always
  type: str
already_running:
  description: >-
    Whether the launch already listened on its port when the check began (a re-check): it was
    judged by the port owner, /server_info and health, and its old log lines were not read.
  returned: always
  type: bool
settle:
  description: The settle window applied, in seconds.
  returned: always
  type: float
  sample: 2.0
proven_at:
  description: >-
    Seconds since the launch at which every proof first held (the ready verdict follows the
    settle window later); null when they never held.
  returned: always
  type: float
  sample: 4.21
log_bytes_read:
  description: Bytes of the log read by this check.
  returned: always
  type: int
"""

from typing import Any, Dict, List, Optional

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import _exit, _logpatterns, _readiness, _record
from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError

SETTLE_MAX_S = 600.0


def argument_spec() -> Dict[str, Any]:
    return dict(
        name=dict(type="str"),
        state_dir=dict(type="path"),
        record=dict(type="dict"),
        timeout=dict(type="float", default=1200.0),
        poll_interval=dict(type="float", default=0.2),
        ready_patterns=dict(type="list", elements="str"),
        extra_ready_patterns=dict(type="list", elements="str", default=[]),
        fatal_patterns=dict(type="list", elements="str"),
        extra_fatal_patterns=dict(type="list", elements="str", default=[]),
        extra_benign_patterns=dict(type="list", elements="str", default=[]),
        settle=dict(type="float", default=_readiness.SETTLE_DEFAULT_S),
        expect=dict(type="dict"),
        health=dict(type="str", default="health", choices=list(_readiness.HEALTH_CHOICES)),
        api_key=dict(type="str", no_log=True),
        node_rank=dict(type="int"),
        require_ready_line=dict(type="bool", default=True),
    )


def load_record(params: Dict[str, Any]) -> Dict[str, Any]:
    """The explicit record, or <state_dir>/<name>.json."""
    if params["record"] is not None:
        return dict(params["record"])
    state_dir = params["state_dir"] or _record.default_state_dir()
    name = _record.validate_name(params["name"])
    path = _record.record_path(state_dir, name)
    try:
        record = _record.read_record(state_dir, name)
    except SglangError as exc:
        details = dict(exc.details)
        details.setdefault("reason", "record_invalid")  # what a failed read means here
        raise SglangError(exc.msg, **details)
    if record is None:
        raise SglangError("no launch record for instance %r at %s: launch it first with "
                          "llmops.sglang.sglang_launch" % (name, path), reason="record_missing")
    record.setdefault("state_dir", state_dir)
    record.setdefault("name", name)
    return record


def build_options(params: Dict[str, Any], record: Dict[str, Any]) -> _readiness.Options:
    if params["timeout"] <= 0:
        raise SglangError("timeout must be > 0 (got %s)" % params["timeout"], reason="invalid_argument")
    if not 0.01 <= params["poll_interval"] <= 60:
        raise SglangError("poll_interval must be between 0.01 and 60 s (got %s)"
                          % params["poll_interval"], reason="invalid_argument")
    if not 0 <= params["settle"] <= SETTLE_MAX_S:
        raise SglangError("settle must be between 0 and %.0f s (got %s)" % (SETTLE_MAX_S, params["settle"]),
                          reason="invalid_argument")
    ready: List[str] = list(params["ready_patterns"] if params["ready_patterns"] is not None
                            else _logpatterns.READY_PATTERNS) + list(params["extra_ready_patterns"])
    fatal: List[str] = list(params["fatal_patterns"] if params["fatal_patterns"] is not None
                            else _logpatterns.FATAL_PATTERNS) + list(params["extra_fatal_patterns"])
    benign: List[str] = list(_logpatterns.BENIGN_PATTERNS) + list(params["extra_benign_patterns"])
    # Fail on a bad regex now, with the option's name, not mid-wait.
    _logpatterns.compile_patterns(ready, "ready_patterns")
    _logpatterns.compile_patterns(fatal, "fatal_patterns")
    _logpatterns.compile_patterns(benign, "extra_benign_patterns")
    expect = params["expect"] if params["expect"] is not None else (record.get("expect") or {})
    if not isinstance(expect, dict):
        raise SglangError("expect must be a dict of /server_info fields", reason="invalid_argument")
    node_rank: Optional[int] = params["node_rank"]
    if node_rank is None:
        node_rank = int(record.get("node_rank") or 0)
    if node_rank < 0:
        raise SglangError("node_rank must be >= 0 (got %d)" % node_rank, reason="invalid_argument")
    return _readiness.Options(
        timeout=params["timeout"], poll_interval=params["poll_interval"], ready_patterns=ready,
        fatal_patterns=fatal, benign_patterns=benign, settle=params["settle"], expect=dict(expect),
        health=params["health"], api_key=params["api_key"] or None, node_rank=node_rank,
        require_ready_line=params["require_ready_line"])


def _body(module: AnsibleModule) -> Dict[str, Any]:
    try:
        record = load_record(module.params)
        opts = build_options(module.params, record)
        outcome = _readiness.wait_ready(record, opts)
    except SglangError as exc:  # its reason stays the one set where it was raised
        raise SglangError(exc.msg, **dict(exc.details, ready=False, changed=False))
    result = dict(outcome.details, ready=outcome.ready, reason=outcome.reason, changed=False,
                  msg=outcome.msg)
    if not outcome.ready:
        raise SglangError(result.pop("msg"), **result)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_one_of=[("name", "record")],
        mutually_exclusive=[("name", "record")],
        supports_check_mode=True,
    )
    _exit.run(module, _body, "sglang_ready", [module.params["api_key"]])


if __name__ == "__main__":
    main()
