"""Follow one launch's log incrementally: only new bytes each poll, from the launch's offset.

Unlike `wait_for search_regex` (which re-reads the whole file every second, so an old ready line
in an appended log matches at once), the follower starts at the byte offset the launch record
gives and never looks before it. It survives the two things log management does to files:
- rotation (rename + new file at the path): the old file is drained, then the new inode is
  followed from byte 0;
- truncation (copytruncate, `> file`): size below our position -> restart from 0, noted.
A deleted file keeps being read through the open descriptor (the server still writes there).
SGLang's stderr is a redirect it never reopens, so after a rename it keeps writing to the OLD
inode: the follower keeps draining the previous file too (one extra read per poll).

Only regular files are read. The path is opened with O_NONBLOCK and checked with fstat before
any read: a FIFO planted at the log path would block a plain open() forever, a device would
stream endless bytes. Anything but a regular file is refused (reason `bad_log`).

A re-check of a server that is already running reads only its startup (`read_head`, up to the
ready line) and then new lines (`seek_near_end`): a long-running server's old lines are never read.
"""
from __future__ import annotations

import base64
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

# Bounded work per poll: a flood of output is consumed over several polls, never all at once.
MAX_READ_PER_POLL = 4 * 1024 * 1024
# A "line" without a newline for this long (a progress bar gone wild) is emitted in pieces.
MAX_LINE = 64 * 1024
HEAD_CHUNK = 64 * 1024
_LINE_ENDS = re.compile(rb"[\r\n]")

_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISDIR, "directory"), (stat.S_ISSOCK, "socket"))


def file_kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "special file"


