"""The sglang_rolling role's decisions and words (plugins/filter/rolling_report.py), one table row
per branch of the Jinja they replaced in roles/sglang_rolling/tasks/main.yml. The expected texts
are the ones that Jinja printed, byte for byte: tests/integration/test_fleet_*.py match them."""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.sglang.plugins.filter.rolling_report import (
    FilterModule, rolling_failure, rolling_put_back, rolling_rolled_back, rolling_summary, rolling_untouched)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
URL = "http://10.0.0.2:8000"

# --- the rescue's facts -------------------------------------------------------------------------


@pytest.mark.parametrize("result, entered, expected", [
    ({"rolled_back": True, "rollback": {"pid": 7}}, True, True),
    ({"rolled_back": True}, False, False),            # failed before the restart began: no rollback of this roll
    ({"rolled_back": False}, True, False),
    ({}, True, False),                                # no restart result at all
    ({"rolled_back": "yes"}, "true", True),           # `| bool` reads inventory-style values
], ids=["rolled-back", "not-entered", "not-rolled-back", "no-result", "bool-strings"])
def test_rolled_back(result, entered, expected):
    assert rolling_rolled_back(result, entered) is expected


@pytest.mark.parametrize("hosts, host, batch, expected", [
    (["w1", "w2", "w3", "w4"], "w2", ["w2"], ["w3", "w4"]),
    (["w1", "w2", "w3", "w4"], "w1", ["w1", "w2"], ["w3", "w4"]),   # its own batch finishes its restart
    (["w4", "w1", "w3", "w2"], "w4", ["w4"], ["w1", "w3", "w2"]),   # the inventory's order, not sorted
    (["w1", "w2"], "w2", ["w2"], []),                                # no host after it
], ids=["serial-1", "batch-of-2", "inventory-order", "last"])
def test_untouched(hosts, host, batch, expected):
    assert rolling_untouched(hosts, host, batch) == expected


@pytest.mark.parametrize("removed, entered, result, fact, expected", [
    ({"changed": True}, False, {}, {}, True),                                       # failed before the restart
    ({"changed": True}, True, {"teardown": {"changed": False}}, {}, True),          # restart failed before stopping
    ({"changed": True}, True, {"teardown": {"targets": [{"pid": 1}]}}, {}, False),  # its server was stopped
    ({"changed": True}, True, {}, {"targets": []}, False),                          # the teardown fact says so
    ({"changed": True}, True, {}, {}, True),
    ({"changed": True}, True, {"teardown": {}}, {"targets": [1]}, True),            # the result wins over the fact
    ({"changed": True}, True, {"teardown": None}, {"targets": [1]}, True),
    (SKIPPED, False, {}, {}, False),                                                # this run never took it out
    ({}, False, {}, {}, False),
    ({"results": [{"changed": False}, {"changed": True}]}, False, {}, {}, True),    # `is changed` on a loop
], ids=["not-entered", "no-targets", "stopped", "fact-stopped", "no-teardown", "result-first", "teardown-none",
        "not-removed", "no-removal", "loop-result"])
def test_put_back(removed, entered, result, fact, expected):
    assert rolling_put_back(removed, entered, result, fact) is expected


# --- the rescue's message -----------------------------------------------------------------------

FAILED = {"host": "w2", "worker_url": URL, "failed_task": "Drain the requests still running on the server",
          "failed_msg": "drain timed out", "rolled_back": False, "restart": {}, "rollback_back": False,
          "added": {}, "rollback_out_msg": None, "readded": SKIPPED, "removed": {"changed": True},
          "listed": True, "untouched": ["w3"]}
ROLLED = dict(FAILED, rolled_back=True, failed_task="Restart the server (plan, teardown, launch, ready, verify)",
              failed_msg="restart of w2 rolled back to the previous configuration (pid 4242)",
              restart={"rolled_back": True, "failed_task": "Wait until the server is ready",
                       "rollback": {"pid": 4242}})
ROLLED_HEAD = ("rolling restart of w2 (http://10.0.0.2:8000) stopped: the new configuration failed at 'Wait until "
               "the server is ready', and the host rolled back to its previous configuration (pid 4242, the "
               "arguments and environment it ran with before).")
ROLLED_TAIL = " The roll stops here: w3 not touched. Fix the new configuration and run again."


