"""One lock lifetime everywhere (issue 31, item 3): every role and playbook that takes the
operation lock computes its ttl with the lock_lifetime filter from the steps its run may take -
the restart's includes the prewarm and the rollback's own readiness wait, which the old sum left
out. Rendered by Ansible itself (an ad-hoc debug over the roles' defaults and vars)."""
from __future__ import annotations

import os
import subprocess

import yaml

from ansible_collections.llmops.sglang.plugins.filter.lock_lifetime import lock_lifetime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARS = {"restart": "__sglang_restart_lock_ttl", "teardown": "__sglang_teardown_lock_ttl",
        "launch": "__sglang_launch_lock_ttl", "multinode": "sglang_mn_lock_ttl",
        "refresh": "__sglang_restart_lock_token"}


def _defaults(role: str) -> dict:
    """The role's defaults, each one that reads a public inventory name as its fallback value."""
    from test_role_defaults import fallback

    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as fh:
        return {k: fallback(v) for k, v in yaml.safe_load(fh).items()}


def _tasks(items):
    """Every task of a playbook, inside blocks too."""
    for item in items or []:
        yield item
        for key in ("tasks", "block", "rescue", "always"):
            yield from _tasks(item.get(key))


def _rendered(tmp_path, *more: str) -> dict:
    """Each variable as Ansible renders it with the roles' defaults (and the multinode play's vars)."""
    with open(os.path.join(ROOT, "playbooks", "restart_multinode.yml")) as fh:
        plays = yaml.safe_load(fh)
    ttl = [t["llmops.sglang.sglang_lock"]["ttl"] for t in _tasks(plays) if "ttl" in (t.get("llmops.sglang.sglang_lock") or {})]
    extra = tmp_path / "mn.yml"
    # an ad-hoc run has no play, so no ansible_run_tags/ansible_skip_tags: the ones of an untagged play
    extra.write_text(yaml.safe_dump({"sglang_mn_lock_ttl": ttl[0], "ansible_run_tags": ["all"], "ansible_skip_tags": []}))
    args = []
    for role in ("sglang_restart", "sglang_teardown", "sglang_launch"):
        args += ["-e", "@" + os.path.join(ROOT, "roles", role, "defaults", "main.yml"),
                 "-e", "@" + os.path.join(ROOT, "roles", role, "vars", "main.yml")]
    msg = "|".join("%s={{ %s }}" % (k, v) for k, v in VARS.items())
    done = subprocess.run(["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e", "@%s" % extra] + args
                          + list(more) + ["-m", "ansible.builtin.debug", "-a", "msg=%s" % msg, "-o"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.split('"msg": "', 1)[1].split('"', 1)[0]
    return dict(part.split("=", 1) for part in line.split("|"))


def test_every_lock_ttl_is_the_lifetime_of_its_run(tmp_path):
    got = _rendered(tmp_path)
    r = _defaults("sglang_restart")
    restart = lock_lifetime({"ready_timeout": r["sglang_restart_timeout"], "grace_period": r["sglang_restart_grace_period"],
                             "teardown_timeout": r["sglang_restart_teardown_timeout"],
                             "spawn_timeout": r["sglang_restart_spawn_timeout"], "settle": r["sglang_restart_ready_settle"],
                             "verify_timeout": 0, "dump_wait": 0,  # verify: none by default
                             "prewarm_timeout": r["sglang_restart_prewarm_timeout"], "rollback": True,
                             "hold": r["sglang_restart_hold"], "check_timeout": r["sglang_restart_final_check_timeout"]})
    assert float(got["restart"]) == restart
    # the old sum (ready + teardown + grace + verify + dump wait + 600) was shorter than the prewarm
    # plus the rollback's own readiness wait: a second controller took over a live run's lock
    old = (r["sglang_restart_timeout"] + r["sglang_restart_teardown_timeout"] + r["sglang_restart_grace_period"]
           + r["sglang_restart_verify_timeout"] + r["sglang_restart_dump_wait"] + 600)
    assert restart > old + r["sglang_restart_prewarm_timeout"]
    t = _defaults("sglang_teardown")
    assert float(got["teardown"]) == lock_lifetime({"grace_period": t["sglang_teardown_grace_period"],
                                                    "teardown_timeout": t["sglang_teardown_timeout"],
                                                    "introspect_timeout": 0, "rollback": False})
    assert float(got["launch"]) == lock_lifetime({"spawn_timeout": _defaults("sglang_launch")["sglang_launch_spawn_timeout"],
                                                  "rollback": False})
    # the multi-node play: the restart's settings, the peers' wait and then rank 0's
    assert float(got["multinode"]) == lock_lifetime({"ready_timeout": 2 * r["sglang_restart_timeout"],
                                                     "settle": 2 * r["sglang_restart_ready_settle"],
                                                     "prewarm_timeout": r["sglang_restart_prewarm_timeout"],
                                                     "grace_period": r["sglang_restart_grace_period"],
                                                     "spawn_timeout": r["sglang_restart_spawn_timeout"],
                                                     "teardown_timeout": r["sglang_restart_teardown_timeout"],
                                                     "rollback": False})
    assert got["refresh"] == ""  # outside a restart that took the lock: nothing to refresh
    taken = _rendered(tmp_path, "-e", '{"__sglang_restart_plan": {"changed": false, "operation_lock":'
                      ' {"reason": "taken", "holder": {"token": "ab12"}}}}')
    assert taken["refresh"] == "ab12"  # the restart's readiness waits refresh the lock its plan took
