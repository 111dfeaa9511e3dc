"""Startup progress parsed from real SGLang log text (tqdm redraws as tqdm 4.67 writes them with
sglang's own bar formats, and the phase lines of the 0.5.6 and 0.5.23 sources)."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _progress
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._logfollow import LogFollower

# Bytes as tqdm wrote them for sglang's `Loading safetensors checkpoint shards` bar (BAR_FORMAT
# of srt/utils/common.py): a `\r` before each redraw, one `\n` when the bar closes.
SHARD_BYTES = (
    b"\rLoading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]"
    b"\rLoading safetensors checkpoint shards:   2% Completed | 1/64 [00:00<00:00, 634.35it/s]"
    b"\rLoading safetensors checkpoint shards:  45% Completed | 29/64 [00:00<00:00, 630.38it/s]"
    b"\rLoading safetensors checkpoint shards:  47% Completed | 30/64 [00:00<00:00, 680.50it/s]"
    b"\rLoading safetensors checkpoint shards:  48% Completed | 31/64 [00:00<00:00, 628.65it/s]"
)
SHARD_END_BYTES = (
    b"\rLoading safetensors checkpoint shards:  98% Completed | 63/64 [00:00<00:00, 662.33it/s]"
    b"\rLoading safetensors checkpoint shards: 100% Completed | 64/64 [00:00<00:00, 580.19it/s]"
    b"\rLoading safetensors checkpoint shards: 100% Completed | 64/64 [00:00<00:00, 545.57it/s]\n"
)
# The decode CUDA graph bar (decode_cuda_graph_runner.py): tqdm's default format, the
# description set per batch size, so each step is drawn twice (new bs, then the new count).
CAPTURE_BYTES = (
    b"\r  0%|          | 0/35 [00:00<?, ?it/s]"
    b"\rCapturing batches (bs=256 avail_mem=17.59 GB):   0%|          | 0/35 [00:00<?, ?it/s]"
    b"\rCapturing batches (bs=256 avail_mem=17.59 GB):   3%|\xe2\x96\x8e         | 1/35 [00:00<00:00, 295.39it/s]"
    b"\rCapturing batches (bs=248 avail_mem=17.67 GB):   3%|\xe2\x96\x8e         | 1/35 [00:00<00:00, 295.39it/s]"
    b"\rCapturing batches (bs=248 avail_mem=17.67 GB):   6%|\xe2\x96\x8c         | 2/35 [00:00<00:00, 451.11it/s]"
    b"\rCapturing batches (bs=240 avail_mem=17.75 GB):   6%|\xe2\x96\x8c         | 2/35 [00:00<00:00, 451.11it/s]"
    b"\rCapturing batches (bs=240 avail_mem=17.75 GB):   9%|\xe2\x96\x8a         | 3/35 [00:00<00:00, 552.43it/s]"
    b"\rCapturing batches (bs=232 avail_mem=17.83 GB):   9%|\xe2\x96\x8a         | 3/35 [00:00<00:00, 552.43it/s]"
    b"\rCapturing batches (bs=232 avail_mem=17.83 GB):  11%|\xe2\x96\x88\xe2\x96\x8f        | 4/35 [00:00<00:00, 208.90it/s]"
)
# Phase lines with sglang's `[time TPn]` prefix: 0.5.23 wording (model_runner.py,
# kv_cache_configurator.py, cuda_graph_setup.py) and 0.5.6's capture lines.
LOAD_BEGIN = "[2026-01-10 10:00:04 TP0] Load weight begin. avail mem=78.50 GB"
LOAD_END = ("[2026-01-10 10:02:09 TP0] Load weight end. elapsed=125.03 s, type=DeepseekV3ForCausalLM, "
            "dtype=torch.bfloat16, avail mem=14.12 GB, mem usage=64.38 GB.")
KV = "[2026-01-10 10:02:10 TP0] KV Cache is allocated. #tokens: 1048576, KV size: 40.00 GB"
POOL = "[2026-01-10 10:02:10 TP0] Memory pool end. avail mem=12.05 GB"
GRAPH_BEGIN_0523 = ("[2026-01-10 10:02:11 TP0] Capture target decode CUDA graph begin. backend=full, "
                    "num_tokens_per_req=1, avail mem=12.05 GB")
GRAPH_END_0523 = ("[2026-01-10 10:02:52 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], "
                  "elapsed=41.52 s, mem usage=1.02 GB, avail mem=11.03 GB.")
GRAPH_BEGIN_056 = ("[2026-01-10 10:02:11 TP0] Capture cuda graph begin. This can take up to several "
                   "minutes. avail mem=12.05 GB")
GRAPH_END_056 = ("[2026-01-10 10:02:52 TP0] Capture cuda graph end. Time elapsed: 41.52 s. mem usage=1.02 GB. "
                 "avail mem=11.03 GB.")
UVICORN = "[2026-01-10 10:02:53] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"
WARMUP = '[2026-01-10 10:02:54] INFO:     127.0.0.1:50412 - "POST /generate HTTP/1.1" 200 OK'


def _lines(data: bytes):
    return [seg.decode("utf-8") for seg in data.replace(b"\n", b"\r").split(b"\r") if seg]


def test_shard_bar_counts_rise_with_each_redraw():
    tracker = _progress.ProgressTracker()
    tracker.feed([LOAD_BEGIN])
    assert _progress.stage_text(tracker.state) == "loading weights"
    seen = []
    for line in _lines(SHARD_BYTES):
        tracker.feed([line])
        seen.append(tuple(tracker.state["shards"]))
    assert seen == [(0, 64), (1, 64), (29, 64), (30, 64), (31, 64)]
    assert _progress.stage_text(tracker.state) == "loading weights 31/64 shards"
    tracker.feed(_lines(SHARD_END_BYTES) + [LOAD_END])
    assert tracker.state["shards"] == [64, 64] and tracker.state["stage"] == "weights loaded"


def test_capture_bar_counts_and_batch_size():
    tracker = _progress.ProgressTracker()
    tracker.feed([LOAD_BEGIN, LOAD_END, KV, POOL])
    assert _progress.stage_text(tracker.state) == "memory pool ready"
    tracker.feed([GRAPH_BEGIN_0523])
    assert _progress.stage_text(tracker.state) == "capturing CUDA graphs"
    tracker.feed(_lines(CAPTURE_BYTES))
    assert tracker.state["graphs"] == [4, 35] and tracker.state["graph_bs"] == 232
    assert _progress.stage_text(tracker.state) == "capturing CUDA graphs 4/35"
    tracker.feed([GRAPH_END_0523])
    assert tracker.state["stage"] == "CUDA graphs captured"


@pytest.mark.parametrize("begin,end", [(GRAPH_BEGIN_056, GRAPH_END_056), (GRAPH_BEGIN_0523, GRAPH_END_0523)])
def test_graph_phase_lines_of_both_versions(begin, end):
    tracker = _progress.ProgressTracker()
    tracker.feed([POOL, begin])
    assert tracker.state["stage"] == "capturing CUDA graphs"
    tracker.feed([end])
    assert tracker.state["stage"] == "CUDA graphs captured"


def test_a_failed_capture_is_not_a_phase():
    tracker = _progress.ProgressTracker()
    tracker.feed([POOL, "[2026-01-10 10:02:11 TP0] Capture cuda graph failed: CUDA out of memory"])
    assert tracker.state["stage"] == "memory pool ready"


def test_a_second_capture_after_the_first_goes_back_to_capturing():
    tracker = _progress.ProgressTracker()
    prefill_begin = GRAPH_BEGIN_0523.replace("target decode", "target prefill")
    prefill_end = GRAPH_END_0523.replace("target decode", "target prefill")
    tracker.feed([POOL, prefill_begin, prefill_end, GRAPH_BEGIN_0523])
    assert tracker.state["stage"] == "capturing CUDA graphs" and tracker.state["graphs"] is None


def test_stage_never_goes_back_for_a_late_rank():
    tracker = _progress.ProgressTracker()
    tracker.feed([LOAD_BEGIN, LOAD_END, POOL, LOAD_BEGIN.replace("TP0", "TP5")])
    assert tracker.state["stage"] == "memory pool ready"


def test_http_warmup_ready():
    tracker = _progress.ProgressTracker()
    tracker.feed([POOL, UVICORN])
    assert tracker.state["stage"] == "HTTP server up"
    tracker.feed([WARMUP])
    assert tracker.state["stage"] == "warming up"
    tracker.mark_ready()
    assert tracker.state["stage"] == "ready"


def test_other_loader_bars():
    tracker = _progress.ProgressTracker()
    tracker.feed(["Multi-thread loading shards:  25% Completed | 16/64 [00:03<00:09,  5.01it/s]"])
    assert tracker.state["shards"] == [16, 64]
    tracker = _progress.ProgressTracker()
    tracker.feed(["Loading safetensors using Fastsafetensor loader:  50%|#####     | 4/8 [00:10<00:10,  2.5s/it]"])
    assert tracker.state["shards"] == [4, 8]


def test_a_fresh_bar_after_a_finished_one_starts_over():
    tracker = _progress.ProgressTracker()
    tracker.feed(_lines(SHARD_END_BYTES))
    tracker.feed(["Loading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]"])
    assert tracker.state["shards"] == [0, 64]


def test_peek_reads_the_redraw_being_shown(tmp_path):
    """tqdm's current redraw has no line end yet: the follower keeps it pending, peek counts it."""
    path = str(tmp_path / "log")
    with open(path, "wb") as fh:
        fh.write((LOAD_BEGIN + "\n").encode() + SHARD_BYTES)
    follower = LogFollower(path)
    tracker = _progress.ProgressTracker()
    tracker.feed(follower.poll())
    assert tracker.state["shards"] == [30, 64]  # 31/64 has no \r after it yet
    tracker.peek(follower.pending_text())
    assert tracker.state["shards"] == [31, 64]
    follower.close()


