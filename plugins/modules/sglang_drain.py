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
  - A server that does not answer at all has nothing to drain - RV(reason=unreachable), not a
    failure.
  - Read-only - it only sends C(GET) requests to the server.
author:
  - llmops.sglang contributors (@llmops)
options:
  host:
    description:
      - Where the server listens, as seen from the host the module runs on. Wildcard addresses
        (V(0.0.0.0), V(::)) are reached through loopback.
    type: str
    default: 127.0.0.1
  port:
    description:
      - The server's port (C(--port)).
    type: int
    required: true
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
      - Seconds each HTTP request may take.
    type: float
    default: 5
attributes:
  check_mode:
    support: full
    description: Reads the load once and returns it; does not wait.
  diff_mode:
    support: none
    description: Nothing changes.
notes:
  - Failures carry RV(reason) - V(timeout), V(unauthorized), V(no_load_source) (none of the
    endpoints reports a load), V(invalid_argument).
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
  description: Whether the server ran and queued nothing at the end (true for an unreachable server).
  returned: always
  type: bool
reason:
  description: V(drained), V(unreachable), V(check_mode) or V(timeout) (with O(on_timeout=proceed)).
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
"""

from typing import Any, Dict

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import _drain, _exit, _http
from ansible_collections.llmops.sglang.plugins.module_utils._errors import SglangError


def argument_spec() -> Dict[str, Any]:
    return dict(
        host=dict(type="str", default="127.0.0.1"),
        port=dict(type="int", required=True),
        api_key=dict(type="str", no_log=True),
        timeout=dict(type="float", default=300.0),
        settle=dict(type="float", default=2.0),
        poll_interval=dict(type="float", default=1.0),
        sources=dict(type="list", elements="str", choices=list(_drain.SOURCES),
                     default=list(_drain.SOURCES)),
        on_timeout=dict(type="str", default="fail", choices=list(_drain.ON_TIMEOUT)),
        request_timeout=dict(type="float", default=5.0),
    )


def _body(module: AnsibleModule) -> Dict[str, Any]:
    p = module.params
    if not 1 <= p["port"] <= 65535:
        raise SglangError("port must be 1-65535 (got %d)" % p["port"], reason="invalid_argument")

    def fetch(path: str) -> _http.Response:
        return _http.request(p["host"], p["port"], path, p["api_key"], timeout=p["request_timeout"])

    result = _drain.drain(fetch, _drain.Options(
        timeout=p["timeout"], poll_interval=p["poll_interval"], settle=p["settle"],
        sources=list(p["sources"]), on_timeout=p["on_timeout"], check_mode=module.check_mode))
    if not result["drained"] and result["reason"] == "timeout":
        module.warn(result["msg"])
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    _exit.run(module, _body, "sglang_drain", [module.params["api_key"]])


if __name__ == "__main__":
    main()
