"""One launch's log, analysed line by line as it arrives: startup phases, the ready, Uvicorn and
bind lines, and which fatal lines may decide (DESIGN: "identity, not health").

A fatal pattern's words also appear in harmless lines (an optional dependency missing and
skipped, a per-request error the server recovered from), so a match alone decides nothing:
- known benign lines (`_logpatterns.BENIGN_PATTERNS`, plus continuation lines without a
  timestamp) never decide and are never named as a cause;
- while the process lives, a fatal line decides only inside a traceback of the launch's START
  (before the ready line): `decisive`. The bind error always decides;
- every other fatal line is kept in `fatal`: it explains an exit, it never causes a verdict.
"""
from __future__ import annotations

import collections
import re
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Pattern, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _logpatterns as lp

DECISIVE_MAX = 40
TAIL_LINES = 40
WINDOW_LINES = 4000  # lines kept in memory for decisive-line context (startup logs are small)
TRACEBACK_LOOKBACK = 400  # deep stacks: ~2 lines per frame
EXPLAIN_MAX = 8  # fatal lines whose tracebacks make up the decisive lines


# A record can follow a tqdm bar on the same physical line (the bar ends in \r, not \n).
_ANY_STAMP = re.compile(lp.TIMESTAMP.pattern[1:])


def line_epoch(line: str, upto: Optional[int] = None) -> Optional[Tuple[float, bool]]:
    """(epoch, has sub-second precision) from sglang's `[YYYY-mm-dd HH:MM:SS(.mmm)]` (local):
    the line's leading stamp, or with `upto` the last stamp that starts before that offset."""
    if upto is None:
        m = lp.TIMESTAMP.match(line)
    else:
        m = None
        for m in _ANY_STAMP.finditer(line, 0, upto):
            pass
    if not m:
        return None
    try:
        base = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None
    return base + (float(m.group(2)) if m.group(2) else 0.0), bool(m.group(2))


