"""What the code and model identity cost in a restart's plan (docs/benchmarks.md, "Code and model
identity").

The plan of every restart (sglang_launch in check mode) reads the identity of what the server
would import and load - one stat per file of the sglang package, of a source checkout's git
state, of the model directory's files - and compares it with the running server's launch record
(_code_identity, _model_identity). Measured here on:

  package    the real sglang 0.5.23 package (the wheel installed with --no-deps into a throwaway
             venv: pip, no network needed when --wheel names a downloaded wheel)
  checkout   the same files as a source checkout with .git (python/sglang in a git work tree,
             one commit, one file patched): the HEAD read by hand plus `git status` of the package
  model      a 64-shard model directory (sparse 4 GiB shards, config, tokenizer, index)

Each case: the plan's cost (build the identity on disk now + compare it with the record kept at
launch: the digests agree, nothing is decoded), a changed tree's cost (one file patched: the
record's listing decoded to name it), and the launch's extra cost (the listing encoded into the
record) with the record's size. Warm caches (the dentries of a tree read a moment before), the
median and the 90th percentile of --runs runs.

Run: python3 benchmarks/bench_identity.py --wheel sglang-0.5.23-*.whl [--runs 30] [--json out.json]
(any Python 3.9+ with pip; no other dependency). `run` and `report` follow benchmarks/run_all.py's
interface (`identity`: the wheel is then downloaded with `pip download sglang==0.5.23 --no-deps`).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "llmops", "sglang")
if not os.path.lexists(LINK):  # a fresh copy of the checkout: the collection link, as tests/conftest.py makes it
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink("../../..", LINK)
sys.path.insert(0, COLLECTIONS)

from ansible_collections.llmops.sglang.plugins.module_utils._host import _model_identity as MI  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _code_identity as CI  # noqa: E402

VERSION = "0.5.23"
SHARDS = 64
BUDGET_MS = 50.0


def _timed(fn: Callable[[], Any], runs: int) -> Dict[str, float]:
    fn()  # warm: the dentries and inodes of the tree are cached, as a plan right after the preflight finds them
    times, cpu = [], []
    for _run in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.process_time() - c0) * 1000.0)
    times.sort()
    # CPU time too: on a shared machine the wall time also counts the other processes' turns
    return {"median_ms": round(statistics.median(times), 2), "p90_ms": round(times[int(0.9 * (len(times) - 1))], 2),
            "min_ms": round(times[0], 2), "cpu_median_ms": round(statistics.median(cpu), 2), "runs": runs}


def install(wheel: Optional[str], work: str) -> Tuple[str, str]:
    """(the sglang package directory of the wheel installed with --no-deps into a fresh venv, how).
    A Python the wheel's tag does not fit (cp311 on 3.12) gets the wheel's files extracted into a
    site-packages directory instead: the same package tree, without the byte-compiled caches pip
    adds (which the identity leaves out anyway)."""
    if not wheel:
        subprocess.run([sys.executable, "-m", "pip", "download", "sglang==%s" % VERSION, "--no-deps", "-q", "-d", work],
                       check=True)
        wheel = glob.glob(os.path.join(work, "sglang-%s-*.whl" % VERSION))[0]
    venv = os.path.join(work, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    done = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--no-deps",
                           "--disable-pip-version-check", os.path.abspath(wheel)], check=False)
    if done.returncode == 0:
        return glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "sglang"))[0], "pip install --no-deps"
    site = os.path.join(work, "site-packages")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return os.path.join(site, "sglang"), "extracted from the wheel (its tag does not fit Python %s)" % (
        platform.python_version())


def checkout_of(package: str, work: str) -> str:
    """A git work tree holding the package's files at python/sglang (committed once), and the
    package directory in it."""
    repo = os.path.join(work, "sglang-src")
    dest = os.path.join(repo, "python", "sglang")
    shutil.copytree(package, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.com",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.com")
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "sglang %s" % VERSION]):
        subprocess.run(["git", "-C", repo] + argv, check=True, env=env, stdout=subprocess.DEVNULL)
    return dest


def model_dir(work: str) -> str:
    path = os.path.join(work, "model")
    os.makedirs(path)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "model.safetensors.index.json"):
        with open(os.path.join(path, name), "w") as fh:
            fh.write("{}\n")
    for i in range(1, SHARDS + 1):
        with open(os.path.join(path, "model-%05d-of-%05d.safetensors" % (i, SHARDS)), "wb") as fh:
            fh.truncate(4 << 30)  # sparse: the identity reads sizes, never bytes
    return path


def _append(path: str) -> None:
    with open(path, "a") as fh:
        fh.write("# patched\n")


def code_case(package: str, env: Dict[str, str], runs: int, run_git: bool = True) -> Dict[str, Any]:
    now = CI.build(package, env, run_git=run_git)
    record = now.record()
    plan = _timed(lambda: CI.compare(record, CI.build(package, env, run_git=run_git)), runs)
    launch = _timed(now.record, runs)
    target = os.path.join(package, "srt", "models", "deepseek_v2.py")
    if not os.path.exists(target):
        target = os.path.join(package, "launch_server.py")
    _append(target)
    changed = _timed(lambda: CI.compare(record, CI.build(package, env, run_git=run_git)), runs)
    said = CI.compare(record, CI.build(package, env, run_git=run_git))
    return {"files": sum(len(r.listing) for r in now.roots), "source": now.source, "git": now.git,
            "plan": plan, "plan_changed": changed, "launch_extra": launch,
            "record_bytes": len(json.dumps(record)), "said": said.get("summary")}


def model_case(path: str, runs: int) -> Dict[str, Any]:
    record = MI.build(path)
    plan = _timed(lambda: MI.compare(record, MI.build(path)), runs)
    shard = os.path.join(path, "model-00003-of-%05d.safetensors" % SHARDS)
    st = os.stat(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))
    said = MI.compare(record, MI.build(path))
    return {"files": len(record["files"]), "plan": plan, "record_bytes": len(json.dumps(record)),
            "said": said.get("summary")}


def machine() -> Dict[str, Any]:
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {"uname": "%s %s %s" % (platform.system(), platform.release(), platform.machine()),
            "cores": os.cpu_count(), "python": platform.python_version(), "load_avg": load,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def run(quick: bool = False, wheel: Optional[str] = None, runs: Optional[int] = None) -> Dict[str, Any]:
    runs = runs or (3 if quick else 30)
    work = tempfile.mkdtemp(prefix="llmops-bench-identity-")
    try:
        package, how = install(wheel, work)
        checkout = checkout_of(package, work)
        model = model_dir(work)
        data: Dict[str, Any] = {"machine": machine(), "version": VERSION, "installed": how}
        data["model"] = model_case(model, runs)
        data["package"] = code_case(package, {}, runs)
        env = {"PYTHONPATH": os.path.dirname(checkout)}
        data["checkout_git"] = code_case(checkout, env, runs)
        data["checkout_nogit"] = code_case(checkout, env, runs, run_git=False)
        return data
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _row(name: str, case: Dict[str, Any], model: Optional[Dict[str, Any]] = None) -> List[str]:
    plan = case["plan"]["median_ms"] + (model["plan"]["median_ms"] if model else 0.0)
    p = case["plan"]
    unchanged = "%.1f ms (p90 %.1f, CPU %.1f)" % (p["median_ms"], p["p90_ms"], p.get("cpu_median_ms", 0.0))
    return [name, str(case["files"]), unchanged,
            "%.1f ms" % case["plan_changed"]["median_ms"], "%.1f ms" % case["launch_extra"]["median_ms"],
            "%.0f KiB" % (case["record_bytes"] / 1024.0), "%.1f ms" % plan]


def report(data: Dict[str, Any], out_dir: str = "", fig_prefix: str = "") -> Dict[str, Any]:
    m, model, pkg = data["machine"], data["model"], data["package"]
    head = ["tree", "files", "plan: unchanged (median)", "plan: one file patched", "launch: record written",
            "record size", "plan with the 64-shard model"]
    rows = [_row("sglang %s package (installed)" % data["version"], pkg, model),
            _row("the same as a checkout, with git status", data["checkout_git"], model),
            _row("the same as a checkout, HEAD only (no git)", data["checkout_nogit"], model)]
    text = ["*Measured %s on `%s`, %s cores, Python %s, load average %s; median and 90th percentile of %d runs, "
            "warm caches; the package %s.*" % (m["date"], m["uname"], m["cores"], m["python"],
                                               "/".join(map(str, m["load_avg"])), pkg["plan"]["runs"],
                                               data.get("installed", "installed")), "",
            "What a restart's plan adds to find out whether the sglang code a server imports or its model changed on "
            "disk since it started (`_code_identity`, `_model_identity`): one `stat` per file, no file read. "
            "\"plan: unchanged\" builds the identity on disk now and compares it with the launch record's (the "
            "digests agree); \"one file patched\" also decodes the record's listing to name the file; \"launch\" is "
            "what writing the listing into the record adds to a launch. The 64-shard model directory (%d files, "
            "sparse 4 GiB shards) costs %.2f ms (p90 %.2f) by itself, its record part %d bytes."
            % (model["files"], model["plan"]["median_ms"], model["plan"]["p90_ms"], model["record_bytes"]), "",
            "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    text += ["| " + " | ".join(r) + " |" for r in rows]
    git = data["checkout_git"].get("git") or {}
    text += ["", "Named after one patch: `%s` (package), `%s` (model). The checkout's git state: HEAD `%s`, "
             "modified `%s`." % (pkg["said"], model["said"], str(git.get("head"))[:12], git.get("modified")),
             "", "The wall time counts every other process's turns on a shared machine; CPU is the plan's own "
             "(the `git status` of a checkout runs in a child process and is not in it). Nearly all of it is the "
             "one `stat` per file of the package (%d files in the %s wheel: %.1f us each here); the model "
             "directory is a few ms. A checkout's `git status` is the costly part where it applies."
             % (pkg["files"], data["version"], 1000.0 * pkg["plan"]["median_ms"] / max(pkg["files"], 1))]
    total = pkg["plan"]["median_ms"] + model["plan"]["median_ms"]
    targets = [{"target": "Code + model identity in the plan at most %d ms (real sglang %s package, 64-shard model)"
                          % (BUDGET_MS, data["version"]), "met": total <= BUDGET_MS,
                "value": "%.1f ms (package %.1f ms for %d files, model %.2f ms; CPU time %.1f ms); checkout with git "
                         "status %.1f ms"
                         % (total, pkg["plan"]["median_ms"], pkg["files"], model["plan"]["median_ms"],
                            pkg["plan"].get("cpu_median_ms", 0.0) + model["plan"].get("cpu_median_ms", 0.0),
                            data["checkout_git"]["plan"]["median_ms"] + model["plan"]["median_ms"])}]
    return {"title": "Code and model identity", "markdown": "\n".join(text) + "\n", "targets": targets}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", help="a downloaded sglang %s wheel (else pip download)" % VERSION)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args(argv)
    data = run(wheel=args.wheel, runs=args.runs)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=2)
    rep = report(data)
    sys.stdout.write("## %s\n\n%s\n" % (rep["title"], rep["markdown"]))
    for t in rep["targets"]:
        sys.stdout.write("target: %s: %s (%s)\n" % (t["target"], "met" if t["met"] else "NOT met", t["value"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
