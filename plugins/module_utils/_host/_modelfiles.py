"""PRIVATE to llmops.sglang. The files of a model checkpoint, chosen safely.

Which files: the shards named by the index (`model.safetensors.index.json`, else
`pytorch_model.bin.index.json`), else every top-level `*.safetensors`, else every top-level
`*.bin`; plus the small files a server reads at start (config, tokenizer, chat template).

Where symlinks may lead (the tree rule): the model directory is resolved first (the operator
named it, so a symlinked model directory is followed). Its resolved path is the tree, except for a
Hugging Face hub cache snapshot - a resolved path `<cache>/models--<org>--<name>/snapshots/<rev>`
- whose files are links to `../../blobs/<hash>`: there the tree is the repository's cache
directory `<cache>/models--<org>--<name>` (the parent of `snapshots/`). A file is used only when
its fully resolved path lies inside the tree and is a regular file; anything else is refused
and nothing at all is read. Files are then opened by their resolved path with O_NOFOLLOW, and
the open descriptor is checked again (same device and inode, /proc/self/fd path inside the
tree), so a symlink swapped in after the check cannot lead the read elsewhere.
"""
from __future__ import annotations

import errno
import fnmatch
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_GLOBS = ("*.safetensors", "*.bin")  # tried in this order; the first that matches wins
# Small files SGLang/transformers read at start (exact names or globs, top level only).
AUX_GLOBS = ("config.json", "generation_config.json", "preprocessor_config.json",
             "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.*",
             "merges.txt", "*.tiktoken", "*.model", "chat_template*", "*.jinja",
             "configuration_*.py", "modeling_*.py", "tokenization_*.py")
HF_SNAPSHOTS = "snapshots"
HF_REPO_PREFIX = "models--"
NOT_REGULAR = "not a regular file"


@dataclass
class ModelFile:
    """One file to warm: the name inside the model dir, its resolved path, identity and size."""
    name: str
    path: str
    size: int
    dev: int
    ino: int
    kind: str  # "weight" or "aux"

    def to_dict(self) -> Dict[str, object]:
        return {"name": self.name, "path": self.path, "size": self.size, "kind": self.kind}


