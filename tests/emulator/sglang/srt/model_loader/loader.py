"""The weight-loading phase of one rank: the shards, the tqdm bar SGLang prints on rank 0, and
either a timed simulation or a real read of the files (SGLANG_EMULATOR_LOAD_WEIGHTS=1).

Every rank walks every file, as DefaultModelLoader does (each rank takes its slice of each
tensor); only TP rank 0 draws the bar. Bar descriptions are the real ones: the single-threaded
safetensors iterator (0.5.6's default) or, with `enable_multithread_load` in
--model-loader-extra-config (0.5.23's default), "Multi-thread loading shards".
"""

import collections
import concurrent.futures
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional

from sglang.srt.emulator_control import default_shards, load_weights_enabled, log_version, phase_time
from sglang.srt.model_loader.weight_utils import (
    BAR_FORMAT, FileLoad, WeightFiles, find_weight_files, load_to_device, read_into_memory,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.progress_bar import tqdm

logger = logging.getLogger(__name__)

DEFAULT_NUM_THREADS = 8  # DefaultModelLoader.DEFAULT_NUM_THREADS


@dataclass
class LoadResult:
    """What the load did; `mode` is simulated, host (plain reads) or cuda."""

    mode: str
    files: int
    bytes_read: int = 0
    tensors: int = 0
    device_bytes: int = 0
    seconds: float = 0.0
    held: List[Any] = field(default_factory=list)


def architecture(model_path: str) -> str:
    """The model class `Load weight end` names: config.json's architectures[0] when readable."""
    try:
        with open(os.path.join(model_path, "config.json")) as fh:
            names = json.load(fh).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        names = []
    return names[0] if names and isinstance(names[0], str) else "LlamaForCausalLM"


def _extra_config(server_args: ServerArgs) -> dict:
    raw = server_args.model_loader_extra_config or "{}"
    config = json.loads(raw)
    if not isinstance(config, dict):
        raise ValueError(f"--model-loader-extra-config must be a JSON object, got {raw!r}")
    return config


def _description(use_safetensors: bool, multithread: bool) -> str:
    if use_safetensors:
        return "Multi-thread loading shards" if multithread else "Loading safetensors checkpoint shards"
    return "Multi-thread loading pt checkpoint shards" if multithread else "Loading pt checkpoint shards"


def _checkpoint(server_args: ServerArgs) -> WeightFiles:
    """The files a load walks: from the model directory, else SGLANG_EMULATOR_SHARDS names."""
    folder = server_args.model_path
    files = find_weight_files(folder) if os.path.isdir(folder) else WeightFiles(names=[])
    if files.names:
        return files
    count = default_shards()
    return WeightFiles(names=[f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)])


def _reader(device: Optional[int], safetensors: bool, tp_rank: int,
            tp_size: int) -> Callable[[str], FileLoad]:
    if device is not None and safetensors:
        return lambda path: load_to_device(path, device, tp_rank, tp_size)
    return lambda path: read_into_memory(path, safetensors)


def _in_order(paths: List[str], read: Callable[[str], FileLoad], threads: int) -> Iterator[FileLoad]:
    """Files in order; with threads > 1 a sliding window of reads ahead (0.5.23's buffered
    multi-thread iterator: `threads` loading + 1 ready)."""
    if threads <= 1:
        for path in paths:
            yield read(path)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        pending: collections.deque = collections.deque()
        upcoming = iter(paths)
        for path in upcoming:
            pending.append(pool.submit(read, path))
            if len(pending) > threads:
                break
        while pending:
            done = pending.popleft().result()
            nxt = next(upcoming, None)
            if nxt is not None:
                pending.append(pool.submit(read, nxt))
            yield done


def _gpu_reader_available(device: Optional[int]) -> bool:
    if device is None:
        return False
    try:
        import safetensors  # noqa: F401  (GPU hosts have it; the CPU emulator does not need it)
    except ImportError:
        logger.warning("safetensors is not installed: reading the weight files into host memory.")
        return False
    return True


def load_weights(server_args: ServerArgs, tp_rank: int, device: Optional[int]) -> LoadResult:
    """Walk the shards under the bar. `device`: the GPU this rank holds in GPU mode, else None."""
    extra = _extra_config(server_args)
    multithread = bool(extra.get("enable_multithread_load", log_version() == "0.5.23"))
    files = _checkpoint(server_args)
    real = load_weights_enabled() and os.path.isdir(server_args.model_path)
    if load_weights_enabled() and not real:
        logger.warning("SGLANG_EMULATOR_LOAD_WEIGHTS is set but --model-path %s is not a local "
                       "directory: the load is simulated.", server_args.model_path)
    if real and not files.on_disk:
        raise RuntimeError(f"Cannot find any model weights with `{server_args.model_path}`")
    paths = files.on_disk if real else files.names
    progress = tqdm(desc=_description(files.use_safetensors, multithread), total=len(paths),
                    disable=tp_rank != 0, bar_format=BAR_FORMAT, position=0)
    start = time.monotonic()
    on_gpu = real and _gpu_reader_available(device)
    result = LoadResult(mode=("cuda" if on_gpu else "host") if real else "simulated", files=len(paths))
    if real:
        read = _reader(device if on_gpu else None, files.use_safetensors, tp_rank, server_args.tp_size)
        threads = int(extra.get("num_threads", DEFAULT_NUM_THREADS)) if multithread else 1
        for done in _in_order(paths, read, threads):
            result.bytes_read += done.bytes_read
            result.tensors += done.tensors
            result.device_bytes += done.device_bytes
            result.held.extend(done.held)
            progress.update(1)
    else:
        for _path in paths:
            time.sleep(phase_time("SHARD", 1.0 / max(1, len(paths))))
            progress.update(1)
    progress.close()
    result.seconds = time.monotonic() - start
    logger.debug(
        "Emulator weight load: mode=%s, files=%d, bytes_read=%d, tensors=%d, device_bytes=%d, "
        "elapsed=%.3f s", result.mode, result.files, result.bytes_read, result.tensors,
        result.device_bytes, result.seconds,
    )
    return result