@pytest.mark.parametrize("change, expected", [
    ({}, "rolling restart of w2 stopped: 'Drain the requests still running on the server' failed: drain timed out "
         "The worker http://10.0.0.2:8000 is left out of the router. The roll stops here: w3 not touched."),
    # failed before its server was stopped: put back
    ({"readded": {"changed": True, "healthy_workers": 3}},
     "rolling restart of w2 stopped: 'Drain the requests still running on the server' failed: drain timed out "
     "The worker http://10.0.0.2:8000 was put back into the router (its server was not stopped). "
     "The roll stops here: w3 not touched."),
    # never taken out and listed: nothing said about the router
    ({"removed": SKIPPED, "untouched": []},
     "rolling restart of w2 stopped: 'Drain the requests still running on the server' failed: drain timed out "
     "The roll stops here: no host after it."),
    # not listed before (adding it failed): left out
    ({"removed": SKIPPED, "listed": False, "failed_task": "Put the worker back into the router and wait until it "
      "is healthy", "failed_msg": "not healthy after 30 s", "untouched": ["w3", "w4"]},
     "rolling restart of w2 stopped: 'Put the worker back into the router and wait until it is healthy' failed: "
     "not healthy after 30 s The worker http://10.0.0.2:8000 is left out of the router. "
     "The roll stops here: w3, w4 not touched."),
    # the roll's own assert names the host already: its message as it is
    ({"failed_msg": "restart of w2 rolled back to the previous configuration (pid 9)"},
     "rolling restart of w2 stopped: restart of w2 rolled back to the previous configuration (pid 9) "
     "The worker http://10.0.0.2:8000 is left out of the router. The roll stops here: w3 not touched."),
    # rolled back, answered a generation and back in the router
    (dict(ROLLED, rollback_back=True, added={"changed": True, "healthy_workers": 3, "total_workers": 4}),
     ROLLED_HEAD + " It answered a generation and is back in the router, healthy (3 of 4 workers healthy)."
     + ROLLED_TAIL),
    (dict(ROLLED, rollback_back=True, added={"changed": True}),
     ROLLED_HEAD + " It answered a generation and is back in the router, healthy (? of ? workers healthy)."
     + ROLLED_TAIL),
    # rolled back, but the generation or the router failed: left out, with why
    (dict(ROLLED, rollback_out_msg="'Send one /generate request to the server' failed: no text"),
     ROLLED_HEAD + " It is left out of the router: 'Send one /generate request to the server' failed: no text"
     + ROLLED_TAIL),
    # rolled back where this run had not taken it out (it was not listed)
    (dict(ROLLED, removed=SKIPPED, listed=False),
     ROLLED_HEAD + " It is left out of the router (this run had not taken it out)." + ROLLED_TAIL),
    (dict(ROLLED, restart={"rolled_back": True}, untouched=[]),
     "rolling restart of w2 (http://10.0.0.2:8000) stopped: the new configuration failed at '?', and the host rolled "
     "back to its previous configuration (pid ?, the arguments and environment it ran with before). It is left out "
     "of the router (this run had not taken it out). The roll stops here: no host after it. Fix the new "
     "configuration and run again."),
], ids=["left-out", "put-back", "never-out", "not-listed", "own-assert", "rolled-back-in", "rolled-back-in-unknown",
        "rolled-back-out-msg", "rolled-back-not-taken-out", "rolled-back-no-details"])
def test_failure(change, expected):
    assert rolling_failure(dict(FAILED, **change)) == expected


# --- the summary ----------------------------------------------------------------------------------

BEFORE = {"changed": False, "worker": {"url": URL}, "healthy_workers": 3, "total_workers": 3}
ROLLED_HOST = {
    "host": "w2", "worker_url": URL, "check_mode": False, "needed": True, "listed": True, "entered": True,
    "force": False, "plan": {"changed": True, "reason": "config_changed"}, "router_before": BEFORE,
    "removed": {"changed": True, "elapsed": 0.4},
    "added": {"changed": True, "elapsed": 2.1, "healthy_workers": 3, "total_workers": 3},
    "drain": {"changed": True, "reason": "drained", "msg": "no requests", "elapsed": 1.5, "peak": 4},
    "generated": "POST /generate -> 200, 8 tokens: Paris", "prewarm_job": {}, "prewarmed": SKIPPED,
    "restart": {}, "own_prewarm": {}, "next_host": "", "prewarm_started": SKIPPED}
