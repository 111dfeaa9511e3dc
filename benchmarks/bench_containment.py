"""Teardown by cgroup (containment cgroup) vs the process-relationship teardown (containment none),
same trees, same run.

Every trial launches the emulator through _launcher.spawn with tp 8 (supervisor, launcher,
8 schedulers, detokenizer, resource tracker = 12 processes) and waits for /health. Trees:

  honours     the tree honours SIGTERM
  ignores     every process ignores SIGTERM (fault ignore_sigterm): grace period, then SIGKILL
  escape      the emulator's escape fault: a worker double-forks + setsid, titles itself
              sglang::tokenizer_worker, keeps the listening socket (the port stays bound)
  detached    a worker that double-forks, setsid, is reparented to init, sets a new title and
              comm, wipes its environment, chdir / and closes every descriptor: nothing but its
              cgroup ties it to the launch

Approaches (module-internal time: the library calls the module makes, no interpreter start):

  cgroup  _containment.stop(record, grace, deadline): SIGTERM to the cgroup's members, wait on
          cgroup.events, cgroup.kill, rmdir
  none    _teardown.make_plan + execute on a record without containment fields (name + state
          dir, ports [port], gpus [], the title sweep off as on a shared host, shm cleanup off)

Every tree is launched inside a cgroup either way, so whatever the `none` teardown misses is
counted ("missed") and then removed by the cgroup: nothing of a trial outlives it. The `none`
engine never looks at cgroups, so the tree it sees is the same as an uncontained launch.

Run: .venv/bin/python benchmarks/bench_containment.py [--quick]  (prints a Markdown table and the
targets); `run` and `report` follow benchmarks/run_all.py's interface.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import Scope  # noqa: E402

TP = 8
GRACE = 3.0
TIMEOUT = 10.0
VARIANTS = ["honours", "ignores", "escape", "detached"]
VLABEL = {"honours": "12-process tree honouring SIGTERM", "ignores": "tree ignoring SIGTERM",
          "escape": "escaped worker holding the port (escape fault)",
          "detached": "escaped worker: double fork, setsid, new title, no env, no fds"}
FAULT = {"honours": "", "ignores": "ignore_sigterm", "escape": "escape", "detached": ""}
APPROACHES = ["cgroup", "none"]
DETACHED_TITLE = "bench-detached"
# The server: first a fully detached worker (see the module docstring), then the emulator.
WRAPPER = r"""
import os, runpy, sys
pidfile = sys.argv[1]
WORKER = '''
import os, sys, time
import setproctitle
setproctitle.setproctitle("%s")
os.environ.clear()
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
'''
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        os.chdir("/")
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1 << 16)
        env = {k: v for k, v in os.environ.items() if k != "SPT_NOENV"}
        os.execve(sys.executable, [sys.executable, "-c", WORKER, pidfile], env)
    os._exit(0)
