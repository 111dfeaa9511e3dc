"""SSH pipelining: round trips per task and wall time of a restart over real SSH.

One harness host (tests/multihost/harness.sh: a network + PID namespace with its own sshd, the
emulator as sglang); playbooks/restart_extraction.yml against it with `-vvv`, pipelining on
and off (ANSIBLE_PIPELINING), a forced restart and a converged run each. A round trip is one
ssh/sftp/scp process the connection plugin started (`SSH: EXEC` in the -vvv output). Needs root.
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import Any, Dict, List

import common as C

HARNESS = os.path.join(C.ROOT, "tests", "multihost", "harness.sh")


def _env_file(directory: str) -> Dict[str, str]:
    env = {}
    with open(os.path.join(directory, "env")) as fh:
        for line in fh:
            m = re.match(r"export (\w+)=(.*)$", line.strip())
            if m:
                env[m.group(1)] = m.group(2)
    return env


def round_trips(text: str) -> int:
    return len(re.findall(r"SSH: EXEC (?:ssh|sftp|scp)\b", text))


def tasks(text: str) -> int:
    return len(re.findall(r"^TASK \[", text, re.M))


def one(inventory: str, pipelining: bool, extra: List[str]) -> Dict[str, Any]:
    env = C.ansible_env()
    env["ANSIBLE_PIPELINING"] = "true" if pipelining else "false"
    argv = [C.ANSIBLE_PLAYBOOK, "-vvv", "-i", inventory, os.path.join(C.ROOT, "playbooks", "restart_extraction.yml"),
            "-l", "mh1", "-e", "llmops_mh_test_run=%s" % C.RUN_ID] + extra
    rc, wall, out = C.run_timed(argv, timeout=600, env=env)
    return {"rc": rc, "wall": wall, "round_trips": round_trips(out), "tasks": tasks(out),
            "tail": out[-1500:] if rc else ""}


def run(quick: bool = False) -> Dict[str, Any]:
    if os.geteuid() != 0:
        raise RuntimeError("bench_pipelining needs root (network namespaces, sshd)")
    directory = subprocess.run([HARNESS, "up", "--hosts", "1"], capture_output=True, text=True, check=True).stdout.strip()
    try:
        inventory = _env_file(directory)["LLMOPS_MH_INVENTORY"]
        rows = []
        for generation in range(1, 3 if quick else 4):
            for pipelining in (True, False):
                forced = one(inventory, pipelining, ["-e", "sglang_force=true", "-e", "llmops_mh_generation=%d" % generation])
                converged = one(inventory, pipelining, ["-e", "llmops_mh_generation=%d" % generation])
                rows.append({"pipelining": pipelining, "forced": forced, "converged": converged})
                C.log("pipelining=%s: forced %.1f s %d trips / %d tasks rc=%d; converged %.1f s %d trips rc=%d" % (
                    pipelining, forced["wall"], forced["round_trips"], forced["tasks"], forced["rc"],
                    converged["wall"], converged["round_trips"], converged["rc"]))
        subprocess.run([C.ANSIBLE_PLAYBOOK, "-i", inventory, os.path.join(C.ROOT, "playbooks", "teardown.yml"),
                        "-l", "mh1"], capture_output=True, env=C.ansible_env(), check=False)
    finally:
        subprocess.run([HARNESS, "down", directory], capture_output=True, check=False)
    return {"rows": rows}


def report(data: Dict[str, Any], fig_dir: str, fig_prefix: str = "") -> Dict[str, Any]:
    rows = data["rows"]
    failed = [r for r in rows if r["forced"]["rc"] or r["converged"]["rc"]]
    ok = [r for r in rows if r not in failed]
    table, med = [], {}
    for flag in (True, False):
        sel = [r for r in ok if r["pipelining"] is flag]
        if not sel:
            continue
        m = {k: C.median(r[k]["wall"] for r in sel) for k in ("forced", "converged")}
        trips = {k: C.median(r[k]["round_trips"] for r in sel) for k in ("forced", "converged")}
        ntasks = {k: C.median(r[k]["tasks"] for r in sel) for k in ("forced", "converged")}
        med[flag] = m
        table.append(["on" if flag else "off", str(len(sel)), C.fmt_s(m["forced"], 1),
                      "%d (%d tasks)" % (trips["forced"], ntasks["forced"]), C.fmt_s(m["converged"], 1),
                      "%d (%d tasks)" % (trips["converged"], ntasks["converged"])])
    md = ["One harness host over real SSH (network + PID namespace, its own sshd; the emulator, tp 2); "
          "`restart_extraction.yml -vvv` with `ANSIBLE_PIPELINING` on and off, interleaved; a round trip is one "
          "ssh/sftp/scp process the connection plugin started; medians of the runs shown.", "",
          C.md_table(["pipelining", "runs", "forced restart wall", "ssh round trips per run (forced)",
                      "converged wall", "ssh round trips per run (converged)"], table),
          "", "Most tasks of a restart run on the controller (set_fact, the summary); only the module tasks "
          "(3 in a forced restart: plan with lock, replace, ready) go over SSH: with pipelining each is one round "
          "trip, without it each also creates a remote temp dir, copies the module over and removes it again."]
    if True in med and False in med:
        md += ["", "Pipelining off / on: forced restart %.2fx, converged run %.2fx the wall time."
               % (med[False]["forced"] / med[True]["forced"], med[False]["converged"] / med[True]["converged"])]
    for r in failed:
        which = "forced" if r["forced"]["rc"] else "converged"
        md += ["", "**FAILED** (pipelining %s, %s run, rc=%d); not in the table. Tail:\n\n```\n%s\n```"
               % ("on" if r["pipelining"] else "off", which, r[which]["rc"], r[which]["tail"][-1000:])]
    targets = [{"target": "pipelining's effect on a restart over SSH, measured", "met": True in med and False in med,
                "value": ("off/on forced %.2fx" % (med[False]["forced"] / med[True]["forced"]))
                if True in med and False in med else "failed"}]
    return {"title": "SSH pipelining (one harness host)", "markdown": "\n".join(md), "targets": targets, "figures": []}
