"""What SGLang's startup log says, as regular expressions.

0.5.6 wording is the anchor; later versions reword some lines, so every pattern matches a
short, stable fragment rather than a whole line. Operators can override or extend the ready and
fatal lists (module options); the phase list is informational and never decides readiness.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, List, Mapping, Optional, Pattern, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

# The one INFO line that says warmup succeeded (node_rank 0 only).
READY_PATTERNS: Tuple[str, ...] = (
    r"The server is fired up and ready to roll!",
)

# Nodes with node_rank >= 1 have no HTTP server and never print the ready line.
DUMMY_HEALTH_PATTERNS: Tuple[str, ...] = (
    r"Dummy health check server started",
)

# Each of these means the launch is dead or dying: fail at once with the decisive lines.
FATAL_PATTERNS: Tuple[str, ...] = (
    r"No module named",
    r"ModuleNotFoundError",
    r"Not enough memory",
    r"CUDA out of memory",
    r"CUDA error: out of memory",
    r"torch\.OutOfMemoryError",
    r"Capture cuda graph failed",
    r"memory capacity is unbalanced",
    r"Scheduler hit an exception",
    r"scheduler is dead",
    r"died during initialization",
    r"Initialization failed",
    r"Received sigquit from a child process",
    r"error while attempting to bind on address",
)

# Warnings of healthy servers that contain a fatal pattern's words: an optional dependency is
# missing and skipped (read from the 0.5.23 source; the file that logs each is named). A line
# matching one of these - and its continuation lines without a timestamp - never decides and is
# never named as the cause of a failure.
BENIGN_PATTERNS: Tuple[str, ...] = (
    # srt/models/registry.py, srt/managers/multimodal_processor.py, srt/dllm/algorithm/__init__.py
    r"Ignore import error when loading ",
    # srt/utils/common.py (the error text follows on the next line)
    r"Ignore .* reports ImportError with:",
    # srt/distributed/device_communicators/custom_all_reduce_ops.py, custom_all_reduce_utils.py
    r"Failed to import (?:from custom_ar|pynvml|pymtml|amdsmi) with ",
    # srt/distributed/device_communicators/custom_all_reduce.py
    r"Aiter custom all-reduce not available; falling back",
    # srt/distributed/device_communicators/pymscclpp.py
    r"PyMscclpp is unavailable because its dependencies failed to import",
    # srt/disaggregation/mooncake/utils.py
    r"Failed to import mooncake allocator for .*Falling back to default memory pool",
    # srt/hardware_backend/npu/utils.py
    r"NPU custom kernel packages unavailable: ",
    # srt/multimodal/processors/mimo_audio.py, deepseek_v41.py
    r"torchcodec is unavailable; ",
    r"V4\.1 Rust image processor unavailable; using PIL",
    # srt/layers/flashinfer_comm_fusion.py, attention/linear/kernels/{gdn,kda}_flashinfer.py
    r"flashinfer\.comm allreduce_fusion API is not available",
    r"FlashInfer (?:GDN|KDA) kernels? not available: ",
    # srt/layers/attention/aiter_mla_gluon.py, srt/layers/quantization/fp8_hip.py
    r"aiter mla gluon import error message: ",
    r"FlyDSL unavailable: ",
    # srt/mem_cache/pool_host/common.py
    r"UMBPHostTensorAllocator unavailable \(",
    # srt/utils/hf_transformers/tokenizer.py
    r"Direct load as \S+ failed for .*Falling back to AutoTokenizer",
    # srt/layers/attention/dsa_backend.py (print)
    r"Multi-backend fused metadata copy kernel (?:failed with error|not available).*falling back to loop",
)

# uvicorn's bind failure: the port belongs to someone else (the stale-server incident).
BIND_ERROR = re.compile(r"error while attempting to bind on address\s*\(?'?\[?([^'\]\s,]*)\]?'?,\s*(\d+)")
BIND_ERROR_ANY = re.compile(r"error while attempting to bind on address")
# `Uvicorn running on http://HOST:PORT (Press CTRL+C to quit)`; HOST may be [v6].
UVICORN_RUNNING = re.compile(r"Uvicorn running on (?:https?://)?(\[[^\]]*\]|[^\s:/]+):(\d+)")

TRACEBACK_START = re.compile(r"Traceback \(most recent call last\)")
# The closing line of a traceback: `ValueError: ...`, `sglang.X.Error: ...`, `KeyboardInterrupt`.
EXCEPTION_LINE = re.compile(
    r"^(?:\[[^\]]*\]\s*)?[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b(?::|$)")

# `[2025-01-02 03:04:05 TP0]` or with SGLANG_LOG_MS=1 `[2025-01-02 03:04:05.123 TP0]`.
TIMESTAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(\.\d{1,6})?[\] ]")

TIMESTAMP_PREFIX = re.compile(r"^\[\d{4}-\d{2}-\d{2} [^\]]*\]\s*")

# Startup phases in the order a healthy server reaches them: (phase name, pattern).
PHASES: Tuple[Tuple[str, str], ...] = (
    ("init distributed", r"Init torch distributed begin"),
    ("weight load begin", r"Load weight begin|Loading safetensors checkpoint shards"),
    ("weight load end", r"Load weight end"),
    ("kv cache", r"KV Cache is allocated"),
    ("memory pool", r"Memory pool end"),
    # 0.5.6 cuda_graph_runner.py `Capture cuda graph begin.`; 0.5.23
    # model_runner_components/cuda_graph_setup.py f"Capture {capture_name} CUDA graph begin. "
    # (`Capture target decode CUDA graph begin.`), and the same for `end`
    ("cuda graph begin", r"Capture (?:cuda graph|[\w ]+ CUDA graph) begin"),
    ("cuda graph end", r"Capture (?:cuda graph|[\w ]+ CUDA graph) end"),
    ("http up", r"Uvicorn running on"),
    ("warmup", r"\"POST /generate HTTP|[Ww]armup (?:begin|start)"),
)
# The last phases come from the (overridable) ready patterns, not from PHASES.
READY_PHASE = "ready"
NODE_READY_PHASE = "dummy health server"
PHASE_NAMES: Tuple[str, ...] = tuple(phase[0] for phase in PHASES) + (READY_PHASE, NODE_READY_PHASE)

# What the operator is told a server at each phase is doing (timeout messages).
PHASE_MEANING = {
    None: "no startup line of this launch yet (interpreter/import stage)",
    "init distributed": "initialising torch.distributed / NCCL",
    "weight load begin": "loading the model weights (weight load)",
    "weight load end": "weights loaded, allocating the KV cache",
    "kv cache": "KV cache allocated, building the memory pool",
    "memory pool": "memory pool built, about to capture CUDA graphs or start HTTP",
    "cuda graph begin": "capturing CUDA graphs",
    "cuda graph end": "CUDA graphs captured, starting the HTTP server",
    "http up": "HTTP server listening, waiting for warmup",
    "warmup": "warmup request sent, waiting for the ready line",
    "ready": "ready line printed",
    NODE_READY_PHASE: "dummy health server started (node_rank >= 1)",
}

# The one list of log levels that hide INFO lines (the ready line and uvicorn's `Uvicorn running
# on`): Python logging's names above INFO and their aliases (warn, fatal); uvicorn's are a subset.
QUIET_LEVELS = ("warning", "warn", "error", "critical", "fatal")
LOG_LEVEL_FLAGS = ("--log-level", "--log-level-http")


def compile_patterns(patterns: Iterable[str], what: str) -> List[Pattern[str]]:
    """Regexes from operator input; a bad one is a precise error, not a traceback."""
    out: List[Pattern[str]] = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise SglangError("%s contains an empty or non-string pattern: %r" % (what, pattern),
                              reason="invalid_argument")
        try:
            out.append(re.compile(pattern))
        except re.error as exc:
            raise SglangError("%s pattern %r is not a valid regular expression: %s"
                              % (what, pattern, exc), reason="invalid_argument")
    return out


def first_match(line: str, patterns: Sequence[Pattern[str]]) -> Optional[str]:
    for pattern in patterns:
        if pattern.search(line):
            return pattern.pattern
    return None


def is_quiet_level(level: object) -> bool:
    """Is the log level too quiet to show INFO lines (the ready line)? Case and spaces ignored."""
    return isinstance(level, str) and level.strip().lower() in QUIET_LEVELS


def quiet_flag(args: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """(flag, level) of the first log-level flag of a launch's args mapping (`--log-level`:
    value, as the launch module takes them) that hides INFO lines, else None."""
    for flag in LOG_LEVEL_FLAGS:
        value = args.get(flag)
        if is_quiet_level(value):
            return flag, str(value)
    return None


def _flag_value(argv: Sequence[str], flag: str) -> Optional[str]:
    """Last value of `--flag V` or `--flag=V` (argparse: the last one wins)."""
    value: Optional[str] = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def quiet_log_levels(argv: Sequence[str]) -> Tuple[Optional[str], Optional[str]]:
    """(server level, http level) when they hide INFO lines, else None for each.

    sglang passes `--log-level-http` (default: `--log-level`) to uvicorn, so a quiet server
    level also hides `Uvicorn running on` unless the HTTP level is set back to info."""
    level = (_flag_value(argv, "--log-level") or "info").strip().lower()
    http = (_flag_value(argv, "--log-level-http") or level).strip().lower()
    return (level if is_quiet_level(level) else None, http if is_quiet_level(http) else None)


def log_level_argv(argv: Sequence[str]) -> List[str]:
    """Only the log-level flags of an argv (all `quiet_log_levels` reads): what a sliced wait
    carries from slice to slice instead of an argv with secrets in it."""
    out: List[str] = []
    for i, arg in enumerate(argv):
        if arg in LOG_LEVEL_FLAGS and i + 1 < len(argv):
            out += [arg, argv[i + 1]]
        elif arg.startswith(tuple(flag + "=" for flag in LOG_LEVEL_FLAGS)):
            out.append(arg)
    return out
