"""`pkill [-9] -f PATTERN`, limited to the processes one benchmark trial started.

The incident ran `pkill -f sglang` (and a `kill -9` of the leftovers) on a host of its own. On
this shared machine the benchmark must not signal anyone else's process, so this helper applies
pkill's matching rule - a regular expression searched in the NUL-joined-by-spaces command line
(`/proc/PID/cmdline`, i.e. the process title for sglang::* children) - only to the pids listed in
--scope (the trial's launch tree, its escaped worker and its decoys, each with its start time, so
a reused pid is never signalled). What the real command would ALSO have matched on this host
right now is counted in --report, never signalled.

    scoped_pkill.py --scope FILE [--report FILE] [-9] -f PATTERN
"""
import argparse
import json
import os
import re
import signal
import sys


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scope", required=True)
    ap.add_argument("--report")
    ap.add_argument("-9", dest="kill", action="store_true")
    ap.add_argument("-f", dest="pattern", required=True)
    a = ap.parse_args()
    pat = re.compile(a.pattern)
    with open(a.scope) as fh:
        scope = {int(p): int(t) for p, t in (line.split() for line in fh if line.strip())}
    me = {os.getpid(), os.getppid()}
    sig = signal.SIGKILL if a.kill else signal.SIGTERM
    hit, outside = [], 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid in me:
            continue
        cmd = cmdline(pid)
        if not cmd or not pat.search(cmd):
            continue
        if pid in scope and start_time(pid) == scope[pid]:
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except OSError:
                pass
        else:
            outside += 1
    if a.report:
        with open(a.report, "a") as fh:
            fh.write(json.dumps({"pattern": a.pattern, "signal": int(sig), "killed": hit,
                                 "would_also_match_outside_scope": outside}) + "\n")
    # pkill's exit status: 0 when something matched, 1 when nothing did
    return 0 if hit else 1


if __name__ == "__main__":
    sys.exit(main())
