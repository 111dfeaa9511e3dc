"""Restart: playbooks/restart_extraction.yml end to end vs the emulator's own start-up time.

inventory/local.yml as shipped (tp 8, SGLANG_EMULATOR_PHASE_SECONDS 0.3, extraction flags, NCCL_*
variables), with only the instance name, port, state/log dirs and dump dir overridden through
extra vars so that the benchmark never collides with a demo or a test on the same machine.

Runs, in this order: fresh (nothing running -> launch), then alternately a no-op run (same
inputs: changed=0, nothing restarted) and a real restart (mem-fraction-static 0.85 <-> 0.88:
plan, teardown, launch, ready, dump proof). The emulator's own start-up is the same server
command line started directly, from exec to the ready line. Overhead = playbook - start-up.
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Dict, List, Optional

import common as C

EXTRACTION_ARGS = ["--disable-cuda-graph", "--disable-radix-cache", "--disable-custom-all-reduce",
                   "--mem-fraction-static", "0.88"]


def recap(text: str, host: str = "localhost") -> Dict[str, int]:
    m = None
    for m in re.finditer(r"^%s\s*:\s*(.*)$" % re.escape(host), text, re.M):
        pass
    if not m:
        return {}
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def emulator_startup(runs: int) -> List[float]:
    out = []
    for i in range(runs):
        port = C.free_port()
        logp = C.path("restart", "direct-%d.log" % i)
        env = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "SGLANG_HS_DUMP_DIR": os.path.join(C.SHM_ROOT, "direct-hs")}
        proc, rec = C.start_emulator(C.mkdir("restart", "direct-state"), logp, "direct", port, tp_size=8,
                                     phase=0.3, args=EXTRACTION_ARGS, extra_env=env, write_record=False)
        ok = C.wait_log(logp, C.READY_LINE, 60, proc=proc)
        t = time.time() - rec["launched_at"]
        C.kill_group(proc)
        C.wait_port_free(port, 5)
        if ok:
            out.append(t)
        C.log("restart: emulator start-up #%d %.2f s" % (i, t))
    return out


def playbook(pb: str, extra: Dict[str, Any], more: Optional[List[str]] = None, inventory: Optional[str] = None
             ) -> Dict[str, Any]:
    ev = C.path("restart", "ev-%s.json" % time.time())
    with open(ev, "w") as fh:
        json.dump(extra, fh)
    argv = [C.ANSIBLE_PLAYBOOK, "-i", inventory or os.path.join(C.ROOT, "inventory", "local.yml"),
            os.path.join(C.ROOT, "playbooks", pb), "-e", "@" + ev] + (more or [])
    rc, wall, out = C.run_timed(argv, timeout=600)
    with open(C.path("restart", "out-%s-%d.log" % (pb, int(time.time() * 1000))), "w") as fh:
        fh.write(out)
    return {"rc": rc, "wall": wall, "recap": recap(out), "tail": out[-1500:] if rc else ""}


def run(quick: bool = False) -> Dict[str, Any]:
    runs = 1 if quick else 3
    name = "bench-restart-%s" % C.TOKEN[-6:]
    extra = {"sglang_name": name, "sglang_port": C.free_port(),
             "sglang_state_dir": C.mkdir("restart", "state"), "sglang_log_dir": C.mkdir("restart", "logs"),
             "sglang_extraction_dump_dir": os.path.join(C.SHM_ROOT, "restart-hs")}
    os.makedirs(C.SHM_ROOT, exist_ok=True)  # the dump dir's parent (the role runs df on it)
    startup = emulator_startup(runs)
    seq = ["fresh"] + ["noop", "restart"] * runs
    current, n_restart = 0.88, 0
    runs_out = []
    try:
        for kind in seq:
            if kind == "restart":  # 0.88 -> 0.85 -> 0.88 ...: the fingerprint changes every time
                current = (0.85, 0.88)[n_restart % 2]
                n_restart += 1
            ev = {"sglang_extraction_mem_fraction_static": current}
            r = playbook("restart_extraction.yml", dict(extra, **ev))
            r["kind"] = kind
            runs_out.append(r)
            C.log("restart: %s %.1f s rc=%d %s" % (kind, r["wall"], r["rc"], r["recap"]))
    finally:
        td = playbook("teardown.yml", dict(extra, sglang_purge_dumps_on_teardown=True))
        C.log("restart: teardown.yml %.1f s rc=%d" % (td["wall"], td["rc"]))
    return {"runs": runs, "startup": startup, "playbook_runs": runs_out, "teardown": td}


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    st = C.median(data["startup"])
    pr = data["playbook_runs"]

    def sel(kind):
        return [r for r in pr if r["kind"] == kind]
    rows = []
    meds = {}
    for kind, label in (("fresh", "fresh (nothing running: plan, launch, ready, dump proof)"),
                        ("restart", "restart (config change: plan, teardown, launch, ready, dump proof)"),
                        ("noop", "no-op second run (same inputs)")):
        rs = sel(kind)
        w = C.median(r["wall"] for r in rs)
        meds[kind] = w
        ok = sum(1 for r in rs if r["rc"] == 0)
        changed = sorted(set(r["recap"].get("changed", -1) for r in rs))
        over = "-" if kind == "noop" or w is None or st is None else "%s (%.1fx start-up)" % (C.fmt_s(w - st, 1), w / st)
        rows.append([label, len(rs), C.fmt_s(w, 1), ", ".join(C.fmt_s(r["wall"], 1) for r in rs),
                     "%d/%d" % (ok, len(rs)), ",".join(str(c) for c in changed), over])
    td = data.get("teardown") or {}
    rows.append(["teardown.yml at the end", 1, C.fmt_s(td.get("wall"), 1), "-", "%d/1" % (1 if td.get("rc") == 0 else 0),
                 td.get("recap", {}).get("changed", "-"), "-"])
    noop = meds.get("noop")
    restart = meds.get("restart")
    fails = [r for r in pr if r["rc"] != 0]
    targets = [
        {"target": "Second run with the same inputs is a no-op (changed=0)",
         "met": bool(sel("noop")) and all(r["rc"] == 0 and r["recap"].get("changed") == 0 for r in sel("noop")),
         "value": "%d/%d no-op runs changed=0, %s median" % (
             sum(1 for r in sel("noop") if r["recap"].get("changed") == 0), len(sel("noop")), C.fmt_s(noop, 1))},
        {"target": "Every restart_extraction.yml run succeeds (overhead over the server's own start-up "
                   "is reported; there is no numeric target for it)",
         "met": not fails and bool(pr),
         "value": "%d/%d runs ok; a full restart takes %s vs %s server start-up: +%s overhead" % (
             len(pr) - len(fails), len(pr), C.fmt_s(restart, 1), C.fmt_s(st, 2),
             C.fmt_s((restart or 0) - (st or 0), 1))},
    ]
    md = ["`playbooks/restart_extraction.yml` with `inventory/local.yml` (tp 8, emulator phase 0.3 s, "
          "extraction flags), name/port/state/log/dump dir overridden by extra vars. "
          "Emulator start-up = the same command line started directly, exec to ready line: "
          "**%s** (median of %d: %s)." % (C.fmt_s(st, 2), len(data["startup"]),
                                          ", ".join(C.fmt_s(x, 2) for x in data["startup"])), "",
          C.md_table(["run", "n", "wall (median)", "each", "rc 0", "changed", "overhead over start-up"], rows), ""]
    md.append("The overhead is ansible itself (~30 tasks on a 2-core machine: lock, plan in check mode, "
              "dump-dir checks, launch, ready, one /generate that must write a new dump, summary) plus "
              "the teardown of the old server in a real restart. On a real TP-8 host the server's "
              "start-up takes minutes, so this overhead is a few percent there.")
    if fails:
        md.append("")
        md.append("Failed runs (tail):\n\n```\n%s\n```" % fails[0]["tail"])
    return {"title": "Restart (playbooks/restart_extraction.yml)", "markdown": "\n".join(md),
            "targets": targets, "figures": []}
