"""A phase logged on the tail of a tqdm bar line keeps its own timestamp, not the time it was read."""
from __future__ import annotations

import time

from ansible_collections.llmops.sglang.plugins.module_utils._sglang._loganalysis import LogAnalyzer


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) + ".%03d" % int(round((epoch % 1) * 1000))


def test_a_phase_appended_to_a_progress_bar_line_keeps_its_own_stamp() -> None:
    launched = float(int(time.time()) - 60)
    an = LogAnalyzer([], [], None, launched)
    late = launched + 9.0  # the reader saw every line 9 s after it was written (a loaded host)
    lines = [
        "[%s TP0] Load weight begin. avail mem=76.00 GB" % _stamp(launched + 1.5),
        "Loading safetensors checkpoint shards: 100%% Completed | 4/4 [00:01<00:00]"
        "[%s TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16" % _stamp(launched + 3.0),
        "[%s TP0] KV Cache is allocated. #tokens: 100000" % _stamp(launched + 3.5),
    ]
    an.feed(lines, late)
    got = {e["phase"]: e["seconds"] for e in an.timeline}
    assert got["weight load begin"] == 1.5
    assert got["weight load end"] == 3.0, got
    assert got["weight load end"] <= got["kv cache"], got
