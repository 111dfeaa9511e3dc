"""PRIVATE to llmops.sglang. The model a server loaded, as it is on disk: its model identity.

New weights copied over the old ones at the same path change no fingerprint input, so the
launch record keeps the model directory's files that a server reads at start - config,
tokenizer, chat template, custom model code, the weight index files and every weight file - by
name, size and mtime (never their contents: an index is not opened to learn the shard names,
every top-level weight file counts). A symlinked file (a Hugging Face cache snapshot) counts as
its target, so a new blob behind the same name is a change. A model given as a hub id is not on
this host's disk: it has no identity.
"""
from __future__ import annotations

import fnmatch
import os
import stat
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._host import _file_identity as _fid
from ansible_collections.llmops.sglang.plugins.module_utils._host import _modelfiles

VERSION = 1
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
INDEX_GLOBS = ("*.index.json",)
_GLOBS = WEIGHT_GLOBS + INDEX_GLOBS + _modelfiles.AUX_GLOBS


def is_weight(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in WEIGHT_GLOBS)


def build(model_path: str) -> Optional[Dict[str, Any]]:
    """{version, path (resolved), files: {name: [size, mtime_ns]}}; None for a path that is not
    on disk (a hub id). A single file (GGUF) is its own only entry."""
    if not model_path or not os.path.isabs(model_path) or not os.path.exists(model_path):
        return None
    resolved = os.path.realpath(model_path)
    files: Dict[str, List[int]] = {}
    if not os.path.isdir(resolved):
        st = os.stat(resolved)
        files[os.path.basename(resolved)] = [st.st_size, st.st_mtime_ns]
        return {"version": VERSION, "path": resolved, "files": files}
    try:
        it = os.scandir(resolved)
    except OSError as exc:
        return {"version": VERSION, "path": resolved, "files": files,
                "error": "cannot list %s: %s" % (resolved, exc.strerror or exc)}
    with it:
        for e in it:
            if not any(fnmatch.fnmatch(e.name, p) for p in _GLOBS):
                continue
            try:
                st = e.stat()  # follows a symlink: the blob behind the name
            except OSError:
                files[e.name] = [_fid.UNREADABLE, 0]
                continue
            if stat.S_ISREG(st.st_mode):
                files[e.name] = [st.st_size, st.st_mtime_ns]
    return {"version": VERSION, "path": resolved, "files": dict(sorted(files.items()))}


def summary(identity: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """For results: the path, how many files and weights, their total size."""
    if not identity:
        return None
    files = identity.get("files") or {}
    weights = [n for n in files if is_weight(n)]
    out = {"path": identity.get("path"), "files": len(files), "weights": len(weights),
           "weight_bytes": sum(int(files[n][0]) for n in weights if int(files[n][0]) > 0)}
    if identity.get("error"):
        out["error"] = identity["error"]
    return out


def compare(recorded: Any, now: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """{state: same | changed | unknown, why, files: {modified, added, removed}, summary,
    weights (a weight file is among them)}."""
    if not isinstance(recorded, Mapping) or recorded.get("version") != VERSION:
        return {"state": "unknown", "why": "the launch record keeps no model identity"}
    if now is None:
        return {"state": "unknown", "why": "the model is not on this host's disk now"}
    if recorded.get("error") or now.get("error"):
        return {"state": "unknown", "why": str(recorded.get("error") or now.get("error"))}
    before = {str(k): tuple(v) for k, v in (recorded.get("files") or {}).items()}
    after = {str(k): tuple(v) for k, v in (now.get("files") or {}).items()}
    moved = recorded.get("path") != now.get("path")
    if before == after and not moved:
        return {"state": "same"}
    diff = _fid.changes(before, after)  # type: ignore[arg-type]
    weights = [n for n in _fid.names(diff) if is_weight(n)]
    named = weights + [n for n in _fid.names(diff) if not is_weight(n)]
    out = {"state": "changed", "files": diff, "count": len(named), "weights": bool(weights),
           "summary": _fid.describe(named)}
    if moved:  # a symlinked model directory pointed at another checkpoint
        where = "%s resolves to %s (was %s)" % ("the model directory", now.get("path"), recorded.get("path"))
        out["summary"] = "%s: %s" % (where, out["summary"]) if named else where
    return out
