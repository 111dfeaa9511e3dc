"""CUDA graph capture of one rank: the batch sizes SGLang would capture for the emulated GPU and
the tqdm bar TP rank 0 prints while capturing them (largest first, one redraw per batch size)."""

import time
from typing import Any, List, Optional

from sglang.srt.emulator_control import phase_time
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.progress_bar import tqdm


def default_max_bs(gpu_mem_mib: Optional[float], tp_size: int) -> int:
    """ServerArgs._handle_gpu_memory_settings (0.5.6; 0.5.23's memory_hook is the same), CUDA."""
    if gpu_mem_mib is None:
        return 160
    small = tp_size < 4
    if gpu_mem_mib < 20 * 1024:
        return 8
    if gpu_mem_mib < 35 * 1024:
        return 24 if small else 80
    if gpu_mem_mib < 60 * 1024:
        return 32 if small else 160
    if gpu_mem_mib < 160 * 1024:
        return 256 if small else 512
    return 512


def generate_batch_sizes(max_bs: int, disable_padding: bool) -> List[int]:
    """_generate_cuda_graph_batch_sizes without speculative decoding."""
    if disable_padding:
        capture_bs = list(range(1, max_bs + 1))
    else:
        capture_bs = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
                      + list(range(512, max_bs + 1, 32)))
    capture_bs = [bs for bs in capture_bs if bs <= max_bs]
    if max_bs not in capture_bs:  # 0.5.23 appends the maximum
        capture_bs.append(max_bs)
    return capture_bs


def batch_sizes_to_capture(server_args: ServerArgs, gpu_mem_mib: Optional[float],
                           max_num_reqs: int) -> List[int]:
    """get_batch_sizes_to_capture: explicit list or the default one, capped by the request pool."""
    if server_args.cuda_graph_bs_decode:
        capture_bs = list(server_args.cuda_graph_bs_decode)
    else:
        max_bs = server_args.cuda_graph_max_bs_decode or default_max_bs(gpu_mem_mib, server_args.tp_size)
        capture_bs = generate_batch_sizes(max_bs, server_args.disable_cuda_graph_padding)
    if max(capture_bs) > max_num_reqs:
        capture_bs.append(max_num_reqs)
    return sorted({bs for bs in capture_bs if 0 < bs <= max_num_reqs})


def capture(capture_bs: List[int], show_bar: bool, avail_mem: float, mem_usage: float,
            compiled: Optional[Any] = None) -> float:
    """Walk the batch sizes in reverse (as CudaGraphRunner.capture) under SGLang's bar; returns
    the free memory left. Each size takes SGLANG_EMULATOR_GRAPH_BS_SECONDS (default: its share
    of the phase time) and a share of `mem_usage`; with `--enable-torch-compile` (`compiled`,
    torch_compile.Compiled) each size up to --torch-compile-max-bs is compiled first, for real."""
    step = mem_usage / max(1, len(capture_bs))
    sizes = list(reversed(capture_bs))
    capture_range = tqdm(sizes) if show_bar else sizes
    for bs in capture_range:
        if show_bar:
            capture_range.set_description(f"Capturing batches ({bs=} {avail_mem=:.2f} GB)")
        if compiled is not None:
            compiled.run(bs)
        time.sleep(phase_time("GRAPH_BS", 1.0 / max(1, len(sizes))))
        avail_mem -= step
    return avail_mem
