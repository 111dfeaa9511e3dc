#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin sglang_restart_outcome (plugins/action): it runs on the
controller, and on the host only through llmops.sglang.sglang_ready and sglang_lock."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_restart_outcome
short_description: Check an SGLang instance once more and say where the host stands after a restart
version_added: "0.6.0"
description:
  - The last step of the C(llmops.sglang.sglang_restart) role, an action plugin. On the host it re-checks the
    instance with M(llmops.sglang.sglang_ready) (its launch record as it is now - process, port owner,
    C(/server_info), health), holding the server until O(hold) seconds have passed since its ready line, and gives
    the operation lock back with M(llmops.sglang.sglang_lock) when O(release_lock) asks.
  - When the state machine says so (a server of this run, ready and proven; not in check mode, not after a
    refusal, never in the O(final) call), the re-check call that holds the server to the end of O(hold) also makes
    it the instance's last proven-good launch (M(llmops.sglang.sglang_ready)'s C(promote)), what a later rollback
    restores. A server that dies inside the hold is never promoted.
  - On the controller it feeds that check and the restart's step results (O(data)) to the restart's state machine
    (C(plugins/module_utils/_restart/_restart_outcome.py), also the C(llmops.sglang.restart_outcome) filter)
    and sets the fact C(sglang_restart_result) - C(state), C(head), C(summary), C(cause), C(failed),
    C(rollback_due) and the steps' results.
  - Prints the summary (one plain line each, for a human stdout callback; in RV(msg) for any other), unless a
    rollback is due - then the call after the rollback (O(final)) prints it. Never fails - the role's last task
    fails the host.
  - docs/roles.md ("The summary's contract") says, per state, its wording and what is true on the host when it is
    printed.
options:
  data:
    description: The state machine's input - the restart's settings and every step's result (the role passes
      C(__sglang_restart_inputs)).
    type: dict
    required: true
  check:
    description: The re-check - C(name), C(state_dir), C(health), C(api_key), C(timeout), C(extra_ready_patterns),
      C(extra_fatal_patterns) (options of M(llmops.sglang.sglang_ready)). Without it, nothing is checked on the host.
      On a converged run whose server is the host's last proven-good launch the role runs no readiness wait; this
      check is then the only one, and its call gives the operation lock back once the server is ready and its ready
      line is at least O(hold) seconds old.
    type: dict
  wait_timeout:
    description: The readiness wait's timeout (C(sglang_restart_timeout)), used as the check's C(timeout) when the
      check stands in for the readiness wait (a converged run whose server is the last proven-good launch), so a
      busy or briefly stalled server is not called not ready after the short re-check timeout.
    type: float
  hold:
    description: Seconds after its ready line the instance must still serve; the check waits for what is left.
    type: float
    default: 0
  release_lock:
    description: C(name) and C(state_dir) of the operation lock to give back (this run's, by its holder) when the
      state machine says this run still holds it (not in check mode, not given back by the readiness wait), unless a
      rollback is due.
    type: dict
  final:
    description: The call after a rollback - the restart's own step results are taken from O(previous).
    type: bool
    default: false
  previous:
    description: The C(sglang_restart_result) of the call before the rollback.
    type: dict
author:
  - llmops.sglang contributors (@llmops)
"""

EXAMPLES = r"""
- name: Check the instance once more and say where the host stands
  llmops.sglang.sglang_restart_outcome:
    data: "{{ __sglang_restart_inputs }}"
    check: {name: extraction, state_dir: /var/lib/llmops-sglang, health: health}
    hold: 5
"""

RETURN = r"""
msg:
  description: The summary's lines; the first says where the host stands.
  returned: always
  type: list
  elements: str
ansible_facts:
  description: C(sglang_restart_result) (the outcome), C(sglang_restart_failed), C(sglang_restart_teardown).
  returned: always
  type: dict
"""
