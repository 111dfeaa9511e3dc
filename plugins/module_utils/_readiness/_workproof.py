"""Proof that a ready server does its job: one request, checked for its effect.

A healthy server is not a working configuration (the incidents: reasoning returned inside
`content` because --reasoning-parser was missing; a server whose patched model never wrote a
hidden-state dump). Run by the readiness wait when every identity proof holds, inside the settle
window, so the proof costs the request's own time and no extra module call:

- `generate`: POST /generate (4 tokens) must answer 200; with `dump_dir`, a regular file in that
  directory (recursively, symlinks not followed) must appear or change after the request began.
  The directory is listed just before the request: no clock comparison (a dump the start-up's
  warm-up wrote a moment before is in that listing, not a new one). The dump directory is the
  operator's data (training data): once checked, the proof's own file is removed again - only
  when it is the one file that appeared since the request (another request's dump cannot be told
  apart from it, so then nothing is removed), through directory descriptors without following
  symlinks, a regular file owned by the server's user and still the inode that was seen.
- `chat_reasoning`: POST /v1/chat/completions (the model id from GET /v1/models) must answer 200
  with a non-empty `choices[0].message.reasoning_content`.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core import _http

KINDS = ("generate", "chat_reasoning")
GENERATE_PAYLOAD = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
CHAT_QUESTION = "What is 2 + 2? Answer briefly."
DUMP_POLL_S = 0.1
MAX_LISTED = 200000  # a dump directory is purged by restarts; beyond this the listing stops

Listing = Dict[str, Tuple[int, int, int]]


@dataclass
class WorkCheck:
    """Which proof of work, and its limits."""
    kind: str
    dump_dir: Optional[str] = None
    dump_wait: float = 30.0
    timeout: float = 60.0
    server_uid: Optional[int] = None  # the server's user: the only owner of a dump the proof removes


@dataclass
class WorkResult:
    """The proof of work: ok or not, what it saw."""
    ok: bool
    kind: str
    msg: str
    status: Optional[int] = None
    evidence: Optional[str] = None  # the new dump's path, or the reasoning's length
    seconds: float = 0.0
    removed: Optional[bool] = None  # generate with dump_dir: the proof's own dump removed again
    kept_why: Optional[str] = None  # why it was not

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def from_dict(data: Optional[Dict[str, Any]]) -> Optional[WorkResult]:
    return WorkResult(**data) if data else None


def list_dumps(root: str) -> Listing:
    """path -> (inode, size, mtime_ns) of every regular file under `root`, symlinks not
    followed; {} when `root` is missing or not a directory."""
    out: Listing = {}
    stack = [root]
    while stack and len(out) < MAX_LISTED:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
            elif stat.S_ISREG(st.st_mode):
                out[entry.path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def _new_dump(before: Listing, now: Listing) -> Optional[str]:
    """The most recently modified file that is new or changed since `before`."""
    fresh = [(sig[2], path) for path, sig in now.items() if before.get(path) != sig]
    return max(fresh)[1] if fresh else None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _unlink_checked(root: str, path: str, ino: int, owner: Optional[int]) -> Optional[str]:
    """Remove `path` (a file under `root`) through directory descriptors opened without following
    symlinks, only while it is a regular file of `owner` with inode `ino`. None when removed,
    else why it was kept."""
    if owner is None:
        return "the server's user is unknown"
    parts = os.path.relpath(path, root).split(os.sep)
    if any(part in ("", ".", "..") for part in parts):
        return "it is not inside %s" % root
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        return "%s cannot be opened without following a symlink (%s)" % (root, exc.strerror or exc)
    try:
        for part in parts[:-1]:
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
        st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_ino != ino:
            return "it is no longer the file that was checked"
        if st.st_uid != owner:
            return "it belongs to uid %d, not to the server's user (uid %d)" % (st.st_uid, owner)
        os.unlink(parts[-1], dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return "it was gone already"
        return "%s: %s" % (path, exc.strerror or exc)
    finally:
        os.close(fd)
    return None


def _remove_own(check: WorkCheck, before: Listing, result: WorkResult) -> WorkResult:
    """The proof's own dump removed from the data again, when it can be told apart."""
    now = list_dumps(check.dump_dir or "")
    changed = [path for path, sig in now.items() if before.get(path) != sig]
    path = result.evidence or ""
    if path not in now:
        why: Optional[str] = "it was gone already"
    elif path in before:
        why = "it existed before the request (a file that changed is not the proof's own)"
    elif changed != [path]:
        why = ("%d files appeared or changed since the request (other requests' dumps): the proof's own cannot be "
               "told apart from them" % len(changed))
    else:
        why = _unlink_checked(check.dump_dir or "", path, now[path][0], check.server_uid)
    result.removed, result.kept_why = why is None, why
    result.msg += "; removed again (the dump directory holds data)" if result.removed else "; kept: %s" % result.kept_why
    return result


