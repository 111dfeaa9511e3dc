"""Run the benchmarks and write docs/benchmarks.md plus the PNG figures beside it.

    .venv/bin/python benchmarks/run_all.py                      # everything (`make bench`)
    .venv/bin/python benchmarks/run_all.py --only readiness,teardown
    .venv/bin/python benchmarks/run_all.py --only probe --quick  # 1 run, short budgets
    .venv/bin/python benchmarks/run_all.py --only fleet --splice # replace only these sections

A full run (no --quick) writes docs/benchmarks.md and docs/bench_*.png; with --only, the
sections not run are taken from the last full results in benchmarks/results/ (git-ignored).
With --splice, only the sections (and target rows) of the benchmarks run are replaced in the
existing docs/benchmarks.md; every other section is kept as it stands (a fresh checkout has no
saved results). A --quick run never touches docs/: it writes build/bench-quick/benchmarks.md and its figures.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

BENCHES = ["readiness", "progress", "teardown", "restart", "probe", "fleet", "prewarm", "containment", "router_roll", "pipelining"]
MODULES = {"progress": "bench_progress", "router_roll": "bench_router_roll", "prewarm": "bench_prewarm", "containment": "bench_containment",
           "readiness": "bench_readiness", "teardown": "bench_teardown", "restart": "bench_restart",
           "probe": "bench_probe", "fleet": "bench_fleet",
           "pipelining": "bench_pipelining"}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma list of: " + ",".join(BENCHES))
    ap.add_argument("--quick", action="store_true", help="one run each, short budgets (smoke test)")
    ap.add_argument("--splice", action="store_true",
                    help="replace only the sections of the benchmarks run in the existing docs/benchmarks.md")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from saved results")
    args = ap.parse_args(argv)
    only = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHES)
    unknown = [b for b in only if b not in BENCHES]
    if unknown:
        ap.error("unknown benchmark(s): %s (choose from %s)" % (", ".join(unknown), ", ".join(BENCHES)))
    suffix = "-quick" if args.quick else ""
    if args.quick:
        out_dir, fig_prefix = os.path.join(C.ROOT, "build", "bench-quick"), ""
    else:
        out_dir, fig_prefix = C.DOCS, ""
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(C.BENCH_ROOT, exist_ok=True)
    t_all = time.time()
    status: Dict[str, str] = {}
    if not args.report_only:
        C.log("run token %s, work dir %s" % (C.TOKEN, C.BENCH_ROOT))
        for name in only:
            mod = importlib.import_module(MODULES[name])
            C.log("== %s%s" % (name, " (quick)" if args.quick else ""))
            t0 = time.time()
            meta = C.machine()
            try:
                data = mod.run(quick=args.quick)
                status[name] = "ok"
            except Exception:  # noqa: BLE001  (one broken benchmark must not lose the others)
                traceback.print_exc()
                data = {"error": traceback.format_exc()}
                status[name] = "error"
            finally:
                C.cleanup_all()
            data["_meta"] = dict(meta, seconds=round(time.time() - t0, 1), quick=args.quick)
            C.save_json(name + suffix, data)
            C.log("== %s done in %.0f s" % (name, time.time() - t0))
    if not args.report_only:
        C.save_json("last-run" + suffix, {"benches": only, "seconds": round(time.time() - t_all),
                                          "date": C.machine()["date"], "status": status})
    if args.splice and not args.quick:
        splice_report(out_dir, fig_prefix, only)
    else:
        write_report(out_dir, fig_prefix, suffix, only if args.quick else BENCHES)
    C.rmtree(C.BENCH_ROOT)
    C.rmtree(C.SHM_ROOT)
    C.log("wrote %s in %.0f s" % (os.path.join(out_dir, "benchmarks.md"), time.time() - t_all))
    return 1 if "error" in status.values() else 0


def _sections(text: str) -> List[List[str]]:
    """The document as [head lines, section lines...] split at '## ' headings."""
    parts: List[List[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("## "):
            parts.append([])
        parts[-1].append(line)
    return parts


def _key(heading: str) -> str:
    return heading[3:].split(" (", 1)[0].strip()


def splice_report(out_dir: str, fig_prefix: str, names: List[str]) -> None:
    """Replace, in the existing report, the sections and target rows of `names` only."""
    path = os.path.join(out_dir, "benchmarks.md")
    with open(path) as fh:
        parts = _sections(fh.read())
    tmp = os.path.join(C.BENCH_ROOT, "splice")
    os.makedirs(tmp, exist_ok=True)
    write_report(tmp, fig_prefix, "", names)
    with open(os.path.join(tmp, "benchmarks.md")) as fh:
        fresh = _sections(fh.read())
    for name in [n for n in os.listdir(tmp) if n.endswith(".png")]:
        os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
    new_targets = [ln for p in fresh if p and p[0] == "## Targets" for ln in p if ln.startswith("| ") and "---" not in ln][1:]
    for part in parts:
        if part and part[0] == "## Targets":
            rows = [ln for ln in part if not any(ln.startswith("| %s |" % n) for n in names)]
            end = max(i for i, ln in enumerate(rows) if ln.startswith("|")) + 1
            part[:] = rows[:end] + new_targets + rows[end:]
    for section in fresh[1:]:
        if section[0] == "## Targets":
            continue
        at = next((i for i, p in enumerate(parts) if p and _key(p[0]) == _key(section[0])), None)
        if at is None:
            if parts and parts[-1] and parts[-1][-1].strip():
                parts[-1].append("")  # a heading needs its blank line
            parts.append(section)
        else:
            parts[at] = section
    with open(path, "w") as fh:
        fh.write("\n".join(line for p in parts for line in p).rstrip() + "\n")


def write_report(out_dir: str, fig_prefix: str, suffix: str, names: List[str]) -> None:
    sections, targets, metas = [], [], {}
    for name in names:
        data = C.load_json(name + suffix)
        if data is None:
            sections.append("## %s\n\nNot run yet (`benchmarks/run_all.py --only %s`).\n" % (name, name))
            continue
        meta = data.get("_meta", {})
        metas[name] = meta
        if "error" in data:
            sections.append("## %s\n\nThe benchmark failed on its last run:\n\n```\n%s\n```\n"
                            % (name, data["error"][-3000:]))
            targets.append({"target": "%s benchmark ran" % name, "met": False, "value": "failed", "bench": name})
            continue
        mod = importlib.import_module(MODULES[name])
        rep = mod.report(data, out_dir, fig_prefix)
        head = ("## %s\n\n*Measured %s on `%s`, %s cores (%s), load average at start %s, "
                "%s processes on the host; this section took %.0f s.*\n\n"
                % (rep["title"], meta.get("date"), meta.get("uname"), meta.get("cores"), meta.get("cpu"),
                   "/".join(str(x) for x in meta.get("load_avg", [])), meta.get("processes_on_host"),
                   meta.get("seconds", 0)))
        sections.append(head + rep["markdown"] + "\n")
        for t in rep["targets"]:
            t["bench"] = name
            targets.append(t)
    any_meta = next(iter(metas.values()), C.machine())
    lines = ["# Benchmarks", ""]
    lines.append("Generated by `make bench` (`.venv/bin/python benchmarks/run_all.py`); do not edit by hand. "
                 "Machine: `%s`, %s cores, %s GiB RAM, Python %s. This is a **shared** development "
                 "machine (other engineers' tests were running at the same time), so absolute times are "
                 "noisy; every comparison is between tools measured in the same run, on the same "
                 "launches. Each table states its date and the number of runs it is the median of. "
                 "All servers are the SGLang emulator (`tests/emulator`) on loopback."
                 % (any_meta.get("uname"), any_meta.get("cores"), any_meta.get("mem_gib"), any_meta.get("python")))
    last = C.load_json("last-run" + suffix)
    if last:
        lines.append("")
        lines.append("Last invocation (%s) ran: %s, in %d s (about %.1f minutes) including the plots."
                     % (last.get("date"), ", ".join(last.get("benches", [])), last.get("seconds", 0),
                        last.get("seconds", 0) / 60.0))
    lines += ["", "## Targets", ""]
    lines.append(C.md_table(["benchmark", "target", "met", "measured"],
                            [[t["bench"], t["target"], "**met**" if t["met"] else "**not met**", t["value"]]
                             for t in targets]))
    lines.append("")
    lines += sections
    with open(os.path.join(out_dir, "benchmarks.md"), "w") as fh:
        fh.write("\n".join(lines).rstrip() + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
