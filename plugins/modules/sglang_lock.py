#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module sglang_lock: the operation lock of one instance, held across a play."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_lock
short_description: Take or release the operation lock of an SGLang instance, naming its holder
version_added: "0.2.0"
description:
  - A restart (plan, teardown, launch, ready, verify) or a teardown of one instance is several
    module calls. The lock C(<state_dir>/<name>.restart.lock) keeps two playbook runs from
    acting on the same instance at once. The per-call lock the other modules hold while they
    act (C(<name>.lock)) is separate and still taken.
  - The lock file records its holder - the controller (fully qualified host name, user, the
    pid of the C(ansible-playbook) process and its start time, boot id, machine id and PID
    namespace), the play, the inventory host and since when (host clock) - so a refusal
    always says who holds it and for how long.
  - O(state=present) takes the lock. A lock held by this same run for the same inventory host
    is reported unchanged. A lock whose holder is B(provably gone) is taken over at once - the
    same controller (host and machine id), and its C(ansible-playbook) pid no longer runs, is
    now another process (another start time), or the controller was rebooted since. A lock
    held from another controller, or one that records no holder, is refused with reason
    V(locked), its holder and its age, and taken over only when it is older than O(ttl).
  - O(state=absent) removes the lock when this run holds it (same controller process and
    inventory host), or any lock with O(force=true). Another holder's lock is kept and named in
    RV(kept); that is not a failure.
  - Runs through its action plugin, which adds the controller's identity and judges, on the
    controller, whether a holder is still alive. Use the fully qualified name
    C(llmops.sglang.sglang_lock).
  - Taking, replacing and removing the lock are atomic (the complete record is written to a
    temporary file that is linked or renamed into place, under a C(flock) of the state
    directory). A lock that cannot be written (a full disk) fails with reason V(lock_failed)
    and leaves no file behind.
  - Check mode reports what would happen and writes nothing (not even the state directory).
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - Linux on the controller for the liveness check of a holder (C(/proc)); elsewhere only the
    O(ttl) rule frees a left-over lock.