os.waitpid(first, 0)
sys.argv = ["sglang.launch_server"] + sys.argv[2:]
runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
""" % DETACHED_TITLE


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as resp:
            return resp.status == 200
    except Exception:  # noqa: BLE001
        return False


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


class Trial:
    def __init__(self, variant: str, approach: str, idx: int) -> None:
        self.variant, self.approach = variant, approach
        self.name = "bc-%s-%s-%d-%s" % (variant, approach, idx, C.TOKEN[-6:])
        self.dir = C.mkdir("containment", self.name)
        self.port = C.free_port()
        self.pidfile = os.path.join(self.dir, "detached.pid")
        self.record: Dict[str, Any] = {}
        self.result: Dict[str, Any] = {"variant": variant, "approach": approach, "idx": idx}

    def launch(self) -> bool:
        env = {C.fixtures.TEST_MARKER: C.RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1",
               "SGLANG_BENCH_RUN": C.TOKEN}
        if FAULT[self.variant]:
            env["SGLANG_EMULATOR_FAULT"] = FAULT[self.variant]
        args = ["--model-path", C.MODEL, "--host", "127.0.0.1", "--port", str(self.port), "--tp-size", str(TP)]
        argv = ([C.EMU_PY, "-c", WRAPPER, self.pidfile] + args if self.variant == "detached"
                else [C.EMU_PY, "-m", "sglang.launch_server"] + args)
        spec = _launcher.LaunchSpec(name=self.name, state_dir=os.path.join(self.dir, "state"),
                                    log_dir=os.path.join(self.dir, "logs"), python=C.EMU_PY, venv=C.EMU_VENV,
                                    argv=argv, env=env, containment="cgroup", containment_why="benchmark")
        self.record = _launcher.spawn(spec)
        if not _wait(lambda: _healthy(self.port), 60):
            self.result["error"] = "never became healthy"
            return False
        if self.variant == "escape":
            _wait(lambda: len(C.listeners(self.port)) >= 2, 5)
        if self.variant == "detached" and not _wait(lambda: os.path.exists(self.pidfile), 10):
            self.result["error"] = "the detached worker never started"
            return False
        self.members = _cgroup.members(self.record["cgroup"])
        self.st = C.start_times(self.members)
        self.escaped = [p for p in self.members if self._escaped(p)]
        self.result.update(tree_size=len(self.members), escaped=len(self.escaped))
        return True

    def _escaped(self, pid: int) -> bool:
        proc = _procs.read_proc(pid)
        return proc is not None and proc.sid != self.record["sid"]

    def teardown(self) -> None:
        if self.approach == "cgroup":
            t0 = time.monotonic()
            r = _containment.stop(self.record, GRACE, time.monotonic() + GRACE + TIMEOUT)
            self.result.update(time=time.monotonic() - t0, timings=r["timings"], killed_with=r["killed_with"],
                               ok=r["empty"] and r["removed"])
            return
        old = {k: v for k, v in self.record.items()
               if k not in ("containment", "containment_why", "cgroup", "cgroup_id", "boot_id")}
        old["record_version"] = 1
        _record.write_record(self.record["state_dir"], self.name, old)
        scope = Scope(name=self.name, state_dir=self.record["state_dir"], ports=[self.port], gpus=[],
                      sglang_processes=False)
        opts = _teardown.Options(grace_period=GRACE, timeout=TIMEOUT, shm_cleanup=False, gpu_backend="none")
        t0 = time.monotonic()
        plan = _teardown.make_plan(scope, opts)
        _teardown.check_preconditions(plan)
        r = _teardown.execute(plan, opts)
        self.result.update(time=time.monotonic() - t0, timings=r.get("timings"), ok=not r.get("failed"),
                           reason=r.get("reason"), targets=len(r.get("targets") or []))

    def measure(self) -> None:
        left = [p for p in self.members if C.alive(p, self.st.get(p))]
        self.result.update(missed=len(left), escaped_missed=len([p for p in self.escaped if p in left]),
                           port_held=bool(C.listeners(self.port)))

    def cleanup(self) -> None:
        path = _cgroup.instance_path(_cgroup.v2_mount(), self.name)
        if os.path.isdir(path):
            _cgroup.kill(path)
            _cgroup.wait_empty(path, time.monotonic() + 10)
            _cgroup.remove(path)
        C.wait_port_free(self.port, 5)


def run(quick: bool = False) -> Dict[str, Any]:
    rows: List[Dict[str, Any]] = []
    for idx in range(1 if quick else 3):
        for variant in VARIANTS:
            for approach in APPROACHES:
                trial = Trial(variant, approach, idx)
                try:
                    if trial.launch():
                        trial.teardown()
                        trial.measure()
                except Exception as exc:  # noqa: BLE001  (a trial's failure is a result)
                    trial.result["error"] = "%s: %s" % (type(exc).__name__, exc)
                finally:
                    trial.cleanup()
                rows.append(trial.result)
                C.log("containment %s/%s #%d: %s" % (variant, approach, idx, json.dumps(trial.result, default=str)))
    return {"rows": rows, "grace": GRACE, "tp": TP}


def _cell(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    done = [r for r in rows if "time" in r]
    return {"n": len(rows), "errors": len(rows) - len(done), "time": C.median(r["time"] for r in done),
            "escaped": sum(r.get("escaped", 0) for r in done),
            "escaped_missed": sum(r.get("escaped_missed", 0) for r in done),
            "missed": sum(r.get("missed", 0) for r in done), "ok": sum(1 for r in done if r.get("ok")),
            "port_held": sum(1 for r in done if r.get("port_held")), "tree": C.median(r.get("tree_size") for r in done),
            "signal": C.median((r.get("timings") or {}).get("signal") for r in done)}


def table(data: Dict[str, Any]) -> str:
    out = []
    for variant in VARIANTS:
        for approach in APPROACHES:
            c = _cell([r for r in data["rows"] if r["variant"] == variant and r["approach"] == approach])
            caught = "-" if not c["escaped"] else "%d/%d" % (c["escaped"] - c["escaped_missed"], c["escaped"])
            out.append([VLABEL[variant], approach, "%s" % (int(c["tree"]) if c["tree"] else "-"),
                        C.fmt_s(c["time"], 3), C.fmt_s(c["signal"], 4), caught, c["missed"], c["port_held"],
                        "%d/%d" % (c["ok"], c["n"]) + (" (%d errors)" % c["errors"] if c["errors"] else "")])
    return C.md_table(["tree", "containment", "processes", "teardown (median, module-internal)",
                       "of which finding + SIGTERM", "escaped workers stopped", "processes left", "port still held", "runs reported ok"], out)


def report(data: Dict[str, Any], fig_dir: str = "", fig_prefix: str = "") -> Dict[str, Any]:
    """The section of docs/benchmarks.md (benchmarks/run_all.py) and the targets it checks."""
    def cell(variant: str, approach: str) -> Dict[str, Any]:
        return _cell([r for r in data["rows"] if r["variant"] == variant and r["approach"] == approach])

    honours, ignores = cell("honours", "cgroup"), cell("ignores", "cgroup")
    escaped = [cell(v, "cgroup") for v in ("escape", "detached")]
    caught = sum(c["escaped"] - c["escaped_missed"] for c in escaped)
    total = sum(c["escaped"] for c in escaped)
    over = None if ignores["time"] is None else ignores["time"] - data["grace"]
    detached_none = cell("detached", "none")
    targets = [
        {"target": "12-process tree honouring SIGTERM, cgroup: module-internal under 0.2 s",
         "met": honours["time"] is not None and honours["time"] < 0.2, "value": C.fmt_s(honours["time"], 3)},
        {"target": "tree ignoring SIGTERM, cgroup: grace + under 0.2 s", "met": over is not None and over < 0.2,
         "value": "grace + %s" % C.fmt_s(over, 3)},
        {"target": "escaped double-forked worker, cgroup: caught 100%", "met": total > 0 and caught == total,
         "value": "%d/%d" % (caught, total)},
    ]
    markdown = (
        "Grace period %.0f s, tp %d (12 processes), medians of the runs; times are module-internal (library calls). "
        "Every tree is launched inside a cgroup either way, so what `none` misses is counted, then removed. "
        "With `none`, the fully detached worker was left running in %d of %d runs while the teardown reported "
        "success in %d.\n\n%s\n" % (
            data["grace"], data["tp"], detached_none["escaped_missed"],
            detached_none["escaped"], detached_none["ok"], table(data)))
    return {"title": "Containment: teardown by cgroup vs none", "markdown": markdown, "targets": targets}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one run per cell instead of three")
    args = ap.parse_args(argv)
    os.makedirs(C.BENCH_ROOT, exist_ok=True)
    try:
        data = run(quick=args.quick)
        data["_meta"] = C.machine()
        C.save_json("containment" + ("-quick" if args.quick else ""), data)
        print("grace period %.0f s, tp %d, %s, load %s\n" % (GRACE, TP, data["_meta"]["cpu"], data["_meta"]["load_avg"]))
        print(table(data))
        print()
        for target in report(data)["targets"]:
            print("- %s: %s (%s)" % (target["target"], target["value"], "met" if target["met"] else "not met"))
    finally:
        C.cleanup_all()
        C.rmtree(C.BENCH_ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
