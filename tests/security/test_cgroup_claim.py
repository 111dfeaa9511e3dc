"""A second launch of the same instance name, from another state dir, and the cgroup backend.

An empty instance cgroup counted as free, and a launch's cgroup is empty until its supervisor
joins it: a second root run launching the same name from another state dir removed the first
launch's fresh cgroup and made its own, and the first launch's supervisor then joined the
second's. Two servers shared one cgroup, and one instance's teardown (or failed-launch cleanup)
killed the other's server. Now the cgroup is claimed atomically (the slice locked while one
looks and creates, the new cgroup's own lock held by its launcher until the supervisor is
inside, the claimant written on it), and a second claimant is refused (cgroup_busy) naming the
first.

The adversary here is a second root run (the modules run as root), so the two claimants are
two root processes (no title sweep is involved, so no private PID namespace is needed, and no
unprivileged user).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List

import pytest

from helpers.fixtures import COLLECTIONS
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment

ROUNDS = 300
BUDGET_S = 18.0
# One claimant: for each line on stdin, claim the instance cgroup, put a stand-in supervisor
# (a sleeper) in it the way a launch does, release the claim, and say what happened.
WORKER = r"""
import json, os, subprocess, sys
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup, _containment
name, state_dir = sys.argv[1], sys.argv[2]
print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    if line.strip() == "hold":   # claim and keep the claim, empty: a launch before its spawn
        fields = _containment.prepare(name, "cgroup", "test", state_dir)
        print(json.dumps({"held": fields["cgroup"], "id": fields["cgroup_id"]}), flush=True)
        continue
    try:
        fields = _containment.prepare(name, "cgroup", "test", state_dir)
    except SglangError as exc:
        print(json.dumps({"refused": exc.details.get("reason"), "msg": exc.msg}), flush=True)
        continue
    try:
        sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: _cgroup.join(fields["cgroup"]))
    except Exception as exc:
        print(json.dumps({"error": repr(exc)}), flush=True)
        continue
    finally:
        _containment.release(fields)
    print(json.dumps({"won": fields["cgroup"], "id": fields["cgroup_id"], "sleeper": sleeper.pid}), flush=True)