class LogAnalyzer:
    """Reads each new line once. `feed(..., history=True)` is for old lines of a server that is
    already running: they mark phases and the ready line, never a fatal line."""

    def __init__(self, ready: Sequence[Pattern[str]], fatal: Sequence[Pattern[str]],
                 port: Optional[int], launched_at: float, ready_phase: str = lp.READY_PHASE,
                 benign: Sequence[Pattern[str]] = ()) -> None:
        self.ready_res, self.fatal_res, self.benign_res = list(ready), list(fatal), list(benign)
        self.phase_res = [(name, re.compile(rx)) for name, rx in lp.PHASES]
        self.port, self.launched_at, self.ready_phase = port, launched_at, ready_phase
        self.window: Deque[Tuple[int, str]] = collections.deque(maxlen=WINDOW_LINES)
        self.count = 0
        self.timeline: List[Dict[str, Any]] = []
        self.seen_phases: set = set()
        self.ready_line: Optional[str] = None
        self.ready_index: Optional[int] = None
        self.uvicorn_line: Optional[str] = None
        self.other_uvicorn: Optional[str] = None
        self.bind_error: Optional[str] = None
        self.fatal: List[Tuple[int, str]] = []  # non-benign fatal lines: explain an exit
        self.decisive: List[Tuple[int, str]] = []  # decide while the process lives
        self.past_start = False  # set for a server already running: nothing is "start" any more
        self._benign_message = False
        self._benign_traceback = False
        self._traceback_at: Optional[int] = None  # first line of the open traceback
        self._kept: Dict[int, str] = {}  # restored lines older than the window's contiguous part

    # -- time ----------------------------------------------------------------------------------
    def _seconds(self, line: str, now: float, at: Optional[int] = None) -> float:
        """Seconds since launch: observed time, unless the log's own stamp is earlier (a
        backlog read at once); second-resolution stamps get +0.5 s. `at`: where the phase's
        text starts (its stamp is the last one before it)."""
        observed = now - self.launched_at
        stamp = line_epoch(line, None if at is None else at + 1)
        if stamp is not None:
            written = stamp[0] - self.launched_at + (0.0 if stamp[1] else 0.5)
            observed = min(observed, written)
        return round(max(0.0, observed), 2)

    def _phase(self, name: str, line: str, now: float, at: Optional[int] = None) -> None:
        # A phase seen after a later one is an echo (uvicorn's access line for the warmup
        # request can land after the ready line): the timeline stays in startup order.
        later = lp.PHASE_NAMES[lp.PHASE_NAMES.index(name) + 1:]
        if name not in self.seen_phases and not self.seen_phases.intersection(later):
            self.seen_phases.add(name)
            self.timeline.append({"phase": name, "seconds": self._seconds(line, now, at),
                                  "line": line[:500]})

    def ready_seconds(self) -> Optional[float]:
        for entry in self.timeline:
            if entry["phase"] == self.ready_phase:
                return entry["seconds"]
        return None

    # -- classification ------------------------------------------------------------------------
    def is_ready_line(self, line: str) -> bool:
        return lp.first_match(line, self.ready_res) is not None

    @property
    def in_start(self) -> bool:
        return not self.past_start and self.ready_line is None

    def feed(self, lines: Sequence[str], now: float, history: bool = False) -> None:
        for line in lines:
            index = self.count
            self.count += 1
            self.window.append((index, line))
            self._classify(index, line, now, history)

    def _benign(self, line: str) -> bool:
        """A timestamped line (or a fresh traceback) starts a message; lines without a stamp
        continue it (`Ignore ... reports ImportError with:` puts the error on the next line).
        Inside a traceback only the traceback's own start counts: a benign line of another
        process written in the middle of it never hides its exception line."""
        own = lp.first_match(line, self.benign_res) is not None
        starts_traceback = lp.TRACEBACK_START.search(line) is not None
        if lp.TIMESTAMP_PREFIX.match(line) or starts_traceback:
            self._benign_message = own
            if starts_traceback:
                self._benign_traceback = own
            return own
        if self._traceback_at is not None:
            return own or self._benign_traceback
        return own or self._benign_message

    def _classify(self, index: int, line: str, now: float, history: bool) -> None:
        benign = self._benign(line)
        for name, rx in self.phase_res:
            hit = rx.search(line) if name not in self.seen_phases else None
            if hit:
                self._phase(name, line, now, hit.start())
        m = lp.UVICORN_RUNNING.search(line)
        if m:
            if self.port is None or int(m.group(2)) == self.port:
                self.uvicorn_line = self.uvicorn_line or line
            else:
                self.other_uvicorn = line
        if self.ready_line is None and self.is_ready_line(line):
            self.ready_line, self.ready_index = line, index
            self._phase(self.ready_phase, line, now)
        if history:
            return
        self._track_traceback(index, line)
        in_traceback = self._traceback_at is not None
        if lp.BIND_ERROR_ANY.search(line):
            self.bind_error = self.bind_error or line
            self.fatal.append((index, line))
            self.decisive.append((index, line))
        elif not benign and lp.first_match(line, self.fatal_res):
            self.fatal.append((index, line))
            if in_traceback and self.in_start:
                self.decisive.append((index, line))
        if in_traceback and index != self._traceback_at and lp.EXCEPTION_LINE.search(line):
            self._traceback_at = None  # the exception line closes the traceback

    def _track_traceback(self, index: int, line: str) -> None:
        if lp.TRACEBACK_START.search(line):
            self._traceback_at = index
        elif self._traceback_at is not None and index - self._traceback_at > TRACEBACK_LOOKBACK:
            self._traceback_at = None  # never closed: not a traceback we can trust

    # -- reporting -----------------------------------------------------------------------------
    @property
    def phase(self) -> Optional[str]:
        """The furthest phase reached, in canonical order."""
        reached = [p for p in lp.PHASE_NAMES if p in self.seen_phases]
        return reached[-1] if reached else None

    def tail(self, n: int = TAIL_LINES) -> List[str]:
        return [entry[1] for entry in list(self.window)[-n:]]

    def _at(self, index: int) -> Optional[str]:
        if self.window:
            pos = index - self.window[0][0]
            if 0 <= pos < len(self.window):
                return self.window[pos][1]
        # Lines kept by a resumed analyzer around old fatal lines, within the same window.
        return self._kept.get(index) if index >= self.count - WINDOW_LINES else None

    def explaining(self) -> List[Tuple[int, str]]:
        """The fatal lines that explain a failure: from the first decisive one on; else those
        after the ready line (what came before it did not stop the start); else all of them."""
        if self.decisive:
            first = self.decisive[0][0]
            return [f for f in self.fatal if f[0] >= first]
        if self.ready_index is None:
            return self.fatal
        return [f for f in self.fatal if f[0] > self.ready_index]

    def _block(self, index: int) -> Tuple[int, int]:
        """The lines that explain one fatal line: its whole traceback when it has one."""
        line = self._at(index) or ""
        start = end = index
        if lp.TRACEBACK_START.search(line):
            for j in range(index + 1, min(self.count, index + TRACEBACK_LOOKBACK)):
                if lp.EXCEPTION_LINE.search(self._at(j) or ""):
                    end = j
                    break
            return start, end
        for j in range(index - 1, max(-1, index - TRACEBACK_LOOKBACK), -1):
            text = self._at(j)
            if text is None or (lp.EXCEPTION_LINE.search(text) and j != index):
                break
            if lp.TRACEBACK_START.search(text):
                start = j
                break
        return start, end

    def cause(self) -> Optional[str]:
        """The first explaining line in one sentence: a `... Traceback (most recent call
        last):` line is completed with its exception line, so the message names the error."""
        lines = self.explaining()
        if not lines:
            return None
        index, line = lines[0]
        text = lp.TIMESTAMP_PREFIX.sub("", line).strip()
        if lp.TRACEBACK_START.search(text):
            _start, end = self._block(index)
            head = lp.TRACEBACK_START.split(text)[0].rstrip(" :")
            last = (self._at(end) or "").strip() if end != index else ""
            text = "%s: %s" % (head, last) if head and last else (last or text)
        return text

    def decisive_lines(self, limit: int = DECISIVE_MAX) -> List[str]:
        """From `Traceback` to the exception line for each explaining line, merged, capped."""
        ranges: List[Tuple[int, int]] = []
        for index in [f[0] for f in self.explaining()[:EXPLAIN_MAX]]:
            start, end = self._block(index)
            if ranges and start <= ranges[-1][1] + 1:
                ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
            else:
                ranges.append((start, end))
        out: List[str] = []
        for n, (start, end) in enumerate(ranges):
            if n:
                out.append("...")
            out.extend(self._at(i) or "" for i in range(start, end + 1))
        if len(out) > limit:
            head = limit // 4
            out = out[:head] + ["... (%d lines omitted)" % (len(out) - limit + 1)] + out[-(limit - head - 1):]
        return out

    # -- resuming in another process (a sliced wait) -------------------------------------------
    def _kept_fatal(self) -> List[Tuple[int, str]]:
        """The fatal lines `explaining()` can still pick, whatever comes next: the first few
        overall, after the ready line, and from the first decisive line on."""
        picks: Dict[int, str] = dict(self.fatal[:EXPLAIN_MAX])
        if self.ready_index is not None:
            picks.update([f for f in self.fatal if f[0] > self.ready_index][:EXPLAIN_MAX])
        if self.decisive:
            picks.update([f for f in self.fatal if f[0] >= self.decisive[0][0]][:EXPLAIN_MAX])
        return sorted(picks.items())

    def _kept_lines(self, fatal: Sequence[Tuple[int, str]]) -> List[Tuple[int, str]]:
        """The lines any later answer can show: the recent ones (a later fatal line looks back
        that far for its traceback; the tail) and those around each fatal line kept."""
        floor = self.count - WINDOW_LINES
        wanted = set(range(max(floor, self.count - TRACEBACK_LOOKBACK - 1), self.count))
        for index, _line in fatal:
            wanted.update(range(max(floor, index - TRACEBACK_LOOKBACK), min(self.count, index + TRACEBACK_LOOKBACK + 1)))
        out = []
        for index in sorted(wanted):
            line = self._at(index)
            if line is not None:
                out.append((index, line))
        return out

    def snapshot(self, clean: Callable[[str], str] = lambda text: text) -> Dict[str, Any]:
        """Plain data from which `restore()` answers exactly as this analyzer would; bounded
        (the lines that can still be shown, not the whole window). `clean` redacts text."""
        fatal = self._kept_fatal()

        def pairs(items: Sequence[Tuple[int, str]]) -> List[List[Any]]:
            return [[index, clean(line)] for index, line in items]

        def text(value: Optional[str]) -> Optional[str]:
            return clean(value) if value is not None else None

        return {
            "count": self.count, "lines": pairs(self._kept_lines(fatal)),
            "timeline": [dict(t, line=clean(t["line"])) for t in self.timeline],
            "seen_phases": sorted(self.seen_phases),
            "ready_line": text(self.ready_line), "ready_index": self.ready_index,
            "uvicorn_line": text(self.uvicorn_line), "other_uvicorn": text(self.other_uvicorn),
            "bind_error": text(self.bind_error), "fatal": pairs(fatal),
            "decisive": pairs(self.decisive[:EXPLAIN_MAX]), "past_start": self.past_start,
            "benign_message": self._benign_message, "benign_traceback": self._benign_traceback,
            "traceback_at": self._traceback_at,
        }

    def restore(self, state: Dict[str, Any]) -> None:
        """Continue from `snapshot()`: the next line fed gets the next index."""
        self.count = int(state["count"])
        lines = [(int(i), str(line)) for i, line in state.get("lines") or []]
        # The contiguous run that ends at the last line is the window; older lines are kept aside.
        start = max(0, len(lines) - 1)
        while start > 0 and lines[start - 1][0] == lines[start][0] - 1:
            start -= 1
        self.window.clear()
        self.window.extend(lines[start:])
        self._kept = dict(lines[:start])
        self.timeline = [dict(t) for t in state.get("timeline") or []]
        self.seen_phases = set(state.get("seen_phases") or [])
        self.ready_line, self.ready_index = state.get("ready_line"), state.get("ready_index")
        self.uvicorn_line, self.other_uvicorn = state.get("uvicorn_line"), state.get("other_uvicorn")
        self.bind_error = state.get("bind_error")
        self.fatal = [(int(i), str(line)) for i, line in state.get("fatal") or []]
        self.decisive = [(int(i), str(line)) for i, line in state.get("decisive") or []]
        self.past_start = bool(state.get("past_start"))
        self._benign_message = bool(state.get("benign_message"))
        self._benign_traceback = bool(state.get("benign_traceback"))
        self._traceback_at = state.get("traceback_at")


def for_launch(ready: Sequence[str], fatal: Sequence[str], benign: Sequence[str], port: Optional[int],
               launched_at: float, node_rank: int) -> LogAnalyzer:
    """The analyzer of one launch's log from the operator's pattern lists (a bad regex is an
    SglangError naming its option). Ranks >= 1 never print the ready line: their signal is the
    dummy health server line (plus the operator's own ready patterns)."""
    ready_src = list(ready)
    if node_rank >= 1:
        ready_src = list(lp.DUMMY_HEALTH_PATTERNS) + [p for p in ready if p not in lp.READY_PATTERNS]
    return LogAnalyzer(lp.compile_patterns(ready_src, "ready_patterns"),
                       lp.compile_patterns(fatal, "fatal_patterns"), port, launched_at,
                       lp.NODE_READY_PHASE if node_rank >= 1 else lp.READY_PHASE,
                       benign=lp.compile_patterns(benign, "benign_patterns"))
