"""Short, specific sentences about what is wrong on a host, built from the probe's data.

Pure functions over plain dicts (the `to_dict()` forms), so each rule is unit-testable and the
module only concatenates them. A sentence names the pid, path, port or GPU it is about.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import describe_cmdline

GIB = 1024.0 ** 3


def age(seconds: Optional[float]) -> str:
    """3725 -> "1 hour 2 minutes"; the two largest units are enough for an operator."""
    if seconds is None:
        return "an unknown time"
    seconds = max(0, int(seconds))
    units = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
    parts: List[str] = []
    for name, size in units:
        value, seconds = divmod(seconds, size)
        if value:
            parts.append("%d %s%s" % (value, name, "" if value == 1 else "s"))
        if len(parts) == 2:
            break
    return " ".join(parts) or "0 seconds"


def _cmd(argv: Iterable[str], limit: int = 160) -> str:
    return describe_cmdline(list(argv), limit=limit)


def suggestion(use: Dict[str, Any]) -> str:
    """"the running instance 'serving' (pid 42) uses /root/ml-env/bin/python (sglang 0.5.23):
    use venv: /root/ml-env" - what a broken or sglang-less interpreter should be replaced with."""
    version = " (sglang %s)" % use["sglang_version"] if use.get("sglang_version") else ""
    target = "venv: %s" % use["venv"] if use.get("venv") else "python: %s" % use["python"]
    return "%s uses %s%s: use %s" % (use["source"], use["python"], version, target)


def interpreter(interp: Optional[Dict[str, Any]], elsewhere: List[Dict[str, Any]],
                in_use: Optional[List[Dict[str, Any]]] = None) -> List[str]:
    """The interpreter lacks sglang: name what this host's instances run with (`in_use`,
    see _interpreter.in_use), and only when nothing runs, the other installs found."""
    if not interp or interp.get("sglang_installed"):
        return []
    if in_use:
        return ["python %s has no sglang; %s" % (interp["path"], suggestion(in_use[0]))]
    # an install marked untrusted (another user can replace it) is never named as advice
    others = ", ".join("%s has %s" % (e.get("python") or e.get("location"), e.get("sglang_version"))
                       for e in elsewhere if e.get("trusted", True))
    if others:
        return ["python %s has no sglang, but %s: use venv/python to point at it"
                % (interp["path"], others)]
    if any(not e.get("trusted", True) for e in elsewhere):
        return ["python %s has no sglang, and every other sglang install found can be replaced by someone other "
                "than root or this module's user (not suggested, see below)" % interp["path"]]
    return ["python %s has no sglang, and no other sglang install was found under the search paths"
            % interp["path"]]


def not_suggested(items: List[Dict[str, Any]], user: str) -> List[str]:
    """Interpreters with sglang that were left out of the advice because someone other than root
    or `user` can replace them (see _deps.untrusted_reason)."""
    out = []
    for item in items:
        version = "sglang %s, " % item["sglang_version"] if item.get("sglang_version") else ""
        out.append("python %s (%s%s) is %s - not suggested: only interpreters that nobody but root or user %s "
                   "can replace are named" % (item["python"], version, item.get("source") or "found on this host",
                                              item.get("why"), user))
    return out


def _quiet_level(level: str) -> bool:
    # imported here: a probe of a host without servers never compiles the log patterns
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns

    return _logpatterns.is_quiet_level(level)


def servers(items: List[Dict[str, Any]], now: Optional[float] = None) -> List[str]:
    now = time.time() if now is None else now
    out: List[str] = []
    for server in items:
        level = str(server.get("args", {}).get("log_level", "")).strip().lower()
        # a level above INFO hides "The server is fired up and ready to roll!" (an INFO line)
        if server.get("main") and level and _quiet_level(level):
            out.append("server pid %s runs with --log-level %s: its log never shows the ready line "
                       "'The server is fired up and ready to roll!'" % (server["pid"], level))
        orphans = [m for m in server.get("members", []) if m.get("orphaned")]
        if not server.get("main") and server.get("members"):
            pids = ", ".join("%s %s" % (m["cmdline"][0], m["pid"]) for m in server["members"])
            out.append("%d sglang process(es) have no main server process (leftovers of a dead server, "
                       "started %s ago by %s): %s" % (len(server["members"]), age(_age(server, now)),
                                                      server.get("user"), pids))
        else:
            for m in orphans:
                parent = "init (pid 1)" if m["ppid"] == 1 else "pid %d, not the server" % m["ppid"]
                out.append("%s (pid %d) of server %s is orphaned: its parent is %s"
                           % (m["cmdline"][0], m["pid"], server["id"], parent))
        for m in server.get("members", []):
            if m.get("state") == "D":
                out.append("pid %d (%s) of server %s is in uninterruptible sleep (D state): it may "
                           "not release GPU memory until the kernel lets go" % (m["pid"], m["cmdline"][0], server["id"]))
    return out