"""


def _mount() -> str:
    mount = _cgroup.v2_mount()
    ok, why = _cgroup.writable(mount)
    assert ok and mount, "cgroup v2 must be writable for this test: %s" % why
    return mount


class Claimant:
    """A worker process claiming the instance cgroup for its own state dir (what it starts lives
    in that cgroup, which the fixture empties)."""

    def __init__(self, name: str, state_dir: str) -> None:
        self.state_dir = state_dir
        env = dict(os.environ, PYTHONPATH=COLLECTIONS)
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER,
                                      name, state_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        assert "ready" in self.read()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self) -> Dict[str, object]:
        line = self.proc.stdout.readline()
        assert line, "the claimant died"
        return json.loads(line)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def instance():
    name = "sec-claim-%s" % uuid.uuid4().hex[:8]
    path = _cgroup.instance_path(_mount(), name)
    yield name, path
    _empty(path)


def _empty(path: str) -> None:
    if os.path.isdir(path):
        _cgroup.kill(path)
        _cgroup.wait_empty(path, time.monotonic() + 10)
        _cgroup.remove(path)


def test_a_second_claimant_is_refused_naming_the_first(instance, tmp_path):
    name, path = instance
    first = Claimant(name, str(tmp_path / "first-state"))
    try:
        first.send("hold")
        held = first.read()
        assert held["held"] == path
        # the first launch's cgroup is empty (its supervisor has not joined yet): still taken
        with pytest.raises(SglangError) as err:
            _containment.prepare(name, "cgroup", "test", str(tmp_path / "second-state"))
        assert err.value.details["reason"] == "cgroup_busy", err.value.msg
        assert str(tmp_path / "first-state") in err.value.msg, err.value.msg
        assert _cgroup.cgroup_id(path) == held["id"], "the first launch's cgroup was replaced"
        problem = _containment.launch_problem(name, "cgroup")  # check mode says the same
        assert problem and str(tmp_path / "first-state") in problem, problem
    finally:
        first.close()
    # its launcher gone (a crashed launch) and nothing inside: the name is free again
    fields = _containment.prepare(name, "cgroup", "test", str(tmp_path / "second-state"))
    try:
        assert fields["cgroup"] == path and fields["cgroup_id"] != held["id"]
    finally:
        _containment.discard(fields)
        _containment.release(fields)


def test_two_launches_racing_for_one_name_never_share_a_cgroup(instance, tmp_path):
    name, path = instance
    a, b = Claimant(name, str(tmp_path / "a-state")), Claimant(name, str(tmp_path / "b-state"))
    seen = {"one_won": 0, "both_won": 0, "none_won": 0, "errors": 0}
    bad: List[object] = []
    rounds = 0
    deadline = time.monotonic() + BUDGET_S
    try:
        while rounds < ROUNDS and time.monotonic() < deadline:
            rounds += 1
            a.send("go")
            b.send("go")
            answers = [a.read(), b.read()]
            won = [x for x in answers if "won" in x]
            errors = [x for x in answers if "error" in x]
            inside = set(_cgroup.members(path))
            for x in won:
                if x["sleeper"] not in inside:   # its supervisor stand-in is not in its cgroup
                    bad.append(("not inside", x, sorted(inside)))
            if len(won) == 2:
                seen["both_won"] += 1
                bad.append(("both won", answers))
            elif len(won) == 1:
                seen["one_won"] += 1
                loser = [x for x in answers if "won" not in x][0]
                winner_dir = (a if "won" in answers[0] else b).state_dir
                if loser.get("refused") != "cgroup_busy" or winner_dir not in str(loser.get("msg")):
                    bad.append(("loser not refused naming the winner", answers))
            else:
                seen["none_won"] += 1
            seen["errors"] += len(errors)
            _empty(path)
    finally:
        a.close()
        b.close()
    assert not bad and not seen["errors"], (seen, bad[:3])
    assert rounds >= 100, "too few rounds to mean anything: %d (%s)" % (rounds, seen)
    assert seen["one_won"] == rounds, seen


class FakeSystemd:
    """Just enough of systemctl and systemd-run for the claim of a unit (PID 1 is not systemd
    on the test hosts; tests/integration/test_containment_systemd.py boots a real one)."""

    def __init__(self) -> None:
        self.units: Dict[str, Dict[str, str]] = {}
        self.calls: List[List[str]] = []
        self.after_show: List[Any] = []   # run once, right after the next `systemctl show`

    def run(self, argv: List[str], timeout: float = 0) -> subprocess.CompletedProcess:
        self.calls.append(list(argv))
        unit = argv[-1] if argv[0] == "systemctl" else [a for a in argv if a.startswith("--unit=")][0][7:]
        if argv[0] == "systemd-run":
            if unit in self.units:
                return subprocess.CompletedProcess(argv, 1, "", "Failed to start transient service unit: Unit %s "
                                                   "was already loaded or has a fragment file." % unit)
            desc = [a for a in argv if a.startswith("--description=")][0][len("--description="):]
            self.units[unit] = {"ActiveState": "active", "Description": desc.replace("%%", "%"), "MainPID": "4242"}
            return subprocess.CompletedProcess(argv, 0, "", "")
        verb = argv[1]
        if verb == "show":
            props = [a[len("--property="):] for a in argv if a.startswith("--property=")]
            state = self.units.get(unit, {"ActiveState": "inactive"})
            out = "".join("%s=%s\n" % (p, state.get(p, "")) for p in props)
            while self.after_show:
                self.after_show.pop(0)()
            return subprocess.CompletedProcess(argv, 0, out, "")
        if verb in ("stop", "kill"):
            self.units.pop(unit, None)
        if verb == "reset-failed" and self.units.get(unit, {}).get("ActiveState") == "failed":
            self.units.pop(unit)
        return subprocess.CompletedProcess(argv, 0, "", "")

    def acts_on(self, unit: str, since: int) -> List[List[str]]:
        return [c for c in self.calls[since:] if c[0] == "systemctl" and c[1] in ("stop", "kill") and c[-1] == unit]


def test_a_second_systemd_claimant_never_stops_the_first_and_is_refused_naming_it(monkeypatch, tmp_path):
    fake = FakeSystemd()
    sd = _containment._systemd
    monkeypatch.setattr(sd, "_run", fake.run)
    monkeypatch.setattr(sd, "available", lambda: (True, "fake systemd"))
    name = "sec-claim-%s" % uuid.uuid4().hex[:8]
    first = _containment.prepare(name, "systemd", "test", str(tmp_path / "first-state"))
    kw = {"claim": first.get("claim")} if "claim" in first else {}
    # the second launch looks while the first has not started its unit yet (both see the name
    # free), and the first starts it right after that look
    fake.after_show.append(lambda: sd.start(first["unit"], ["python", "-c", "pass"], "/dev/null", "/dev/null", "/",
                                            **kw))
    second = _containment.prepare(name, "systemd", "test", str(tmp_path / "second-state"))
    assert first["unit"] in fake.units
    started = len(fake.calls)
    kw = {"claim": second.get("claim")} if "claim" in second else {}
    with pytest.raises(SglangError) as err:
        sd.start(second["unit"], ["python", "-c", "pass"], "/dev/null", "/dev/null", "/", **kw)
    _containment.discard(second)  # the second launch's failure cleanup
    assert fake.acts_on(first["unit"], 0) == [], "a claimant stopped or killed the unit: %s" % fake.calls
    assert err.value.details["reason"] == "cgroup_busy", err.value.msg
    assert str(tmp_path / "first-state") in err.value.msg, err.value.msg
    assert fake.units[first["unit"]]["ActiveState"] == "active" and len(fake.calls) > started
    # the first launch's own cleanup still reaches its own unit
    _containment.discard(first)
    assert fake.acts_on(first["unit"], started) and first["unit"] not in fake.units