@dataclass
class Selection:
    """The weight files of a model directory and where their list came from."""

    model_path: str
    resolved: str
    tree: str
    source: str  # where the weight list came from: the index file name or the glob
    files: List[ModelFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def tree_root(resolved: str) -> str:
    """The directory inside which every file of the model must resolve (see the module doc)."""
    parent = os.path.dirname(resolved)
    repo = os.path.dirname(parent)
    if os.path.basename(parent) == HF_SNAPSHOTS and os.path.basename(repo).startswith(HF_REPO_PREFIX):
        return repo
    return resolved


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_model_dir(model_path: str) -> Tuple[str, str]:
    """(resolved directory, tree root), or SglangError bad_model_path / not_a_directory."""
    if not model_path or not os.path.isabs(model_path):
        raise SglangError("model_path must be an absolute path (got %r)" % model_path,
                          reason="bad_model_path", path=model_path)
    if not os.path.lexists(model_path):
        raise SglangError("model_path %s does not exist" % model_path, reason="bad_model_path", path=model_path)
    resolved = os.path.realpath(model_path)
    if not os.path.exists(resolved):
        raise SglangError("model_path %s is a symlink to %s, which does not exist" % (model_path, resolved),
                          reason="bad_model_path", path=model_path)
    if not os.path.isdir(resolved):
        raise SglangError("model_path %s is not a directory (%s)" % (model_path, resolved),
                          reason="not_a_directory", path=model_path)
    return resolved, tree_root(resolved)


# An index lists shard names; a real one is a few hundred KiB. The cap keeps a hostile or broken
# file (a link to /dev/zero is refused anyway) from filling memory.
MAX_INDEX_BYTES = 16 << 20


def _read_index(directory: str, tree: str, index_name: str) -> bytes:
    """The index file's bytes, read through the same checks as a shard: inside the tree, a
    regular file, opened O_NOFOLLOW|O_NONBLOCK and identity-checked (never a FIFO, device or a
    root-only file outside the model)."""
    found, refusal = _check(directory, tree, index_name, "weight")
    if refusal or found is None:
        why = refusal["why"] if refusal else NOT_REGULAR
        raise SglangError("refusing to read the index %s: %s -> %s (%s)"
                          % (index_name, os.path.join(directory, index_name),
                             refusal["target"] if refusal else "?", why),
                          reason="not_regular_file" if why == NOT_REGULAR else "unsafe_symlink",
                          path=os.path.join(directory, index_name), refused=[refusal] if refusal else [])
    if found.size > MAX_INDEX_BYTES:
        raise SglangError("%s is %d bytes, more than an index can be (%d)" % (found.path, found.size, MAX_INDEX_BYTES),
                          reason="bad_index", path=found.path)
    fd = open_checked(found, tree)
    try:
        chunks = []
        left = MAX_INDEX_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _index_shards(directory: str, tree: str, index_name: str) -> List[str]:
    path = os.path.join(directory, index_name)
    try:
        data = json.loads(_read_index(directory, tree, index_name).decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise SglangError("%s is not valid JSON: %s" % (path, exc), reason="bad_index", path=path)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise SglangError("%s has no weight_map listing the shards" % path, reason="bad_index", path=path)
    shards = sorted(set(weight_map.values()))
    for name in shards:
        norm = os.path.normpath(name) if isinstance(name, str) and name else ""
        if not norm or os.path.isabs(norm) or norm == ".." or norm.startswith(".." + os.sep):
            raise SglangError("%s lists a shard outside the model directory: %r" % (path, name),
                              reason="bad_index", path=path)
    return shards


def _top_level(directory: str, patterns: Tuple[str, ...]) -> List[str]:
    names = sorted(os.listdir(directory))
    return [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]


def weight_names(directory: str, tree: str) -> Tuple[str, List[str]]:
    """(source, shard names relative to the model dir)."""
    for index_name in INDEX_FILES:
        if os.path.lexists(os.path.join(directory, index_name)):
            return index_name, _index_shards(directory, tree, index_name)
    for pattern in WEIGHT_GLOBS:
        names = _top_level(directory, (pattern,))
        if names:
            return pattern, names
    return "", []


def _check(directory: str, tree: str, name: str, kind: str) -> Tuple[Optional[ModelFile], Optional[Dict[str, str]]]:
    """(the file, None), (None, a refusal {name, path, target, why}), or (None, None) for an
    aux entry that is no file (a `tokenizer/` directory). A missing weight or dangling link raises."""
    path = os.path.join(directory, name)
    target = os.path.realpath(path)
    if not inside(target, tree):
        return None, {"name": name, "path": path, "target": target, "why": "resolves outside %s" % tree}
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        raise SglangError("%s of model %s is missing (%s): the checkpoint is incomplete"
                          % (name, directory, target), reason="missing_file", path=path)
    if not stat.S_ISREG(st.st_mode):
        if kind == "aux":
            return None, None
        return None, {"name": name, "path": path, "target": target, "why": NOT_REGULAR}
    return ModelFile(name=name, path=target, size=st.st_size, dev=st.st_dev, ino=st.st_ino, kind=kind), None


def select(model_path: str) -> Selection:
    """The checkpoint's weight and aux files, all inside the tree; SglangError otherwise."""
    resolved, tree = resolve_model_dir(model_path)
    source, weights = weight_names(resolved, tree)
    if not weights:
        raise SglangError("no weight files in %s: no %s and no top-level %s"
                          % (model_path, " or ".join(INDEX_FILES), " or ".join(WEIGHT_GLOBS)),
                          reason="no_weights", path=model_path)
    selection = Selection(model_path=model_path, resolved=resolved, tree=tree, source=source)
    refused: List[Dict[str, str]] = []
    aux = _top_level(resolved, AUX_GLOBS + ((source,) if source in INDEX_FILES else ()))
    # Aux files first: the server reads config and tokenizer before the first shard.
    for name, kind in [(n, "aux") for n in aux if n not in weights] + [(n, "weight") for n in weights]:
        found, refusal = _check(resolved, tree, name, kind)
        if refusal:
            refused.append(refusal)
        elif found:
            selection.files.append(found)
    if refused:
        escaping = any(r["why"] != NOT_REGULAR for r in refused)
        raise SglangError("refusing to read %d file(s) of %s that lead outside %s or are not regular "
                          "files (nothing was read): %s" % (len(refused), model_path, tree, ", ".join(
                              "%s -> %s (%s)" % (r["name"], r["target"], r["why"]) for r in refused[:5])),
                          reason="unsafe_symlink" if escaping else "not_regular_file", refused=refused, tree=tree)
    return selection


def open_checked(entry: ModelFile, tree: str) -> int:
    """A read-only descriptor of exactly the file that was checked, or SglangError unsafe_symlink."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(entry.path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the resolved path became a symlink after the check
            raise SglangError("%s became a symlink after it was checked; not read" % entry.path,
                              reason="unsafe_symlink", path=entry.path)
        raise
    try:
        st = os.fstat(fd)
        where = _fd_path(fd)
        if (not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (entry.dev, entry.ino)
                or (where is not None and not inside(where, tree))):
            raise SglangError("%s changed after it was checked (now %s); not read"
                              % (entry.path, where or "another file"), reason="unsafe_symlink", path=entry.path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fd_path(fd: int) -> Optional[str]:
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return None