def open_regular(path: str) -> Optional[BinaryIO]:
    """`path` opened for reading, or None when it does not exist. Never blocks (O_NONBLOCK) and
    refuses anything but a regular file, after opening it (fstat: no check-then-open race)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise SglangError("the log %s is a directory, not a regular file: refusing to read it" % path,
                          reason="bad_log", log_path=path)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SglangError("the log %s is a %s, not a regular file: refusing to read it"
                              % (path, file_kind(mode)), reason="bad_log", log_path=path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass
class LogEvent:
    """Something that happened to the followed log file (opened, truncated, rotated, ...)."""

    kind: str  # "opened" | "truncated" | "rotated" | "missing" | "reappeared"
    detail: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "detail": self.detail}


class LogFollower:
    """Incremental reader of `path` starting at byte `offset`.

    `poll()` returns the complete new lines (decoded, newline stripped); a trailing partial line
    is kept until its newline arrives, or returned by `poll(final=True)`.
    """

    def __init__(self, path: str, offset: int = 0, max_read: int = MAX_READ_PER_POLL) -> None:
        self.path = path
        self.offset = max(0, int(offset or 0))
        self.max_read = max_read
        self.events: List[LogEvent] = []
        self.truncated = False
        self.bytes_read = 0
        self._fh: Optional[BinaryIO] = None
        self._previous: Optional[BinaryIO] = None  # the rotated-away file, still drained
        self._prev_ident: Optional[Tuple[int, int]] = None
        self._ident: Optional[Tuple[int, int]] = None  # (st_dev, st_ino) of the open file
        self._pos = 0
        self._partial = b""
        self._missing_noted = False
        self._opened_once = False

    # -- state ----------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._fh is not None

    @property
    def ever_opened(self) -> bool:
        return self._opened_once

    @property
    def position(self) -> int:
        return self._pos

    def _note(self, kind: str, detail: str) -> None:
        self.events.append(LogEvent(kind, detail))

    # -- file handling ----------------------------------------------------------------------
    def _open(self, first: bool) -> bool:
        """Open the file now at `path`; the first open honours the launch offset."""
        fh = open_regular(self.path)
        if fh is None:
            return False
        st = os.fstat(fh.fileno())
        start = 0
        if first:
            start = self.offset
            if st.st_size < self.offset:
                # The launch's bytes are gone (truncated before we looked): read what is there.
                self.truncated = True
                self._note("truncated", "%s is %d bytes, below the launch offset %d: reading "
                           "from 0" % (self.path, st.st_size, self.offset))
                start = 0
        fh.seek(start)
        self._fh, self._pos = fh, start
        self._ident = (st.st_dev, st.st_ino)
        self._opened_once = True
        return True

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = None

    def close(self) -> None:
        self._close()
        if self._previous is not None:
            self._previous.close()
            self._previous = None

    def _drain_previous(self, budget: int) -> bytes:
        if self._previous is None or budget <= 0:
            return b""
        return self._previous.read(budget)

    def _read_available(self, budget: int) -> bytes:
        """Bytes from our position to EOF of the open file (at most `budget`)."""
        if self._fh is None:
            return b""
        st = os.fstat(self._fh.fileno())
        if st.st_size < self._pos:
            self.truncated = True
            self._note("truncated", "%s shrank to %d bytes below position %d: reading from 0"
                       % (self.path, st.st_size, self._pos))
            self._fh.seek(0)
            self._pos = 0
            self._partial = b""  # its start was cut away; a fragment would mislead
        data = self._fh.read(budget)
        self._pos += len(data)
        return data

    def _path_ident(self) -> Optional[Tuple[int, int]]:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    # -- polling ----------------------------------------------------------------------------
    def poll(self, final: bool = False) -> List[str]:
        """New complete lines since the last poll (all remaining text when `final`)."""
        chunks = [self._drain_previous(self.max_read)]
        if self._fh is None and not self._open(first=not self._opened_once):
            self._note_missing("%s does not exist" % self.path)
        else:
            chunks.append(self._read_available(self.max_read - len(chunks[0])))
            self._check_rotation(chunks)
        data = b"".join(chunks)
        self.bytes_read += len(data)
        return self._split(data, final)

    def read_head(self, max_bytes: int, stop: Callable[[str], bool]) -> List[str]:
        """Lines from the start position (the launch offset) up to and including the first line
        for which `stop` is true, reading at most `max_bytes`: a bounded look at the startup."""
        if self._fh is None and not self._open(first=not self._opened_once):
            self._note_missing("%s does not exist" % self.path)
            return []
        lines: List[str] = []
        budget = max_bytes
        while budget > 0:
            data = self._read_available(min(HEAD_CHUNK, budget))
            if not data:
                break
            budget -= len(data)
            self.bytes_read += len(data)
            for line in self._split(data, final=False):
                lines.append(line)
                if stop(line):
                    return lines
        return lines

    def seek_near_end(self, keep_bytes: int = 0) -> None:
        """Skip to `keep_bytes` before the end (never backwards), at a line start: what lies
        between is never read. `keep_bytes=0`: only lines written from now on."""
        if self._fh is None:
            return
        size = os.fstat(self._fh.fileno()).st_size
        target = max(self._pos, size - max(0, keep_bytes))
        if target <= self._pos:
            return
        self._partial = b""
        self._fh.seek(target - 1)
        before = self._fh.read(1)
        self._pos = target
        if before != b"\n":
            # Mid-line: the rest of that line is a fragment; start at the next line.
            rest = self._fh.readline()
            self._pos += len(rest)
            self.bytes_read += len(rest)
        self._fh.seek(self._pos)

    def _note_missing(self, detail: str) -> None:
        if not self._missing_noted:
            self._missing_noted = True
            self._note("missing", detail)

    def _check_rotation(self, chunks: List[bytes]) -> None:
        """After reading to EOF: is another file at `path` now? Then switch to it from 0."""
        budget = self.max_read - sum(len(c) for c in chunks)
        ident = self._path_ident()
        if ident is None:
            self._note_missing("%s was removed; still reading the open file" % self.path)
            return
        if ident == self._ident or budget <= 0:  # no budget left: not yet at EOF, next poll
            return
        if self._previous is not None:
            self._previous.close()
        self._previous, self._fh = self._fh, None
        self._prev_ident = self._ident
        self._missing_noted = False
        if self._open(first=False):
            self._note("rotated", "%s was replaced (new inode): following the new file from 0"
                       % self.path)
            chunks.append(self._read_available(budget))

    def _split(self, data: bytes, final: bool) -> List[str]:
        buf = self._partial + data
        # tqdm redraws with \r and writes no \n until the bar closes: each redraw is a line of
        # its own as soon as the next \r arrives (so progress is seen live), and \r\n is one end.
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        complete, self._partial = buf[:cut + 1], buf[cut + 1:]
        lines: List[bytes] = [seg for seg in _LINE_ENDS.split(complete) if seg]
        while len(self._partial) > MAX_LINE:
            lines.append(self._partial[:MAX_LINE])
            self._partial = self._partial[MAX_LINE:]
        if final:
            lines.extend(self._flush_bytes())
        return [line.decode("utf-8", "replace") for line in lines]

    def _flush_bytes(self) -> List[bytes]:
        rest, self._partial = self._partial, b""
        return [seg for seg in rest.split(b"\r") if seg]

    # -- resuming in another process (a sliced wait) -------------------------------------------
    def pending_text(self) -> str:
        """The text read after the last line end: the redraw a tqdm bar shows right now. For
        progress only: it becomes a line, and is analysed, once its end arrives."""
        return self._partial.decode("utf-8", "replace")

    def snapshot(self) -> Dict[str, Any]:
        """Everything another process needs to go on exactly where this one stopped."""
        prev_pos = self._previous.tell() if self._previous is not None else None
        return {
            "path": self.path, "offset": self.offset, "pos": self._pos,
            "ident": list(self._ident) if self._ident else None,
            "open": self._fh is not None,
            "prev_ident": list(self._prev_ident) if self._previous is not None and self._prev_ident else None,
            "prev_pos": prev_pos,
            "partial": base64.b64encode(self._partial).decode("ascii"),
            "truncated": self.truncated, "bytes_read": self.bytes_read,
            "events": [e.to_dict() for e in self.events],
            "missing_noted": self._missing_noted, "opened_once": self._opened_once,
        }

    @classmethod
    def restore(cls, state: Dict[str, Any], holders: Sequence[int] = ()) -> "LogFollower":
        """A follower positioned where `snapshot()` left off: the same file (found by its inode
        at the path, in the log's directory after a rename, or through an open descriptor of
        `holders` after a delete), at the same byte. Nothing is read twice."""
        follower = cls(str(state["path"]), int(state.get("offset") or 0))
        follower._pos = int(state.get("pos") or 0)
        follower._partial = base64.b64decode(state.get("partial") or "")
        follower.truncated = bool(state.get("truncated"))
        follower.bytes_read = int(state.get("bytes_read") or 0)
        follower.events = [LogEvent(str(e.get("kind")), str(e.get("detail"))) for e in state.get("events") or []]
        follower._missing_noted = bool(state.get("missing_noted"))
        follower._opened_once = bool(state.get("opened_once"))
        ident = _ident(state.get("ident"))
        if state.get("open") and ident is not None:
            fh = _reopen(follower.path, ident, holders)
            if fh is None:
                follower._note("missing", "%s (device %d, inode %d) could not be found again to "
                               "resume reading at byte %d" % (follower.path, ident[0], ident[1], follower._pos))
                follower._partial = b""
            else:
                fh.seek(follower._pos)
                follower._fh, follower._ident = fh, ident
        prev = _ident(state.get("prev_ident"))
        if prev is not None:
            fh = _reopen(follower.path, prev, holders)
            if fh is not None:
                fh.seek(int(state.get("prev_pos") or 0))
                follower._previous, follower._prev_ident = fh, prev
        return follower


def _ident(value: Any) -> Optional[Tuple[int, int]]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    return None


def _candidates(path: str, holders: Sequence[int]) -> List[str]:
    """Where a known inode may be now: the path, its directory (renamed by rotation), the open
    descriptors of the processes writing it (deleted)."""
    out = [path]
    directory = os.path.dirname(path) or "."
    try:
        out += [os.path.join(directory, n) for n in sorted(os.listdir(directory))]
    except OSError:
        pass
    for pid in holders:
        fd_dir = "/proc/%d/fd" % pid
        try:
            out += [os.path.join(fd_dir, fd) for fd in os.listdir(fd_dir)]
        except OSError:
            continue
    return out


def _reopen(path: str, ident: Tuple[int, int], holders: Sequence[int]) -> Optional[BinaryIO]:
    """The regular file with inode `ident`, opened without blocking, or None."""
    for candidate in _candidates(path, holders):
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) != ident or not stat.S_ISREG(st.st_mode):
            continue
        try:
            fh = open_regular(candidate)
        except (OSError, SglangError):
            continue
        if fh is not None:
            got = os.fstat(fh.fileno())
            if (got.st_dev, got.st_ino) == ident:
                return fh
            fh.close()
    return None
