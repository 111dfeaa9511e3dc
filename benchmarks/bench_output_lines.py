"""How many lines an operator reads: restart_serving.yml's default output, per outcome.

One instance on the SGLang emulator, driven through the real playbook with the operator's
default output (the `default` callback, yaml results, no -v; ansible.cfg), in this order:

  first launch        nothing ran before
  converged re-run    the same inputs again (changed=0)
  restart             one argument changed (mem-fraction-static 0.5 -> 0.6)
  refused             an invalid choice (--reasoning-parser kimi_k9) while the server serves
  crash, rolled back  the new configuration dies while loading (oom): the old one comes back
  crash, first launch nothing to roll back to: the host is down

Counted: every line of stdout + stderr, the `skipping:` lines among them, and how often the
decisive cause is printed. Not part of run_all (it measures output, not time):

  .venv/bin/python benchmarks/bench_output_lines.py [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from helpers import play_runs  # noqa: E402

PLAYBOOK = "restart_serving.yml"
BAD_CHOICE = "is not a valid choice"
OOM = "Not enough memory"


def _scenarios() -> List[Tuple[str, Dict[str, Any], str]]:
    """(label, extra vars, the decisive cause to count or '')."""
    old = {"sglang_serving_args": {"mem-fraction-static": 0.5}}
    return [
        ("first launch", old, ""),
        ("converged re-run", old, ""),
        ("restart (one argument changed)", {"sglang_serving_args": {"mem-fraction-static": 0.6}}, ""),
        ("refused (invalid choice), old serves", {"sglang_serving_args": {"mem-fraction-static": 0.6,
                                                                          "reasoning-parser": "kimi_k9"}}, BAD_CHOICE),
        ("crash of the new config, rolled back", {"sglang_serving_args": {"mem-fraction-static": 0.7},
                                                  "sglang_serving_env": {"SGLANG_EMULATOR_FAULT": "oom"}}, OOM),
        ("crash of a first launch, down", {"sglang_serving_env": {"SGLANG_EMULATOR_FAULT": "oom"}}, OOM),
    ]


def _count(out: str, cause: str) -> Dict[str, Any]:
    lines = out.splitlines()
    return {"lines": len(lines), "skipping": sum(1 for line in lines if line.startswith("skipping:")),
            # YAML's line wrapping undone (a break plus the continuation's indent is one space)
            "cause_printed": re.sub(r"\s+", " ", out).replace("''", "'").count(cause) if cause else None}


def run() -> List[Dict[str, Any]]:
    base = tempfile.mkdtemp(prefix="bench-output-")
    inv = play_runs.write_inventory(os.path.join(base, "inv.yml"), {"localhost": play_runs.host_vars(base, "h")})
    # a first launch is one of an instance that never ran: its own name and state dir (teardown.yml
    # keeps an instance's last proven-good launch, so a crash after it would roll back)
    fresh = play_runs.write_inventory(os.path.join(base, "fresh.yml"),
                                      {"localhost": play_runs.host_vars(base, "fresh")})
    rows: List[Dict[str, Any]] = []
    try:
        for label, extra, cause in _scenarios():
            if label.startswith("crash of a first launch"):
                play_runs.teardown(inv)
            target = fresh if label.startswith("crash of a first launch") else inv
            run_ = play_runs.play(target, PLAYBOOK, "-e", json.dumps(extra))
            out = run_.stdout + run_.stderr
            if os.environ.get("BENCH_OUTPUT_DIR"):  # the outputs themselves, to read what the lines are
                with open(os.path.join(os.environ["BENCH_OUTPUT_DIR"], "%d.txt" % len(rows)), "w") as fh:
                    fh.write(out)
            rows.append(dict(_count(out, cause), scenario=label, rc=run_.returncode))
    finally:
        play_runs.teardown(inv)
        play_runs.teardown(fresh)
    return rows


def markdown(rows: List[Dict[str, Any]]) -> str:
    out = ["| outcome | rc | lines | `skipping:` | cause printed |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append("| %s | %s | %d | %d | %s |" % (r["scenario"], r["rc"], r["lines"], r["skipping"],
                                                   "-" if r["cause_printed"] is None else r["cause_printed"]))
    return "\n".join(out)


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print a markdown table instead of JSON")
    args = ap.parse_args(argv)
    rows = run()
    print(markdown(rows) if args.markdown else json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