options:
  name:
    description: Instance name; the lock is C(<state_dir>/<name>.restart.lock).
    type: str
    required: true
  state:
    description: V(present) takes the lock, V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  ttl:
    description:
      - Seconds after which a lock whose holder cannot be checked from this controller (another
        controller, nothing recorded) is taken over. The last resort; V(0) never.
      - A holder proven alive is never taken over, whatever the age.
      - With O(state=present), also the holder's own lifetime, recorded in the lock (C(lifetime)), so
        another controller takes this lock over only after the longer of its own O(ttl) and this one,
        counted from the lock's last sign of life (C(refreshed), set by this run taking it again, or
        M(llmops.sglang.sglang_ready)'s O(llmops.sglang.sglang_ready#module:refresh_lock) while it
        waits). The roles compute it from every step their run may take (the C(llmops.sglang.lock_lifetime) filter).
    type: float
    default: 0
  force:
    description: With O(state=absent), remove the lock whoever holds it.
    type: bool
    default: false
  token:
    description: With O(state=absent), also remove the lock whose token (C(token) in RV(holder)) is this value.
    type: str
  holder:
    description:
      - Set by the action plugin (the controller's identity, the play, the inventory host); not
        meant to be given by hand.
    type: dict
  takeover:
    description:
      - Set by the action plugin - replace the lock only while it still is this one (its token).
    type: str
  takeover_reason:
    description: Set by the action plugin - why the old holder is gone, returned in RV(taken_over).
    type: str
extends_documentation_fragment:
  - llmops.sglang.common.state_dir
  - llmops.sglang.common.unused_gpu_backend
  - llmops.sglang.common.unused_api_key
notes:
  - Supports check mode and diff (the holder line before and after).
  - Failure reasons - V(locked) (held by someone else; RV(holder), RV(age)), V(lock_failed)
    (cannot be written or removed), V(bad_name), V(error).
"""

EXAMPLES = r"""
- name: Take the lock of the instance for this run
  llmops.sglang.sglang_lock:
    name: extraction
    state_dir: /var/lib/llmops-sglang
    ttl: 3000
  register: lock

- name: Release it (only if this run holds it)
  llmops.sglang.sglang_lock:
    name: extraction
    state_dir: /var/lib/llmops-sglang
    state: absent

- name: Break a lock left by a run on another controller that is known to be gone
  llmops.sglang.sglang_lock:
    name: extraction
    state: absent
    force: true
"""

RETURN = r"""
lock_path:
  description: The lock file.
  returned: always
  type: str
  sample: /var/lib/llmops-sglang/extraction.restart.lock
holder:
  description:
    - The lock's holder after the call (O(state=present)), or the holder that refused it
      (reason V(locked)).
    - C(controller) (host, user, program, pid, pid_start, boot_id, machine_id, pid_ns), C(play),
      C(inventory_host), C(since) (epoch seconds, host clock), C(since_iso), C(token).
  returned: when state=present
  type: dict
  sample: {controller: {host: ctl.example.com, user: ops, pid: 4242, pid_start: 1234567},
           play: Restart SGLang in extraction mode, inventory_host: gpu-1,
           since: 1796000000.0, since_iso: "2026-12-01T10:00:00Z", token: 3f2a...}
holder_text:
  description: RV(holder) in one line (who, which play, since when, how long ago).
  returned: when a holder is known
  type: str
  sample: ansible-playbook pid 4242 of ops@ctl.example.com (play 'Restart', host gpu-1), since 2026-12-01T10:00:00Z (40 s ago)
previous:
  description: The holder that was replaced (takeover) or removed (O(state=absent)).
  returned: when one was
  type: dict
taken_over:
  description: Why the previous holder's lock was taken over (its run is gone, or the O(ttl) rule).
  returned: when a lock was taken over
  type: str
  sample: its ansible-playbook (pid 4242) is no longer running
age:
  description: Seconds the refusing lock has been held.
  returned: when reason is locked
  type: float
verdict:
  description: The controller's judgement of the refusing holder - V(alive), V(foreign), V(self).
  returned: when reason is locked
  type: str
kept:
  description: With O(state=absent), the lock that was left in place because another run holds it.
  returned: when state=absent
  type: str
reason:
  description: V(taken), V(taken_over), V(held), V(released), V(not_held), V(kept), or the failure code.
  returned: always
  type: str
"""

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


def _present(module: AnsibleModule, state_dir: str) -> dict:
    p = module.params
    return _lock.take(state_dir, p["name"], p["holder"], takeover=p["takeover"], takeover_reason=p["takeover_reason"],
                      check_mode=module.check_mode, diff=module._diff,
                      lifetime=p["ttl"] or None)  # this run's own lifetime, for other controllers


def _absent(module: AnsibleModule, state_dir: str) -> dict:
    p = module.params
    out = _lock.release(state_dir, p["name"], p["holder"], token=p["token"], force=p["force"],
                        check_mode=module.check_mode)
    reason = "released" if out["changed"] else ("kept" if out["kept"] else "not_held")
    result = dict(changed=out["changed"], reason=reason, lock_path=out["path"])
    if out["previous"] is not None:
        result["previous"] = out["previous"]
    if out["kept"]:
        result["kept"] = out["kept"]
        module.warn("the lock %s is held by %s; left in place" % (out["path"], out["kept"]))
    if module._diff and out["changed"]:
        result["diff"] = {"before": _lock.describe_holder(out["previous"]) + "\n", "after": "(not held)\n"}
    return result


def _run(module: AnsibleModule) -> dict:
    p = module.params
    _record.validate_name(p["name"])
    holder = p["holder"] or {}
    if not isinstance(holder.get("controller"), dict) and not (p["state"] == "absent" and (p["force"] or p["token"])):
        raise SglangError("sglang_lock needs its action plugin (it records the controller that holds the "
                          "lock): call it as llmops.sglang.sglang_lock", reason="bad_option")
    p["holder"] = holder
    state_dir = p["state_dir"] or _record.default_state_dir()
    return _present(module, state_dir) if p["state"] == "present" else _absent(module, state_dir)


def _body(module: AnsibleModule) -> dict:
    """_run, its failures in the lock's words (lock_path, the holder's line; an OSError names
    the state dir, reason lock_failed); _exit.run ends the module, redacted like every module."""
    try:
        return _run(module)
    except SglangError as exc:
        raise SglangError(exc.msg, **_lock.failure_details(exc.details)) from exc
    except OSError as exc:
        where = exc.filename or module.params["state_dir"] or _record.default_state_dir()
        raise SglangError("sglang_lock: %s: %s" % (where, exc.strerror or exc), reason="lock_failed") from exc


def main() -> None:
    _exit.started()
    module = AnsibleModule(
        argument_spec=_options.merged(
            _options.GROUP,
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            ttl=dict(type="float", default=0.0),
            force=dict(type="bool", default=False),
            token=dict(type="str", no_log=False),
            holder=dict(type="dict"),
            takeover=dict(type="str"),
            takeover_reason=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    _exit.run(module, _body, "sglang_lock")


if __name__ == "__main__":
    main()
