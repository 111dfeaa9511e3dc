#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait (bounded) until an SGLang server runs and queues no request."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_drain
short_description: Wait until an SGLang server has no running and no waiting request (bounded)
version_added: "0.2.0"
description:
  - Polls the server's own load until it reports no running and no waiting request for
    O(settle) seconds in a row, at most O(timeout) seconds. Run it after the router stopped
    routing to the server (M(llmops.sglang.sglang_router) with O(llmops.sglang.sglang_router#module:state=absent)) and
    before its teardown, so that no request is cut when the server stops.
  - The load comes from C(GET /get_load) (sglang 0.5.6 and earlier - C(num_reqs),
    C(num_waiting_reqs) per DP rank), else C(GET /v1/loads) (0.5.23 - C(num_running_reqs),
    C(num_waiting_reqs)), else the C(/metrics) gauges C(sglang:num_running_reqs) and
    C(sglang:num_queue_reqs) (only with C(--enable-metrics)). The first one that answers is
    kept.
  - SGLang's own SIGTERM drain has no upper bound; this wait has one. What happens at the
    deadline is O(on_timeout) - fail (nothing was stopped) or proceed to the teardown, whose
    grace period (SIGTERM, then SIGKILL) bounds the rest.
  - A port nothing listens on has nothing to drain - RV(reason=unreachable), not a failure.
  - Only the instance's server is asked - every process listening on O(port) must be a member of
    a recognised sglang server (C(python -m sglang.launch_server) or C(sglang serve) command line)
    of O(server_user), wholly that user's (real, effective and saved uids, no setuid or setgid
    program), in the module's PID namespace, and one of its sockets must cover O(host) - the
    probe's rule for O(api_key). Anything else gets no request and no key, with or without
    O(api_key), and the drain fails with RV(reason=foreign_listener). The proof is re-checked
    before every reading (the same processes on the same addresses of the port; a sliced wait
    hands the proven holders to its next slice).
  - A proven server that listens but does not answer within O(request_timeout) fails with
    RV(reason=server_unresponsive) - its load is unknown, not zero.
  - Read-only - it only sends C(GET) requests to the server.
  - "Live progress: the collection's action plugin of the same name (used automatically for
    C(llmops.sglang.sglang_drain) tasks) runs the wait in slices of O(slice_seconds) and prints,
    between slices, one line per host, for example C(gpu-07 extraction: draining, 12 requests in
    flight (35s of 300s)), then C(... drained in 41s). Each slice goes on from where the previous
    one stopped (the same start, samples, idle time and source); the timeout, the verdict and the
    result are those of one uninterrupted wait. Nothing is printed when the stdout callback is a
    machine format (anything but V(default), V(minimal), V(oneline) and the human community
    callbacks - V(json), V(yaml), ansible-runner's V(awx_display) included);
    C(LLMOPS_SGLANG_PROGRESS=always) or V(never) overrides that."
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - psutil and requests for the Python that runs the module (the sglang venv has both); without
    them it fails with RV(reason=missing_library), naming an interpreter on the host that has them.
options:
  host:
    description:
      - Where the server listens, as seen from the host the module runs on - an address of that
        host (the drain proves who holds the port there). Wildcard addresses (V(0.0.0.0), V(::))
        are reached through loopback.
    type: str
    default: 127.0.0.1
  server_user:
    description:
      - The user whose sglang server may be asked (and receive O(api_key)). Default - the user this
        module runs as (the user C(sglang_launch) starts servers as).
    type: str
  port:
    description:
      - The server's port (C(--port)).
    type: int
    required: true
  name:
    description:
      - The instance the server belongs to; only used to label the progress lines (without it
        they name the port).
    type: str
  api_key:
    description:
      - The server's C(--api-key) (C(/get_load) and C(/v1/loads) need it when one is set).
        Never returned.
    type: str
  timeout:
    description:
      - Seconds to wait at most for the server to become idle.
    type: float
    default: 300
  settle:
    description:
      - Seconds the server must stay idle before it counts as drained (a request the router
        sent just before it dropped the worker still arrives). Cut short at the deadline.
    type: float
    default: 2
  poll_interval:
    description:
      - Seconds between two readings (0.05 to 60).
    type: float
    default: 1
  sources:
    description:
      - The load endpoints to try, in order.
    type: list
    elements: str
    choices: [get_load, v1_loads, metrics]
    default: [get_load, v1_loads, metrics]
  on_timeout:
    description:
      - V(fail) - fail with RV(reason=timeout) (the server keeps serving what it runs);
        V(proceed) - return RV(drained=false) and let the teardown's grace period bound the rest.
    type: str
    choices: [fail, proceed]
    default: fail
  request_timeout:
    description:
      - Seconds each HTTP request may take in all - connect, headers and body (a listener that
        trickles its answer is cut off there). A body over 16 MiB is no answer.
    type: float
    default: 5
  slice_seconds:
    description:
      - Length of one slice of the wait when it runs through the action plugin (live progress
        between slices). V(0) waits in one call and prints no progress.
      - The default comes from the environment variable C(LLMOPS_SGLANG_DRAIN_SLICE_SECONDS)
        on the controller, else V(10).
      - The module itself, run without the action plugin, ignores this option and waits in one
        call. Must be between 0 and 600.
    type: float
  _resume:
    description:
      - Private to the collection's action plugin - do not set it. The state of a sliced wait
        (V({}) for its first slice, then what the previous slice returned); with it, the module
        waits at most about O(slice_seconds) and answers RV(pending) when the slice ends before
        the verdict.
    type: dict
extends_documentation_fragment:
  - llmops.sglang.common.unused_state_dir
  - llmops.sglang.common.unused_gpu_backend
attributes:
  check_mode:
    support: full
    description: Reads the load once and returns it; does not wait.
  diff_mode:
    support: none
    description: Nothing changes.
notes:
  - Failures carry RV(reason) - V(timeout), V(unauthorized), V(no_load_source) (none of the
    endpoints reports a load), V(foreign_listener) (the port is held by something that is not
    the instance's server; nothing was sent), V(server_unresponsive), V(missing_library) (psutil
    or requests), V(invalid_argument).
seealso:
  - module: llmops.sglang.sglang_router
  - module: llmops.sglang.sglang_teardown
"""

EXAMPLES = r"""
- name: Wait up to 10 minutes for the requests still running on this server
  llmops.sglang.sglang_drain:
    port: 30000
    timeout: 600
    api_key: "{{ vault_sglang_api_key }}"

- name: Drain what can be drained in 2 minutes, then let the teardown stop the rest
  llmops.sglang.sglang_drain:
    port: 30000
    timeout: 120
    on_timeout: proceed
"""

RETURN = r"""
drained:
  description: Whether the server ran and queued nothing at the end (true when nothing listens on the port).
  returned: always
  type: bool
reason:
  description: V(drained), V(unreachable) (nothing listens), V(check_mode) or V(timeout) (with O(on_timeout=proceed)).
  returned: always
  type: str
load:
  description: The last reading - running, waiting and the source endpoint (null when unreachable).
  returned: always
  type: dict
  sample: {running: 0, waiting: 0, source: get_load}
source:
  description: The endpoint the load was read from - V(get_load), V(v1_loads) or V(metrics).
  returned: always
  type: str
peak:
  description: The highest running + waiting count seen during the wait.
  returned: always
  type: int
samples:
  description: The readings that differed from the one before (at most the last 50), with seconds since the start.
  returned: always
  type: list
  elements: dict
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
pending:
  description: >-
    A slice of a sliced wait ended before the verdict. Only in the private results the action
    plugin reads between slices (with RV(progress) and the state to go on); never in a task's
    result.
  returned: between slices, to the action plugin only
  type: bool
progress:
  description: >-
    Where a pending wait stands - C(running), C(waiting), C(source), C(elapsed), C(timeout),
    C(settle) and C(idle_for) (seconds idle so far, null while requests run).
  returned: between slices, to the action plugin only
  type: dict
  sample: {running: 10, waiting: 2, source: get_load, elapsed: 35.1, timeout: 300, settle: 2, idle_for: null}
"""

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

import time
from typing import Any, Dict

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _drain
from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _drain_target
from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


SLICE_MAX_S = 600.0


def argument_spec() -> Dict[str, Any]:
    return _options.merged(
        _options.GROUP,
        host=dict(type="str", default="127.0.0.1"),
        port=dict(type="int", required=True),
        name=dict(type="str"),
        timeout=dict(type="float", default=300.0),
        settle=dict(type="float", default=2.0),
        poll_interval=dict(type="float", default=1.0),
        sources=dict(type="list", elements="str", choices=list(_drain.SOURCES),
                     default=list(_drain.SOURCES)),
        on_timeout=dict(type="str", default="fail", choices=list(_drain.ON_TIMEOUT)),
        request_timeout=dict(type="float", default=5.0),
        server_user=dict(type="str"),
        slice_seconds=dict(type="float"),
        # Private, set by the action plugin: run one slice ({} first, then the previous slice's
        # resume_state) and answer pending when it ends before a verdict.
        _resume=dict(type="dict"),
    )


def _slice_seconds(params: Dict[str, Any]) -> float:
    value = params["slice_seconds"]
    value = 10.0 if value is None else value
    if not 0 < value <= SLICE_MAX_S:
        raise SglangError("slice_seconds must be > 0 and <= %.0f for a sliced wait (got %s)"
                          % (SLICE_MAX_S, value), reason="invalid_argument")
    return value


def _body(module: AnsibleModule) -> Dict[str, Any]:
    p = module.params
    if not 1 <= p["port"] <= 65535:
        raise SglangError("port must be 1-65535 (got %d)" % p["port"], reason="invalid_argument")

    target = _drain_target.Target(p["host"], p["port"], p["server_user"] or _drain_target.module_user(),
                                  p["api_key"], p["request_timeout"])
    if p["_resume"]:
        target.resume(p["_resume"].get("proven"))
    fetch = target.fetch

    opts = _drain.Options(timeout=p["timeout"], poll_interval=p["poll_interval"], settle=p["settle"],
                          sources=list(p["sources"]), on_timeout=p["on_timeout"], check_mode=module.check_mode)
    if p["_resume"] is None:
        result = _drain.drain(fetch, opts)
    else:  # one slice of the action plugin's sliced wait
        step = _drain.drain_slice(fetch, opts, p["_resume"] or None, _slice_seconds(p))
        if step.result is None:
            return {"changed": False, "drained": False, "pending": True, "reason": "pending",
                    "msg": "draining", "progress": _drain.progress(step.state, opts, time.monotonic()),
                    "resume_state": dict(step.state.to_dict(), proven=target.to_state())}
        result = step.result
    if not result["drained"] and result["reason"] == "timeout":
        module.warn(result["msg"])
    return result


def main() -> None:
    _exit.started()
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    _depsearch.require(module)
    _exit.run(module, _body, "sglang_drain", [module.params["api_key"]])


if __name__ == "__main__":
    main()
