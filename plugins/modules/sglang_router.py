#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""List, add or remove one worker of an SGLang router, and wait until the router agrees."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router
short_description: Add, remove or list the workers of an SGLang router (sglang-router)
version_added: "0.2.0"
description:
  - Talks to an SGLang router (the C(sglang-router) pip package, C(python -m
    sglang_router.launch_router)) over HTTP from wherever the router is reachable - usually
    C(delegate_to) the controller or the router's host.
  - Detects which worker API the router has and uses it - C(GET/POST /workers) and
    C(DELETE /workers/{id}) with the router's worker UUID (sglang-router 0.2 and later, checked
    on 0.3.2), or C(/list_workers), C(/add_worker?url=), C(/remove_worker?url=) (older routers,
    checked on 0.1.9).
  - O(state=absent) takes the worker out of the router and (with O(wait)) waits until the router
    no longer lists it, so that no new request is routed to it. Requests already running on
    it (streams too) run to their end; drain them with M(llmops.sglang.sglang_drain).
    It never takes out the last healthy worker - at least O(min_healthy) other healthy workers
    must stay in the router (waiting up to O(min_healthy_timeout) for them), otherwise it fails
    with RV(reason=last_healthy_worker) and changes nothing.
  - O(state=present) adds the worker and (with O(wait)) waits until the router lists it as
    healthy. A worker that is already listed is not added again.
  - O(state=listed) only reads - the router's workers and this worker's entry.
  - A worker is matched by its normalised URL (scheme, host, port, path; case and a trailing
    slash ignored), else by the same scheme and port on a host name that resolves to the same
    address.
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - requests (the Python library) on the host that runs the module.
options:
  router_url:
    description:
      - The router's base URL, for example V(http://router.example:30000).
    type: str
    required: true
  router_api_key:
    description:
      - Sent as an C(Authorization) bearer token to the router (a control-plane key where the router
        protects its worker API), only to O(router_url) - no redirect is followed (a 3xx answer
        fails with RV(reason=router_refused)). Never returned.
      - Until 0.6.0 this was O(api_key), which is now the servers' key of the action group and never
        sent to the router - a router that answers 401/403 is refused with a hint naming this option.
    type: str
    version_added: 0.6.0
  worker_url:
    description:
      - The worker's URL as the router knows it, for example V(http://gpu-node-03:30000).
      - Required with O(state=present) and O(state=absent).
    type: str
  state:
    description:
      - V(present) - in the router (and healthy, with O(wait)); V(absent) - out of the router;
        V(listed) - change nothing, return the router's workers.
    type: str
    choices: [present, absent, listed]
    default: listed
  wait:
    description:
      - Wait until the router lists the worker healthy (V(present)) or no longer lists it
        (V(absent)). Both APIs queue changes, so without it the router may still route to a
        worker that was just taken out.
    type: bool
    default: true
  timeout:
    description:
      - Seconds O(wait) waits at most (the legacy API's C(/add_worker) answers only once the
        worker is healthy and gets this long too).
    type: float
    default: 600
  min_healthy:
    description:
      - With O(state=absent) - how many other healthy workers must stay in the router. V(0)
        allows taking out the last one.
    type: int
    default: 1
  min_healthy_timeout:
    description:
      - With O(state=absent) - seconds to wait for O(min_healthy) other healthy workers (for
        example a host of the previous batch coming back) before refusing. V(0) refuses at once.
    type: float
    default: 0
  poll_interval:
    description:
      - Seconds between two reads of the router's workers while waiting (0.05 to 60).
    type: float
    default: 0.5
  request_timeout:
    description:
      - Seconds each HTTP request to the router may take in all - connect, headers and body (a
        router that trickles its answer is cut off there, RV(reason=router_unreachable)). A body
        over 16 MiB is no answer.
    type: float
    default: 10
  api:
    description:
      - The router's worker API. V(auto) detects it (C(GET /workers), then C(GET /list_workers)).
    type: str
    choices: [auto, workers, legacy]
    default: auto
extends_documentation_fragment:
  - llmops.sglang.common.unused_state_dir
  - llmops.sglang.common.unused_gpu_backend
  - llmops.sglang.common.unused_api_key
attributes:
  check_mode:
    support: full
    description: Reads the router and reports what would change (with the diff); adds and removes nothing and does not wait.
  diff_mode:
    support: full
    description: The router's worker URLs before and after.