def test_state_round_trips():
    tracker = _progress.ProgressTracker()
    tracker.feed([LOAD_BEGIN] + _lines(SHARD_BYTES))
    again = _progress.ProgressTracker(dict(tracker.state))
    again.feed(_lines(SHARD_END_BYTES))
    assert again.state["shards"] == [64, 64]


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (45.4, "45s"), (125, "2m05s"), (3725, "1h02m"), (None, "?")])
def test_duration(seconds, text):
    assert _progress.duration(seconds) == text


def test_progress_line_against_the_last_start():
    state = dict(_progress.new_state(), stage="loading weights", shards=[31, 64])
    assert _progress.progress_line(state, 125, 260) == "loading weights 31/64 shards (2m05s, 48% of the last start's time)"
    assert _progress.progress_line(state, 125, None) == "loading weights 31/64 shards (2m05s)"
    graphs = dict(_progress.new_state(), stage="capturing CUDA graphs", graphs=[12, 35])
    assert _progress.progress_line(graphs, 200, None).startswith("capturing CUDA graphs 12/35")


def test_ready_line():
    assert _progress.ready_line(252, None, False, False) == "ready in 4m12s"
    assert _progress.ready_line(252, 240, False, False) == "ready in 4m12s (last start: 4m00s)"
    assert "slow start, 2.1x" in _progress.ready_line(252, 120, True, False)
    assert _progress.ready_line(None, None, False, True) == "ready (it was already running)"