UNCHANGED = dict(ROLLED_HOST, needed=False, entered=False, plan={"changed": False, "reason": "running"},
                 removed=SKIPPED, added=SKIPPED, drain=SKIPPED, generated=None, prewarm_started=SKIPPED)
RESTARTED_LINES = ["w2 (http://10.0.0.2:8000): restarted", "plan: config_changed",
                   "router: out in 0.4 s, back healthy in 2.1 s; 3 of 3 workers healthy",
                   "drain: no requests after 1.5 s, peak 4 requests",
                   "generate: POST /generate -> 200, 8 tokens: Paris", "prewarm: none"]


@pytest.mark.parametrize("data, expected", [
    (ROLLED_HOST, RESTARTED_LINES),
    (UNCHANGED, ["w2 (http://10.0.0.2:8000): unchanged, router untouched", "plan: running",
                 "router: not taken out, no change; 3 of 3 workers healthy", "drain: not needed", "generate: not run",
                 "prewarm: none"]),
    # check mode: the restart is entered (set_fact runs) but nothing ran; nothing was taken out
    (dict(ROLLED_HOST, check_mode=True, removed=SKIPPED, added=SKIPPED, drain=SKIPPED, generated=None),
     ["w2 (http://10.0.0.2:8000): check mode: would restart", "plan: config_changed",
      "router: not taken out, no change; 3 of 3 workers healthy", "drain: not needed", "generate: not run",
      "prewarm: none"]),
    # not listed, nothing to restart: added back (its own counts, not the ones seen before)
    (dict(UNCHANGED, listed=False, added={"changed": True, "elapsed": 1.0, "healthy_workers": 4,
                                          "total_workers": 4}, generated="POST /generate -> 200, 1 tokens: x"),
     ["w2 (http://10.0.0.2:8000): added to the router", "plan: running",
      "router: not taken out, back healthy in 1.0 s; 4 of 4 workers healthy", "drain: not needed",
      "generate: POST /generate -> 200, 1 tokens: x", "prewarm: none"]),
    (dict(UNCHANGED, listed=False, check_mode=True),
     ["w2 (http://10.0.0.2:8000): check mode: would add to the router", "plan: running",
      "router: not taken out, no change; 3 of 3 workers healthy", "drain: not needed", "generate: not run",
      "prewarm: none"]),
    # forced, from an inventory string; a plan without a reason
    (dict(UNCHANGED, force="yes", plan={"changed": False}),
     ["w2 (http://10.0.0.2:8000): unchanged, router untouched", "plan: - (forced)",
      "router: not taken out, no change; 3 of 3 workers healthy", "drain: not needed", "generate: not run",
      "prewarm: none"]),
], ids=["restarted", "unchanged", "check-mode", "added", "check-mode-add", "forced"])
def test_summary(data, expected):
    assert rolling_summary(data) == expected


AHEAD = {"prewarm_job": {"jid": "j1", "by": "w1", "model_path": "/m", "timeout": 600}}
DONE = {"changed": True, "finished": 1, "resident_before_pct": 0.0, "resident_after_pct": 100.0,
        "read_bytes": 1572864, "stopped": None}
LONG = ("word " * 40).strip()


