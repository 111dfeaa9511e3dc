"""PRIVATE to llmops.sglang. Running servers whose code or weights on disk differ from what they
loaded: "patched after start".

A server imports its code and reads its weights once, at start. The launch record keeps their
identity from that moment (_code_identity, _model_identity); the probe compares it with the disk
now, so an operator sees that the running process is not what the files say - before a restart
picks the change up, or when nobody meant to change anything. Stats only (git is not run: the
HEAD is read by hand), and only for records whose server is alive.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._host import _model_identity
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _code_identity


def of_record(record: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """{code, model}: each the sentence naming what differs, or None when it is the same; None
    as a whole when the record keeps no identity (a launch from before they were kept)."""
    if "code_identity" not in record and "model_identity" not in record:
        return None
    pid = record.get("pid")
    out: Dict[str, Any] = {"code": None, "model": None}
    code = record.get("code_identity")
    if isinstance(code, dict):
        seen = _code_identity.compare(code, _code_identity.from_record(code, run_git=False))
        if seen["state"] == "changed":
            out["code"] = "sglang code changed since pid %s started: %s" % (pid, seen["summary"])
            out["code_files"] = seen["files"]
    model = record.get("model_identity")
    if isinstance(model, dict) and model.get("path"):
        seen = _model_identity.compare(model, _model_identity.build(str(model["path"])))
        if seen["state"] == "changed":
            out["model"] = "model %s changed: %s" % ("weights" if seen.get("weights") else "files", seen["summary"])
            out["model_files"] = seen["files"]
    return out


def mark(records: List[Dict[str, Any]], full: List[Dict[str, Any]]) -> List[str]:
    """Set `patched_after_start` on each live record (False: disk and server agree; a dict of
    what differs; None: unknown, an old record) and return the diagnosis lines."""
    by_id = {r.get("launch_id"): r for r in full if r.get("launch_id")}
    lines = []
    for rec in records:
        kept = by_id.get(rec.get("launch_id"))
        if not rec.get("alive") or kept is None:
            continue
        found = of_record(kept)
        if found is None:
            rec["patched_after_start"] = None
            continue
        differs = [found[k] for k in ("code", "model") if found[k]]
        rec["patched_after_start"] = found if differs else False
        if differs:
            lines.append("instance %s (pid %s) was patched after start: %s; the running server still runs what it "
                         "loaded then - restart it to load what is on disk" % (rec.get("name"), rec.get("pid"),
                                                                               "; ".join(differs)))
    return lines