notes:
  - Failures carry RV(reason) - V(router_unreachable) (no answer, connection refused, timeout),
    V(router_refused) (an HTTP error from the router, 401/403 with a hint about O(router_api_key); or
    not a router), V(last_healthy_worker) (refused, nothing changed), V(timeout) (the router
    did not list the worker healthy / did not drop it in time), V(invalid_argument),
    V(missing_library).
  - The router's own health checks (C(--health-check-interval-secs), default 60 s, 3 failures)
    are slow to notice a stopped worker; taking it out first is what keeps requests from being
    sent to it.
seealso:
  - module: llmops.sglang.sglang_drain
  - module: llmops.sglang.sglang_ready
"""

EXAMPLES = r"""
- name: Take this host out of the router (never the last healthy worker)
  llmops.sglang.sglang_router:
    router_url: http://router.example:30000
    worker_url: "http://{{ inventory_hostname }}:30000"
    state: absent
    min_healthy: 1
    min_healthy_timeout: 300
  delegate_to: localhost

- name: Put it back and wait until the router lists it healthy
  llmops.sglang.sglang_router:
    router_url: http://router.example:30000
    worker_url: "http://{{ inventory_hostname }}:30000"
    state: present
    timeout: 300
  delegate_to: localhost

- name: List the router's workers
  llmops.sglang.sglang_router:
    router_url: http://router.example:30000
  delegate_to: localhost
  register: router
"""

RETURN = r"""
action:
  description: V(remove), V(add) or V(none).
  returned: always
  type: str
api:
  description: The router's worker API - V(workers) (0.2 and later) or V(legacy).
  returned: always
  type: str
router_url:
  description: The router's URL, normalised.
  returned: always
  type: str
worker_url:
  description: The worker's URL as given.
  returned: always
  type: str
worker:
  description: This worker's entry in the router afterwards (null when not listed).
  returned: always
  type: dict
  sample: {url: "http://gpu-node-03:30000", id: 6685b65e-1554-4760-805a-16860cb263a9, is_healthy: true, load: 0}
workers:
  description: Every worker the router lists afterwards (url, id, is_healthy, load; id and health are null on the legacy API).
  returned: always
  type: list
  elements: dict
healthy_workers:
  description: Workers listed afterwards that are healthy (or, on the legacy API, listed).
  returned: always
  type: int
total_workers:
  description: Workers listed afterwards.
  returned: always
  type: int
elapsed:
  description: Seconds the module took, waits included.
  returned: always
  type: float
reason:
  description: On failure, the code (see notes).
  returned: failure
  type: str
"""

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

from typing import Any, Dict

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _router
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch


def argument_spec() -> Dict[str, Any]:
    # GROUP: the action group's shared options, the servers' api_key among them - never the
    # router's (router_api_key): module_defaults on the group must not send a server key to a router.
    return _options.merged(
        _options.GROUP,
        router_url=dict(type="str", required=True),
        router_api_key=dict(type="str", no_log=True),
        worker_url=dict(type="str"),
        state=dict(type="str", default="listed", choices=list(_router.STATES)),
        wait=dict(type="bool", default=True),
        timeout=dict(type="float", default=600.0),
        min_healthy=dict(type="int", default=1),
        min_healthy_timeout=dict(type="float", default=0.0),
        poll_interval=dict(type="float", default=0.5),
        request_timeout=dict(type="float", default=10.0),
        api=dict(type="str", default="auto", choices=list(_router.API_CHOICES)),
    )


def _body(module: AnsibleModule) -> Dict[str, Any]:
    p = module.params
    client = _router.RouterClient(p["router_url"], api_key=p["router_api_key"], timeout=p["request_timeout"],
                                  api=p["api"])
    result = _router.ensure(client, _router.Options(
        worker_url=p["worker_url"], state=p["state"], wait=p["wait"], timeout=p["timeout"],
        min_healthy=p["min_healthy"], min_healthy_timeout=p["min_healthy_timeout"],
        poll_interval=p["poll_interval"], check_mode=module.check_mode))
    if not module._diff:
        result.pop("diff", None)
    return result


def main() -> None:
    _exit.started()
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True,
                           required_if=[("state", "present", ("worker_url",)),
                                        ("state", "absent", ("worker_url",))])
    _depsearch.require(module, ("requests",), import_them=True)
    _exit.run(module, _body, "sglang_router", [module.params["router_api_key"], module.params["api_key"]])


if __name__ == "__main__":
    main()