@pytest.mark.parametrize("change, expected", [
    # warmed ahead by the previous host: done, done but stopped, not done, not waited
    (dict(AHEAD, prewarmed=DONE), "warmed ahead by w1: resident 0.0% -> 100.0%, read 1.5 MiB"),
    (dict(AHEAD, prewarmed=dict(DONE, resident_after_pct=0.0, read_bytes=0, stopped="memory_floor")),
     "warmed ahead by w1: resident 0.0% -> 0.0%, read 0.0 MiB (stopped: memory_floor)"),
    (dict(AHEAD, prewarmed={"finished": 1, "failed": True, "reason": "memory_floor", "msg": "below 10%"}),
     "warmed ahead by w1: not done (memory_floor: below 10%)"),
    (dict(AHEAD, prewarmed={"finished": 0}), "warmed ahead by w1: not done (?: ?)"),
    (dict(AHEAD, prewarmed={"finished": 1, "skipped": True}), "none"),
    (dict(AHEAD, prewarmed={"changed": False}), "none"),                  # async_status never answered
    # its own prewarm before the teardown: read, nothing read, stopped, not done, from the role's fact
    ({"restart": {"prewarm": {"resident_before_pct": 42.5, "read_bytes": 3145728}}},
     "before the teardown: resident 42.5%, read 3.0 MiB"),
    ({"restart": {"prewarm": {"resident_before_pct": 100.0, "read_bytes": 0}}},
     "before the teardown: resident 100.0%, nothing read"),
    ({"restart": {"prewarm": {"resident_before_pct": 10.0, "stopped": "deadline"}}},
     "before the teardown: resident 10.0%, nothing read (stopped: deadline)"),
    ({"restart": {"prewarm": {"reason": "disabled"}}}, "before the teardown: not done (disabled)"),
    ({"own_prewarm": {"reason": "no_weights"}}, "before the teardown: not done (no_weights)"),
    ({"restart": {"prewarm": {}}, "own_prewarm": {"reason": "no_weights"}}, "none"),  # the result wins
    ({"restart": {"prewarm": {"changed": False}}}, "none"),
    # the next host's: started, could not start (why, cut to 160), never reached
    ({"next_host": "w3", "prewarm_started": {"started": 1, "finished": 0, "ansible_job_id": "j3.1"}},
     "next host w3: started in the background"),
    ({"next_host": "w3", "prewarm_started": {"unreachable": True, "msg": "Failed to connect to w3"}},
     "next host w3: could not start in the background (Failed to connect to w3)"),
    ({"next_host": "w3", "prewarm_started": {"failed": True, "module_stderr": "  Traceback: boom\n", "msg": "x"}},
     "next host w3: could not start in the background (Traceback: boom)"),
    ({"next_host": "w3", "prewarm_started": {"failed": True, "module_stderr": "", "msg": LONG}},
     "next host w3: could not start in the background (" + " ".join(["word"] * 31) + "...)"),
    ({"next_host": "w3", "prewarm_started": {"failed": True, "msg": LONG[:164]}},      # within the leeway
     "next host w3: could not start in the background (" + LONG[:164] + ")"),
    ({"next_host": "w3", "prewarm_started": {"failed": True}}, "next host w3: could not start in the background (?)"),
    ({"next_host": "w3", "prewarm_started": SKIPPED}, "none"),
    ({"next_host": "w3", "prewarm_started": None}, "none"),
    # all three, in that order
    (dict(AHEAD, prewarmed=DONE, restart={"prewarm": {"resident_before_pct": 100.0, "read_bytes": 0}},
          next_host="w3", prewarm_started={"ansible_job_id": "j3.1"}),
     "warmed ahead by w1: resident 0.0% -> 100.0%, read 1.5 MiB; before the teardown: resident 100.0%, nothing "
     "read; next host w3: started in the background"),
], ids=["ahead-done", "ahead-stopped", "ahead-not-done", "ahead-unfinished", "ahead-skipped", "ahead-no-answer",
        "own-read", "own-nothing-read", "own-stopped", "own-not-done", "own-from-fact", "own-result-first",
        "own-empty", "next-started", "next-unreachable", "next-stderr", "next-truncated", "next-leeway",
        "next-no-why", "next-skipped", "next-not-reached", "all-three"])
def test_summary_prewarm(change, expected):
    assert rolling_summary(dict(ROLLED_HOST, **change)) == RESTARTED_LINES[:-1] + ["prewarm: " + expected]


def test_the_role_calls_each_filter_by_name():
    names = set(FilterModule().filters())
    with open(os.path.join(ROOT, "roles", "sglang_rolling", "tasks", "main.yml"), encoding="utf-8") as fh:
        text = fh.read()
    assert names == {"rolling_rolled_back", "rolling_untouched", "rolling_put_back", "rolling_failure",
                     "rolling_summary"}
    for name in names:
        assert "llmops.sglang.%s" % name in text, name


def test_a_host_not_restarted_this_run_tells_no_prewarm_from_a_cached_restart_result():
    """A persistent fact cache hands the next run the last restart's result; a converged host
    (the restart not entered) says nothing of that run's prewarm."""
    cached = {"prewarm": {"resident_before_pct": 42.5, "read_bytes": 3145728}}
    assert rolling_summary(dict(UNCHANGED, restart=cached))[-1] == "prewarm: none"
    assert rolling_summary(dict(ROLLED_HOST, restart=cached))[-1] == (
        "prewarm: before the teardown: resident 42.5%, read 3.0 MiB")