def containment(items: List[Dict[str, Any]]) -> List[str]:
    """Processes attributed to a contained server (by ancestry, session, marker, titles or its
    socket) that are not in its cgroup: teardown by cgroup would not reach them."""
    out = []
    for server in items:
        outside = server.get("outside_cgroup") or []
        if outside:
            inst = " (instance %s)" % server["instance"] if server.get("instance") else ""
            out.append("server %s%s has %d process(es) outside its cgroup %s: pids %s - escaped from "
                       "containment or started beside it; a teardown by cgroup does not reach them"
                       % (server.get("id"), inst, len(outside), server.get("cgroup"),
                          ", ".join(str(p) for p in outside)))
    return out


def partial_servers(items: List[Dict[str, Any]]) -> List[str]:
    """Servers seen by their command line only (the process table could not be read)."""
    return ["sglang server pid %s (user %s) runs %s - seen by its command line only: its processes, ports "
            "and state were not read" % (s["pid"], s.get("user"), _cmd(s.get("argv") or []))
            for s in items if s.get("partial")]


def _age(server: Dict[str, Any], now: float) -> Optional[float]:
    start = server.get("start_time")
    return now - start if start is not None else server.get("age_seconds")


def ports(reports: List[Dict[str, Any]], servers_by_id: Dict[str, Dict[str, Any]],
          now: Optional[float] = None) -> List[str]:
    """Who holds each asked-for port: a server (age, args) or a foreign process."""
    now = time.time() if now is None else now
    out: List[str] = []
    for rep in reports:
        port = rep["port"]
        if "listening" in rep and rep["listening"] is None:  # not read (no process layer): see `unavailable`
            continue
        if not rep.get("listeners"):
            out.append("nothing listens on port %d (IPv4 or IPv6)" % port)
            continue
        server = servers_by_id.get(rep.get("server") or "")
        if server is not None:
            who = "sglang server pid %s" % server["pid"] if server.get("main") else \
                "leftover sglang processes %s" % server["pids"]
            inst = " (instance %s)" % server["instance"] if server.get("instance") else ""
            out.append("port %d is held by %s%s of user %s, started %s ago, args: %s"
                       % (port, who, inst, server.get("user"), age(_age(server, now)),
                          _cmd(server.get("argv", [])[1:]) or "?"))
        else:
            for holder in rep.get("holders", []):
                out.append("port %d is held by pid %s (user %s), not an sglang server: %s"
                           % (port, holder.get("pid"), holder.get("user"), _cmd(holder.get("cmdline", []))))
        if rep.get("error"):
            out.append("port %d: %s" % (port, rep["error"]))
    return out


def gpus(report: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    for gpu in report.get("gpus", []):
        for proc in gpu.get("processes", []):
            if proc.get("owner") != "foreign":
                continue
            mib = proc.get("used_mib")
            size = "%.1f GiB" % (mib / 1024.0) if mib is not None else "memory"
            out.append("GPU %s holds %s for a foreign process: pid %s (user %s): %s"
                       % (gpu["index"], size, proc["pid"], proc.get("user") or "?",
                          _cmd(proc.get("cmdline") or []) or "?"))
    return out


def shm(entries: List[Dict[str, Any]]) -> List[str]:
    leaked = [e for e in entries if not e.get("held")]
    if not leaked:
        return []
    total = sum(int(e.get("size") or 0) for e in leaked)
    names = ", ".join(e["path"].rsplit("/", 1)[-1] for e in leaked[:5])
    more = " and %d more" % (len(leaked) - 5) if len(leaked) > 5 else ""
    return ["%d leaked shared-memory segment(s) (%.2f GiB) held by no live process: %s%s"
            % (len(leaked), total / GIB, names, more)]


def flags(missing: List[str], sglang_version: Optional[str],
          answers: Optional[Dict[str, Dict[str, Any]]] = None) -> List[str]:
    """Flags this sglang does not have (with a did-you-mean) and values it does not accept
    (`answers` from _flagcheck.answers)."""
    answers = answers or {}
    out = []
    for name in missing:
        similar = (answers.get(name) or {}).get("did_you_mean") or []
        hint = "; did you mean %s?" % " or ".join(similar) if similar else ""
        out.append("flag %s does not exist in sglang %s%s" % (name, sglang_version or "?", hint))
    for name, ans in answers.items():
        if ans.get("exists") and not ans.get("accepted"):
            out.append(ans["answer"][len("no: "):])
    return out


def dependencies(missing: List[str], python: str, found: Optional[str]) -> List[str]:
    """This module's own interpreter lacks psutil/requests (see _deps)."""
    if not missing:
        return []
    if found:
        return ["python %s (running this module) cannot import %s: rerun with `-e ansible_python_interpreter=%s`"
                % (python, " and ".join(missing), found)]
    return ["python %s (running this module) cannot import %s, and no interpreter on this host that has "
            "them was found: install them, or point ansible_python_interpreter at the sglang venv's python"
            % (python, " and ".join(missing))]
