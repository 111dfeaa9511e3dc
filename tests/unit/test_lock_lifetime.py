"""The operation lock's lifetime covers every step a restart may take (the prewarm and the
rollback's own readiness wait included), its holder refreshes it while it waits, and a lock
from another controller is taken over only after that long without a sign of life."""
from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.llmops.sglang.plugins.filter.lock_lifetime import breakdown, lock_lifetime
from ansible_collections.llmops.sglang.plugins.module_utils._host import _lock

# the restart role's defaults (roles/sglang_restart/defaults/main.yml)
DEFAULTS = {"ready_timeout": 1200, "teardown_timeout": 60, "grace_period": 30, "spawn_timeout": 30, "settle": 2.0,
            "verify_timeout": 60, "dump_wait": 30, "prewarm_timeout": 1800, "rollback": True}
# what the role computed before: ready + teardown + grace + verify + dump wait + 600
OLD = 1200 + 60 + 30 + 60 + 30 + 600


def test_every_step_counts_the_prewarm_and_the_rollback_included():
    parts = breakdown(DEFAULTS)
    assert parts["prewarm"] == 1800 and parts["rollback"] == 90 + 30 + 1202 + 90
    assert lock_lifetime(DEFAULTS) == sum(parts.values()) == 60 + 180 + 1800 + 90 + 30 + 1202 + 90 + 1412 + 300
    # the old formula left out the prewarm and the rollback's wait: a live run outlived it
    assert lock_lifetime(DEFAULTS) > OLD + 1800 + 1202


def test_without_prewarm_or_rollback_they_cost_nothing():
    lean = dict(DEFAULTS, prewarm_timeout=0, rollback="false")
    assert breakdown(lean)["prewarm"] == 0 and breakdown(lean)["rollback"] == 0
    assert lock_lifetime(lean) == lock_lifetime(DEFAULTS) - 1800 - 1412


def test_the_last_check_through_the_hold_counts_and_again_after_a_rollback():
    """The last check keeps the lock until the server held `hold` seconds after its ready line
    (and the call after a rollback checks again): a lifetime without them let a second controller
    take over the lock of a run still holding a server it could yet roll back."""
    held = dict(DEFAULTS, hold=600, check_timeout=15)
    assert breakdown(held)["check"] == 615 and breakdown(held)["rollback"] == 1412 + 615
    assert lock_lifetime(held) == lock_lifetime(DEFAULTS) + 2 * 615
    assert lock_lifetime(dict(held, rollback=False)) == lock_lifetime(dict(DEFAULTS, rollback=False)) + 615


def test_bad_input_says_which():
    with pytest.raises(ValueError, match="ready_timeout must be a number of seconds"):
        lock_lifetime(dict(DEFAULTS, ready_timeout="soon"))
    with pytest.raises(ValueError, match="needs a dict"):
        lock_lifetime([1, 2])


HOLDER = {"controller": {"host": "ctl-a", "pid": 4242, "pid_start": 1, "machine_id": "m", "boot_id": "b"},
          "play": "Restart", "inventory_host": "gpu-07"}


def test_the_lock_records_its_lifetime_and_a_refresh_moves_its_age(tmp_path):
    state = str(tmp_path)
    took = _lock.take(state, "serving", HOLDER, lifetime=lock_lifetime(DEFAULTS))
    assert took["holder"]["lifetime"] == lock_lifetime(DEFAULTS)
    path = _lock.lock_path(state, "serving")
    # an hour ago
    data = json.load(open(path))
    data["since"] -= 3600
    with open(path, "w") as fh:
        json.dump(data, fh)
    assert 3599 < _lock.lock_age(_lock.read_holder(path)) < 3700
    assert _lock.refresh(state, "serving", "not-the-token")["changed"] is False
    out = _lock.refresh(state, "serving", took["holder"]["token"])
    assert out["changed"] and _lock.lock_age(_lock.read_holder(path)) < 60
    assert _lock.read_holder(path)["token"] == took["holder"]["token"]  # the same lock, refreshed
    # the same run taking it again refreshes it too
    again = _lock.take(state, "serving", HOLDER)
    assert again["reason"] == "held" and again["holder"]["refreshed"] >= out["holder"]["refreshed"]
    assert time.time() - again["holder"]["refreshed"] < 60


def test_a_foreign_lock_is_stale_only_after_its_holders_lifetime():
    why = "held from another controller (ctl-a)"
    life = lock_lifetime(DEFAULTS)
    # a taker with a short ttl of its own waits for the holder's lifetime
    assert _lock.takeover_reason("foreign", why, 2000, 900, lifetime=life) is None
    said = _lock.takeover_reason("foreign", why, life + 1, 900, lifetime=life)
    assert said and "the lifetime its holder recorded" in said
    assert _lock.takeover_reason("foreign", why, 1000, 900) is not None  # a lock without a lifetime: ttl
    assert _lock.takeover_reason("alive", why, 10 ** 6, 900, lifetime=life) is None
    assert _lock.stale_after({"lifetime": life}, 900) == life and _lock.stale_after({}, 900) == 900


def test_check_mode_refreshes_nothing(tmp_path):
    state = str(tmp_path)
    took = _lock.take(state, "serving", HOLDER)
    before = os.stat(_lock.lock_path(state, "serving")).st_mtime_ns
    assert _lock.refresh(state, "serving", took["holder"]["token"], check_mode=True)["changed"]
    assert os.stat(_lock.lock_path(state, "serving")).st_mtime_ns == before
