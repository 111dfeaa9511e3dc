"""How far one SGLang start has got, from its own log: the phase and the tqdm bars' counts.

Read from the sglang 0.5.6 and 0.5.23 sources (reference: "Startup phases in the log"):
- weights: `Load weight begin. avail mem=...`, then rank 0's tqdm bar
  `Loading safetensors checkpoint shards:  48% Completed | 31/64 [00:10<00:11,  2.86it/s]`
  (BAR_FORMAT; other loaders: np_cache / pt shards, `Multi-thread loading shards`,
  `Loading safetensors using <loader>` with tqdm's default `48%|####  | 31/64` bar), then
  `Load weight end. ...`;
- `KV Cache is allocated ...`, `Memory pool end. avail mem=...`;
- CUDA graphs: `Capture cuda graph begin.` (0.5.6), `Capture target decode CUDA graph begin.`
  (0.5.23), then rank 0's bar `Capturing batches (bs=4 avail_mem=20.15 GB):  12%|#  | 4/35 [...]`
  (`Capturing prefill shape (num_tokens=...)` for prefill graphs), then `... graph end. ...`;
- `Uvicorn running on ...`, the warmup `POST /generate`, the ready line.
tqdm redraws a bar with `\\r`: every redraw arrives as a line of its own, and the redraw being
shown now is the follower's unterminated text (`peek`). Informational only: nothing here decides
readiness. The state is a small dict so a sliced wait can carry it from slice to slice.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Optional, Sequence

# Stages in startup order; the tracker never goes back, except from "graphs captured" to a
# further capture (prefill graphs, then decode graphs).
STAGES = ("starting", "initialising", "loading weights", "weights loaded", "allocating KV cache",
          "memory pool ready", "capturing CUDA graphs", "CUDA graphs captured", "HTTP server up",
          "warming up", "ready")
_ORDER = {name: i for i, name in enumerate(STAGES)}

# A tqdm bar: BAR_FORMAT's `NN% Completed | n/N` or the default `NN%|bar| n/N`.
_BAR = r":\s*(\d{1,3})%(?: Completed \||\|[^|\r\n]*\|)\s*(\d+)/(\d+)"
WEIGHT_BAR = re.compile(
    r"(?:Loading (?:safetensors|np_cache|pt) checkpoint shards|Multi-thread loading (?:pt checkpoint )?shards"
    r"|Loading safetensors using [\w ]+?)" + _BAR)
GRAPH_BAR = re.compile(r"Capturing (batches|prefill shape) \((?:bs|num_tokens)=(\d+)[^)]*\)" + _BAR)

_EVENTS = (
    ("initialising", re.compile(r"Init torch distributed begin")),
    ("loading weights", re.compile(r"Load weight begin")),
    ("weights loaded", re.compile(r"Load weight end")),
    ("allocating KV cache", re.compile(r"KV Cache is allocated")),
    ("memory pool ready", re.compile(r"Memory pool end")),
    ("capturing CUDA graphs", re.compile(r"Capture (?:[\w-]+ ){0,3}(?i:cuda|cpu|npu|xpu) graph begin")),
    ("CUDA graphs captured", re.compile(r"Capture (?:[\w-]+ ){0,3}(?i:cuda|cpu|npu|xpu) graph end")),
    ("HTTP server up", re.compile(r"Uvicorn running on")),
    ("warming up", re.compile(r"\"POST /generate HTTP")),
)


def new_state() -> Dict[str, Any]:
    return {"stage": "starting", "shards": None, "graphs": None, "graph_bs": None, "graph_kind": None}


def _count(current: Optional[Sequence[int]], done: int, total: int) -> Sequence[int]:
    """Counts only grow within one bar; another total, or a fresh bar after a finished one (a
    draft model's weights), starts over."""
    if current is None or current[1] != total or done >= current[0]:
        return [done, total]
    if done == 0 and current[0] >= current[1]:
        return [done, total]
    return list(current)


class ProgressTracker:
    """Fed every line of the launch once (and the unterminated redraw when asked)."""

    def __init__(self, state: Optional[Dict[str, Any]] = None) -> None:
        self.state = dict(new_state(), **(state or {}))

    def _advance(self, stage: str) -> None:
        now = _ORDER[self.state["stage"]]
        nxt = _ORDER[stage]
        recapture = stage == "capturing CUDA graphs" and self.state["stage"] == "CUDA graphs captured"
        if nxt > now or recapture:
            self.state["stage"] = stage
            if recapture:
                self.state["graphs"] = None

    def _bars(self, line: str) -> bool:
        m = WEIGHT_BAR.search(line)
        if m:
            self.state["shards"] = _count(self.state["shards"], int(m.group(2)), int(m.group(3)))
            self._advance("loading weights")
            return True
        m = GRAPH_BAR.search(line)
        if m:
            self.state["graphs"] = _count(self.state["graphs"], int(m.group(4)), int(m.group(5)))
            self.state["graph_bs"] = int(m.group(2))
            self.state["graph_kind"] = m.group(1)
            self._advance("capturing CUDA graphs")
            return True
        return False

    def feed(self, lines: Sequence[str]) -> None:
        for line in lines:
            if self._bars(line):
                continue
            for stage, rx in _EVENTS:
                if rx.search(line):
                    self._advance(stage)

    def peek(self, text: str) -> None:
        """The redraw tqdm shows now (no `\\r` after it yet): its counts, nothing else."""
        if text:
            self._bars(text)

    def mark_ready(self) -> None:
        self._advance("ready")


# --- words for an operator ---------------------------------------------------------------------

def duration(seconds: Optional[float]) -> str:
    """`45s`, `2m05s`, `1h02m`."""
    if seconds is None:
        return "?"
    total = int(round(max(0.0, float(seconds))))
    if total < 60:
        return "%ds" % total
    if total < 3600:
        return "%dm%02ds" % (total // 60, total % 60)
    return "%dh%02dm" % (total // 3600, (total % 3600) // 60)


def stage_text(state: Dict[str, Any]) -> str:
    """`loading weights 31/64 shards`, `capturing CUDA graphs 12/35`, `memory pool ready`."""
    stage = state.get("stage") or "starting"
    if stage == "loading weights" and state.get("shards"):
        done, total = state["shards"]
        return "loading weights %d/%d shards" % (done, total)
    if stage == "capturing CUDA graphs" and state.get("graphs"):
        done, total = state["graphs"]
        what = "CUDA graphs" if state.get("graph_kind") != "prefill shape" else "prefill CUDA graphs"
        return "capturing %s %d/%d" % (what, done, total)
    return stage


def progress_line(state: Dict[str, Any], since_launch: Optional[float],
                  last_start_seconds: Optional[float]) -> str:
    """One line between slices: the stage, the time since the launch and, when a successful
    start was remembered, how much of that start's time has gone by."""
    when = duration(since_launch)
    if last_start_seconds and since_launch is not None:
        when += ", %d%% of the last start's time" % int(round(100.0 * since_launch / last_start_seconds))
    return "%s (%s)" % (stage_text(state), when)


def ready_line(start_seconds: Optional[float], last_start_seconds: Optional[float],
               slow: bool, already_running: bool) -> str:
    """The last line: `ready in 4m12s` (with the last start's time, and a slow start said)."""
    if already_running:
        return "ready (it was already running)"
    text = "ready in %s" % duration(start_seconds)
    if last_start_seconds:
        ratio = (start_seconds or 0.0) / last_start_seconds
        text += " (last start: %s%s)" % (duration(last_start_seconds),
                                         "; slow start, %.1fx as long" % ratio if slow else "")
    return text
