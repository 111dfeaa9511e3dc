"""A fleet restart behind the real sglang-router under client load: three ways, side by side.

Each strategy gets a fresh fleet of N emulated workers (tp 1, SGLANG_EMULATOR_TOKEN_DELAY
0.05 s per token) launched by restart_serving.yml, a fresh sglang-router 0.3.2 with its default
health checks (every 60 s, 3 failures), and the same steady load through the router (6 clients
cycling through streaming /generate of 2-4 s, plain /generate, streaming and plain chat).
After a few seconds of load the strategy rolls every worker; the load runs on a few seconds
after it and is then stopped (requests in flight finish and count).

  (a) playbooks/restart_fleet.yml -e sglang_force=true: out of the router, drain, restart,
      a generation, back in, healthy, next host.
  (b) playbooks/restart_serving.yml -e sglang_force=true, serial 1, the router left alone: the
      same restart (teardown = SIGTERM, grace period 10 s, SIGKILL), one host at a time.
  (c) a naive loop over the workers: SIGTERM the server (by the pid this benchmark knows: pkill
      -f scoped to our own processes), SIGKILL after 10 s, relaunch it by hand, sleep 10 s.

Measured per strategy: failed client requests (count, %), the longest time with no successful
response, workers serving over time (their own /health; the router's view beside it), the wall
time of the roll. Loopback only; every process is this run's and is killed by pid/group.

    .venv/bin/python benchmarks/bench_router_roll.py [--workers 3] [--quick]

prints a Markdown table and writes docs/bench_router_roll.png (a --quick run writes under
build/bench-quick/). run()/report() follow benchmarks/run_all.py's interface.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

from helpers.fleet import MODEL_DIR, Fleet, router_python  # noqa: E402
from helpers.loadgen import HealthSampler, LoadGen, completions_over_time  # noqa: E402

STRATEGIES = [
    ("a", "restart_fleet.yml (router-aware roll)"),
    ("b", "restart_serving.yml, serial 1, router left alone"),
    ("c", "naive loop: kill, relaunch, sleep"),
]
NAIVE_GRACE = 10.0
NAIVE_SLEEP = 10.0


# -- the strategies -----------------------------------------------------------------------------
def roll_fleet(fleet: Fleet, naive: List[subprocess.Popen]) -> Dict[str, Any]:
    r = fleet.play("restart_fleet.yml", {"sglang_force": True})
    return {"rc": r.returncode, "tail": (r.stdout + r.stderr)[-3000:] if r.returncode else ""}


def roll_serving(fleet: Fleet, naive: List[subprocess.Popen]) -> Dict[str, Any]:
    r = fleet.play("restart_serving.yml", {"sglang_force": True, "sglang_serial": 1})
    return {"rc": r.returncode, "tail": (r.stdout + r.stderr)[-3000:] if r.returncode else ""}


def _naive_argv(fleet: Fleet, host: str) -> List[str]:
    return [C.EMU_PY, "-m", "sglang.launch_server", "--model-path", MODEL_DIR, "--host", "127.0.0.1",
            "--port", str(fleet.ports[host]), "--tp-size", str(fleet.tp_size), "--enable-metrics",
            "--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2"]


def roll_naive(fleet: Fleet, naive: List[subprocess.Popen]) -> Dict[str, Any]:
    """What a shell loop does: `pkill -f <server>; sleep; pkill -9; relaunch &; sleep`, with the
    kill scoped to the server pid this benchmark knows (never a pattern over the host)."""
    env = {"SGLANG_EMULATOR_PHASE_SECONDS": str(fleet.phase_seconds),
           "SGLANG_EMULATOR_TOKEN_DELAY": str(fleet.token_delay), "no_proxy": "127.0.0.1,localhost"}
    for host in fleet.hosts:
        target = int(fleet.record(host)["pid"])  # the server this run launched
        try:
            os.kill(target, signal.SIGTERM)
        except OSError:
            pass
        if not C.wait_gone([target], NAIVE_GRACE):
            C.kill_pids([target])
            C.wait_gone([target], 5)
        C.wait_port_free(fleet.ports[host], 10)
        proc = C.popen(_naive_argv(fleet, host), env=env,
                       log_path=os.path.join(fleet.workdir, "%s-naive.log" % host))
        naive.append(proc)
        time.sleep(NAIVE_SLEEP)
    return {"rc": 0, "tail": ""}


ROLLS: Dict[str, Callable[[Fleet, List[subprocess.Popen]], Dict[str, Any]]] = {
    "a": roll_fleet, "b": roll_serving, "c": roll_naive}


# -- one strategy, start to end -------------------------------------------------------------------
def run_case(key: str, workers: int, router_py: str, warmup: float, tail: float) -> Dict[str, Any]:
    fleet = Fleet(C.mkdir("router_roll", key), size=workers, tp_size=1)
    naive: List[subprocess.Popen] = []
    out: Dict[str, Any] = {"key": key, "label": dict(STRATEGIES)[key], "workers": workers}
    try:
        up = fleet.up()
        if up.returncode != 0:
            raise RuntimeError("fleet did not come up:\n" + (up.stdout + up.stderr)[-3000:])
        fleet.start_router(router_py)
        C.log("router_roll %s: fleet of %d up, router %s" % (key, workers, fleet.router_url))
        load = LoadGen(fleet.router_url, model=MODEL_DIR, clients=6).start()
        health = HealthSampler(fleet.router_url, [fleet.worker_url(h) for h in fleet.hosts], interval=0.25)
        health.start()
        time.sleep(warmup)
        t0 = time.time()
        rolled = ROLLS[key](fleet, naive)
        t1 = time.time()
        time.sleep(tail)
        load.stop()
        health.stop()
        summary = load.summary()
        results = load.snapshot()
        out.update(rolled)
        out.update(summary)
        out.update({
            "roll_start": t0 - load.started_at, "roll_end": t1 - load.started_at, "wall": t1 - t0,
            "min_serving": min((s for t, s, _routed in health.samples if t0 <= t <= t1), default=None),
            "min_routed": min((r for t, _serving, r in health.samples if t0 <= t <= t1 and r >= 0), default=None),
            "health": [(round(t - load.started_at, 2), s, r) for t, s, r in health.samples],
            "buckets": completions_over_time(results, load.started_at or t0, 1.0),
            "failures": [(round(r.end - (load.started_at or t0), 2), r.kind, r.error) for r in results if not r.ok],
        })
        C.log("router_roll %s: %d/%d failed, gap %.1f s, min serving %s, wall %.1f s, rc %s" % (
            key, summary["failed"], summary["total"], summary["longest_gap"], out["min_serving"], out["wall"],
            out["rc"]))
    finally:
        fleet.stop_router()
        for proc in naive:
            C.kill_group(proc)
        fleet.down()
    return out


def run(quick: bool = False, workers: int = 3) -> Dict[str, Any]:
    router_py = router_python()
    cases = [run_case(k, workers, router_py, warmup=3.0 if quick else 5.0, tail=3.0 if quick else 5.0)
             for k, _strategy in STRATEGIES]
    return {"workers": workers, "token_delay": 0.05, "cases": cases, "naive_grace": NAIVE_GRACE,
            "naive_sleep": NAIVE_SLEEP}


# -- report ---------------------------------------------------------------------------------------
def table(data: Dict[str, Any]) -> str:
    rows = []
    for c in data["cases"]:
        rows.append(["(%s) %s" % (c["key"], c["label"]), "%d of %d" % (c["failed"], c["total"]),
                     "%.2f %%" % c["failed_pct"], C.fmt_s(c["longest_gap"], 1),
                     "%s of %d" % (c["min_serving"], c["workers"]),
                     "%s of %d" % (c["min_routed"], c["workers"]), C.fmt_s(c["wall"], 1),
                     "ok" if c["rc"] == 0 else "rc=%s" % c["rc"]])
    return C.md_table(["strategy", "failed requests", "failed %", "longest gap without a success",
                       "fewest workers serving", "fewest healthy in the router", "roll wall time", "result"], rows)


def plot(data: Dict[str, Any], path: str) -> str:
    plt = C.plt()
    cases = data["cases"]
    fig, axes = plt.subplots(len(cases), 1, figsize=(10, 2.5 * len(cases)), squeeze=False)
    for ax, c in zip(axes[:, 0], cases):
        ts = [h[0] for h in c["health"]]
        ax.step(ts, [h[1] for h in c["health"]], where="post", color="#1f77b4", label="workers serving (/health)")
        ax.step(ts, [h[2] for h in c["health"]], where="post", color="#ff7f0e", linestyle="--",
                label="healthy in the router")
        fails = [f[0] for f in c["failures"]]
        if fails:
            ax.plot(fails, [0.15] * len(fails), "x", color="#d62728", label="failed request (%d)" % len(fails))
        ax.axvspan(c["roll_start"], c["roll_end"], color="grey", alpha=0.12, label="roll")
        ax.set_ylim(-0.2, c["workers"] + 0.4)
        ax.set_yticks(range(c["workers"] + 1))
        ax.set_ylabel("workers")
        ax.set_title("(%s) %s: %d/%d requests failed, longest gap %.1f s, roll %.0f s"
                     % (c["key"], c["label"], c["failed"], c["total"], c["longest_gap"], c["wall"]), fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    axes[-1, 0].set_xlabel("seconds since the load started")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    figp = plot(data, os.path.join(fig_dir, fig_prefix + "bench_router_roll.png"))
    a = next(c for c in data["cases"] if c["key"] == "a")
    targets = [{"target": "restart_fleet.yml under load: 0 failed requests, never fewer than N-1 workers serving",
                "met": a["failed"] == 0 and a["rc"] == 0 and (a["min_serving"] or 0) >= a["workers"] - 1,
                "value": "%d of %d failed, fewest serving %s of %d" % (
                    a["failed"], a["total"], a["min_serving"], a["workers"])}]
    md = ["%d emulated workers (tp 1, 0.05 s per generated token) behind sglang-router 0.3.2 (round robin, "
          "default health checks: every 60 s, 3 failures); 6 clients through the router cycling "
          "streaming /generate (40-80 tokens: 2-4 s), plain /generate, streaming and plain chat. Each "
          "strategy starts from a fresh fleet and router; the load runs from a few seconds before the "
          "roll to a few seconds after it. (c) waits %.0f s after SIGTERM before SIGKILL and sleeps %.0f s "
          "after each relaunch." % (data["workers"], data["naive_grace"], data["naive_sleep"]), "",
          "![router roll](%sbench_router_roll.png)" % fig_prefix, "", table(data)]
    bad = [c for c in data["cases"] if c["rc"]]
    for c in bad:
        md += ["", "(%s) failed (tail):\n\n```\n%s\n```" % (c["key"], c["tail"])]
    errors = ["(%s) %s: %s" % (c["key"], k, v) for c in data["cases"] for k, v in sorted(c["errors"].items())]
    if errors:
        md += ["", "Failures by kind: " + "; ".join(errors) + "."]
    return {"title": "Fleet roll behind sglang-router under load", "markdown": "\n".join(md),
            "targets": targets, "figures": [figp]}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="shorter warm-up and tail")
    args = ap.parse_args(argv)
    os.makedirs(C.BENCH_ROOT, exist_ok=True)
    t0 = time.time()
    meta = C.machine()
    try:
        data = run(quick=args.quick, workers=args.workers)
    finally:
        C.cleanup_all()
    data["_meta"] = dict(meta, seconds=round(time.time() - t0, 1), quick=args.quick)
    C.save_json("router_roll" + ("-quick" if args.quick else ""), data)
    out_dir = os.path.join(C.ROOT, "build", "bench-quick") if args.quick else C.DOCS
    os.makedirs(out_dir, exist_ok=True)
    rep = report(data, out_dir)
    print("## %s\n\n*Measured %s, %s cores, load average at start %s; %.0f s.*\n\n%s"
          % (rep["title"], meta["date"], meta["cores"], "/".join(str(x) for x in meta["load_avg"]),
             data["_meta"]["seconds"], rep["markdown"]))
    C.rmtree(C.BENCH_ROOT)
    return 0 if all(c["rc"] == 0 for c in data["cases"] if c["key"] == "a") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
