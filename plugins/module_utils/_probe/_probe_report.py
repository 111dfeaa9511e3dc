"""PRIVATE to llmops.sglang. The probe's short report: what an operator asks at a glance.

The probe gathers everything; by default it returns the short form - interpreters with sglang,
servers with their state (members as pid/role/rank/state), the asked ports without their
server_info dump, the asked flags' answers - and the diagnosis. `detail: true` returns the full
data (command lines, parsed args, environments, listeners, server_info/model_info, every
argparse field of each flag, /dev/shm files). Pure functions over the `to_dict()` forms.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

SERVER_KEYS = ("id", "pid", "main", "state", "instance", "user", "age_seconds", "port", "listening_ports",
               "model_path", "tp_size", "interpreter", "pids", "members", "orphaned", "containment", "cgroup",
               "unit")
# A server seen by its command line only (no psutil) also says so.
PARTIAL_KEYS = ("partial", "argv")
MEMBER_KEYS = ("pid", "role", "rank", "state", "orphaned")
PORT_KEYS = ("port", "listening", "server", "holders", "reachable", "version", "model_path", "tp_size",
             "error", "api_key_sent")
FLAG_KEYS = ("type", "default", "choices", "required", "help")
# Keys only `detail: true` returns (documented as such).
DETAIL_ONLY = ("shm",)


def server_state(server: Dict[str, Any], answered: bool = False) -> str:
    """leftover (no main process) | stopped (main in state T) | answering (its port answered the
    probe's HTTP request) | listening | not_listening (starting, or hung before binding) |
    unknown (seen by its command line only: the process table could not be read)."""
    if server.get("partial"):
        return "unknown"
    if not server.get("main"):
        return "leftover"
    main = next((m for m in server.get("members", []) if m.get("role") == "main"), {})
    if main.get("state") in ("T", "t"):
        return "stopped"
    if answered:
        return "answering"
    port = server.get("port")
    return "listening" if port is not None and port in (server.get("listening_ports") or []) else "not_listening"


def with_states(servers: List[Dict[str, Any]], ports: Optional[List[Dict[str, Any]]] = None) -> None:
    """Set each server's `state` (in place); a server whose port answered is `answering`."""
    answered = {p.get("server") for p in ports or [] if p.get("reachable")}
    for server in servers:
        server["state"] = server_state(server, server.get("id") in answered)
        args = server.get("args") or {}
        server["model_path"] = args.get("model_path") or args.get("model")
        server["tp_size"] = args.get("tp_size") or args.get("tp")


def short_server(server: Dict[str, Any]) -> Dict[str, Any]:
    out = {k: server.get(k) for k in SERVER_KEYS + (PARTIAL_KEYS if server.get("partial") else ())}
    out["interpreter"] = {k: (server.get("interpreter") or {}).get(k) for k in ("cmdline", "venv")}
    out["members"] = [{k: m.get(k) for k in MEMBER_KEYS} for m in server.get("members", [])]
    if server.get("outside_cgroup"):  # flagged only when there is something to flag
        out["outside_cgroup"] = server["outside_cgroup"]
    return out


def short_port(rep: Dict[str, Any]) -> Dict[str, Any]:
    out = {k: rep.get(k) for k in PORT_KEYS}
    info = rep.get("server_info") or {}
    out["model_path"] = info.get("model_path")
    out["tp_size"] = info.get("tp_size")
    return out


def short_flags(flags: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    return {name: {k: entry.get(k) for k in FLAG_KEYS} for name, entry in flags.items()}


def shorten(result: Dict[str, Any]) -> Dict[str, Any]:
    """The short report of a full probe result (a new dict; the full one is left as is)."""
    out = {k: v for k, v in result.items() if k not in DETAIL_ONLY}
    out["servers"] = [short_server(s) for s in result.get("servers", [])]
    if "ports" in result:
        out["ports"] = [short_port(r) for r in result["ports"]]
    if "flags" in result:
        out["flags"] = short_flags(result["flags"])
    return out
