"""A cold start is named (issue 34): sglang_ready compares the compiling phase (CUDA graph
capture) of a start with the last warm start of the instance, against the emulator in 0.5.23's
wording (`Capture target decode CUDA graph begin/end`). The emulator's capture takes
SGLANG_EMULATOR_GRAPH_BS_SECONDS per batch size: a slow one stands in for a cold compile."""
from __future__ import annotations

import os

from helpers import ready_launch

BASE = {"SGLANG_EMULATOR_LOG_VERSION": "0.5.23", "SGLANG_EMULATOR_SHARDS": "1"}
ARGS = ["--cuda-graph-max-bs-decode", "4"]   # 3 batch sizes: 1, 2, 4


def test_a_cold_capture_is_named_against_the_last_warm_start(spawn, emulator_python, state_dir, log_dir):
    log = os.path.join(log_dir, "cold.log")
    proc, _rec = ready_launch.launch(spawn, emulator_python, state_dir, log, name="cold", args=ARGS,
                                     env=dict(BASE, SGLANG_EMULATOR_GRAPH_BS_SECONDS="0.05"))
    warm = ready_launch.ready(state_dir, name="cold", timeout=60)
    assert warm["ready"], warm.get("msg")
    assert "cuda graph begin" in [t["phase"] for t in warm["timeline"]]
    assert warm["cold_start"] is False and warm["cold_phases"] == []  # nothing to compare with yet
    proc.kill()
    proc.wait()
    ready_launch.launch(spawn, emulator_python, state_dir, log, name="cold", args=ARGS,
                        env=dict(BASE, SGLANG_EMULATOR_GRAPH_BS_SECONDS="2.5"))
    cold = ready_launch.ready(state_dir, name="cold", timeout=90)
    assert cold["ready"], cold.get("msg")
    assert cold["cold_start"] is True
    [phase] = cold["cold_phases"]
    assert phase["phase"] == "cuda graph capture" and phase["seconds"] >= 7.0
    assert phase["warm_launch_id"] == warm["launch_id"] and phase["warm_seconds"] < phase["seconds"] / 3
    # ansible-core 2.19 returns warnings as WarningSummary dicts ({"event": {"msg": ...}}), older ones as text
    warnings = [w if isinstance(w, str) else (w.get("event") or w).get("msg", "") for w in cold.get("warnings", [])]
    assert any(w.startswith("cold start") and "cuda graph capture took" in w for w in warnings), warnings
    # a re-check of the same launch is no start: nothing is named again
    again = ready_launch.ready(state_dir, name="cold", timeout=30)
    assert again["already_running"] and again["cold_start"] is False