def _generate(check: WorkCheck, host: str, port: int, api_key: Optional[str],
              clock: Callable[[], float], sleep: Callable[[float], None]) -> WorkResult:
    before = list_dumps(check.dump_dir) if check.dump_dir else {}
    resp = _http.request(host, port, "/generate", api_key, method="POST", payload=GENERATE_PAYLOAD,
                         timeout=check.timeout)
    if resp.status != 200:
        return WorkResult(False, check.kind, "POST /generate answered %s: the server is ready but does not generate"
                          % (resp.error or resp.status), resp.status)
    if not check.dump_dir:
        return WorkResult(True, check.kind, "POST /generate -> 200", resp.status)
    deadline = clock() + check.dump_wait
    while True:
        path = _new_dump(before, list_dumps(check.dump_dir))
        if path is not None:
            return _remove_own(check, before, WorkResult(True, check.kind, "POST /generate -> 200, new dump %s" % path,
                                                         resp.status, path))
        if clock() >= deadline:
            return WorkResult(
                False, check.kind,
                "the server is ready and answered POST /generate, but no new file appeared in %s within %g s: "
                "extraction does not work (did SGLANG_HS_DUMP_DIR reach the server - see the launch record's env - "
                "and is the patched model code installed in its interpreter?)" % (check.dump_dir, check.dump_wait),
                resp.status)
        sleep(DUMP_POLL_S)


def _model_id(host: str, port: int, api_key: Optional[str], timeout: float) -> str:
    resp = _http.request(host, port, "/v1/models", api_key, timeout=timeout)
    data = resp.body.get("data") if isinstance(resp.body, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    return str(first.get("id") or "default")


def _reasoning_of(body: Any) -> str:
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return ""
    text = message.get("reasoning_content") if isinstance(message, dict) else None
    return text.strip() if isinstance(text, str) else ""


def _chat_reasoning(check: WorkCheck, host: str, port: int, api_key: Optional[str]) -> WorkResult:
    payload = {"model": _model_id(host, port, api_key, check.timeout),
               "messages": [{"role": "user", "content": CHAT_QUESTION}], "max_tokens": 256, "temperature": 0}
    resp = _http.request(host, port, "/v1/chat/completions", api_key, method="POST", payload=payload,
                         timeout=check.timeout)
    reasoning = _reasoning_of(resp.body) if resp.status == 200 else ""
    if resp.status == 200 and reasoning:
        return WorkResult(True, check.kind, "POST /v1/chat/completions -> 200, reasoning_content %d chars"
                          % len(reasoning), resp.status, str(len(reasoning)))
    return WorkResult(
        False, check.kind,
        "POST /v1/chat/completions answered %s with an empty reasoning_content: the reasoning is not split out "
        "of content. Is --reasoning-parser set and supported by this model?" % (resp.error or resp.status),
        resp.status)


def prove(check: WorkCheck, host: str, port: int, api_key: Optional[str],
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> WorkResult:
    """The proof's result; never raises for server trouble."""
    began = clock()
    if check.kind == "generate":
        result = _generate(check, host, port, api_key, clock, sleep)
    else:
        result = _chat_reasoning(check, host, port, api_key)
    result.seconds = round(clock() - began, 3)
    return result
