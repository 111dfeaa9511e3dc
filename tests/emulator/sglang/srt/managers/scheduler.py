"""Scheduler process (one per TP rank): title, PDEATHSIG, the startup log of one rank, faults."""

import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from sglang.srt.emulator_control import (
    benign_warnings, gpu_mib, has_fault, leak_shm_files, log_version, phase_sleep_for,
)
from sglang.srt.model_executor.cuda_graph_runner import batch_sizes_to_capture, capture
from sglang.srt.model_executor import torch_compile
from sglang.srt.model_loader.loader import architecture, load_weights
from sglang.srt.server_args import ServerArgs, configure_logger
from sglang.srt.utils import set_process_title, set_prctl_pdeathsig

logger = logging.getLogger(__name__)

# Objects that must live as long as the process (GPU memory, rendezvous sockets).
_HELD: List[Any] = []
_crash_requested = threading.Event()


@dataclass
class RankInfo:
    tp_rank: int
    local_rank: int  # index on this node, picks the GPU
    dp_rank: Optional[int]
    launcher_pid: int

    def prefix(self, server_args: ServerArgs) -> str:
        """Log prefix; the process title is `sglang::scheduler` + prefix with '_' for ' '."""
        out = f" DP{self.dp_rank}" if self.dp_rank is not None else ""
        out += f" TP{self.tp_rank}"
        if server_args.ep_size > 1 or self.dp_rank is not None:
            out += f" EP{self.tp_rank % max(1, server_args.ep_size)}" if server_args.ep_size > 1 else f" EP{self.tp_rank}"
        return out


def split_host_port(addr: str) -> Tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port)."""
    host, _sep, port = addr.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _rendezvous_listen(server_args: ServerArgs) -> None:
    """Node 0 / rank 0 plays the TCPStore: wait until every other node has connected."""
    host, port = split_host_port(server_args.dist_init_addr or "127.0.0.1:5000")
    srv = socket.socket(_family(host), socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(64)
    _HELD.append(srv)
    peers = set()
    while len(peers) < server_args.nnodes - 1:
        conn, _peer = srv.accept()
        data = conn.recv(64).decode(errors="replace").strip()
        _HELD.append(conn)
        peers.add(data or str(len(peers) + 1))


def _rendezvous_connect(server_args: ServerArgs) -> None:
    """Other nodes retry until node 0 listens (like torch.distributed's store client)."""
    host, port = split_host_port(server_args.dist_init_addr or "127.0.0.1:5000")
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5)
            conn.sendall(f"{server_args.node_rank}\n".encode())
            _HELD.append(conn)
            return
        except OSError:
            time.sleep(0.2)


def _rendezvous(server_args: ServerArgs, rank: RankInfo) -> None:
    if server_args.nnodes <= 1 or rank.local_rank != 0:
        return
    if server_args.node_rank == 0:
        _rendezvous_listen(server_args)
    else:
        _rendezvous_connect(server_args)


@dataclass
class Gpu:
    """GPU mode: the device this rank holds memory on."""

    device: int
    total_mib: float

    def free_gb(self) -> float:
        import torch

        return torch.cuda.mem_get_info(self.device)[0] / (1 << 30)


def _grab_gpu(server_args: ServerArgs, rank: RankInfo) -> Optional[Gpu]:
    """GPU mode: hold SGLANG_EMULATOR_GPU_MIB on a real device; None in CPU mode."""
    mib = gpu_mib()
    if mib <= 0:
        return None
    try:
        import torch  # only imported when GPU mode is requested (slow import)

        usable = bool(torch.cuda.is_available())
    except Exception:  # ImportError, or a broken CUDA install
        usable = False
    if not usable:
        logger.warning(
            "SGLANG_EMULATOR_GPU_MIB is set but torch with CUDA is not available; running on CPU."
        )
        return None
    device = (server_args.base_gpu_id + rank.local_rank) % torch.cuda.device_count()
    torch.cuda.set_device(device)
    block = torch.ones(mib * 1024 * 1024, dtype=torch.uint8, device=f"cuda:{device}")
    _HELD.append(block)
    return Gpu(device=device, total_mib=torch.cuda.mem_get_info(device)[1] / (1 << 20))


def _init_memory_pool(server_args: ServerArgs) -> int:
    if has_fault("oom"):
        raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
    fraction = server_args.mem_fraction_static or 0.88
    return int(500_000 * fraction)


def _optional_import_warnings() -> None:
    """What a healthy rank logs when optional packages are missing (0.5.23 wording):
    srt/distributed/device_communicators/custom_all_reduce_ops.py at import,
    srt/utils/common.py (the error on its own line) and the model registry
    (srt/models/registry.py) while it imports every model module."""
    if not benign_warnings():
        return
    logger.warning(
        "Failed to import from custom_ar with %r",
        ModuleNotFoundError("No module named 'sgl_kernel.allreduce'"),
    )
    logger.warning(
        "Ignore <module 'triton.compiler' from '/venv/triton/compiler/__init__.py'> reports "
        "ImportError with:\nNo module named 'triton.compiler.compiler'"
    )
    e = ModuleNotFoundError("No module named 'transformers.models.glm_ocr'")
    logger.warning("Ignore import error when loading sglang.srt.models.glm_ocr: %s", e)


# Emulated memory (GB) when no GPU is held: an 80 GB card, an 8B model in bf16.
_SIM_AVAIL_GB = 78.50
_SIM_WEIGHTS_GB = 14.99
_GRAPH_MEM_GB = 0.42


def _load_weights(server_args: ServerArgs, rank: RankInfo, gpu: Optional[Gpu]) -> float:
    """`Load weight begin` ... the loader's bar ... `Load weight end`; returns free GB after."""
    tic = time.perf_counter()
    result = load_weights(server_args, rank.tp_rank, gpu.device if gpu else None)
    _HELD.extend(result.held)
    if gpu is not None:
        avail = gpu.free_gb()
        usage = result.device_bytes / (1 << 30) + gpu_mib() / 1024
    else:
        avail, usage = _SIM_AVAIL_GB - _SIM_WEIGHTS_GB, _SIM_WEIGHTS_GB
    model_type = architecture(server_args.model_path)
    if log_version() == "0.5.23":
        logger.info(
            "Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB.",
            time.perf_counter() - tic, model_type, avail, usage,
        )
    else:
        logger.info(
            "Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB.",
            model_type, avail, usage,
        )
    return avail


def _capture_cuda_graphs(server_args: ServerArgs, rank: RankInfo, gpu: Optional[Gpu],
                         avail: float, max_num_reqs: int) -> float:
    """0.5.6: `Capture cuda graph begin/end`; 0.5.23: `Capture target decode CUDA graph ...`."""
    capture_bs = batch_sizes_to_capture(server_args, gpu.total_mib if gpu else 80 * 1024, max_num_reqs)
    new_wording = log_version() == "0.5.23"
    if new_wording:
        logger.info("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                    "avail mem=%.2f GB", avail)
    else:
        logger.info("Capture cuda graph begin. This can take up to several minutes. "
                    "avail mem=%.2f GB", avail)
    tic = time.perf_counter()
    compiled = torch_compile.prepare(server_args.enable_torch_compile, server_args.torch_compile_max_bs,
                                     gpu.device if gpu else None)
    after = capture(capture_bs, rank.tp_rank == 0, avail, _GRAPH_MEM_GB, compiled)
    torch_compile.log_summary(compiled)
    if new_wording:
        logger.info("Capture target decode CUDA graph end. bs=%s, elapsed=%.2f s, "
                    "mem usage=%.2f GB, avail mem=%.2f GB.",
                    capture_bs, time.perf_counter() - tic, avail - after, after)
    else:
        logger.info("Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. "
                    "avail mem=%.2f GB.", time.perf_counter() - tic, avail - after, after)
    return after


def _load_model(server_args: ServerArgs, rank: RankInfo) -> Dict[str, Any]:
    """The startup sequence of one rank (0.5.6 wording unless SGLANG_EMULATOR_LOG_VERSION)."""
    logger.info("Init torch distributed begin.")
    _optional_import_warnings()
    gpu = _grab_gpu(server_args, rank)  # the device is set (and held) during distributed init
    phase_sleep_for("INIT")
    _rendezvous(server_args, rank)
    logger.info("Init torch distributed ends. mem usage=%.2f GB", gpu_mib() / 1024 if gpu else 0.0)
    logger.info("Load weight begin. avail mem=%.2f GB", gpu.free_gb() if gpu else _SIM_AVAIL_GB)
    if has_fault("scheduler_death") and rank.tp_rank == 0:
        os._exit(1)
    if has_fault("hang"):
        threading.Event().wait()  # stuck forever, like a hung NCCL/IO call
    avail = _load_weights(server_args, rank, gpu)
    phase_sleep_for("MEMORY_POOL")
    tokens = _init_memory_pool(server_args)
    kv_gb = avail * 0.4
    avail -= 2 * kv_gb
    logger.info("KV Cache is allocated. #tokens: %s, K size: %.2f GB, V size: %.2f GB", tokens, kv_gb, kv_gb)
    logger.info("Memory pool end. avail mem=%.2f GB", avail)
    context_len = server_args.context_length or 32768
    max_num_reqs = server_args.max_running_requests or min(max(int(tokens / context_len * 512), 2048), 4096)
    if not server_args.disable_cuda_graph:
        avail = _capture_cuda_graphs(server_args, rank, gpu, avail, max_num_reqs)
    logger.info(
        "max_total_num_tokens=%s, chunked_prefill_size=%s, "
        "max_prefill_tokens=16384, max_running_requests=%s, "
        "context_len=%s, available_gpu_mem=%.2f GB",
        tokens, server_args.chunked_prefill_size or 8192, max_num_reqs,
        context_len, avail,
    )
    return {
        "status": "ready",
        "pid": os.getpid(),
        "tp_rank": rank.tp_rank,
        "max_total_num_tokens": tokens,
        "max_req_input_len": context_len - 5,
    }


def _event_loop() -> None:
    """Idle 'forward' loop; SIGUSR1 from the launcher injects the crash_after fault."""
    while not _crash_requested.wait(0.2):
        pass
    raise RuntimeError(
        "CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect."
    )


def setup_child(title: str, server_args: ServerArgs, prefix: str = "") -> None:
    """What every sglang child does first: die with the parent, set its title, log format."""
    set_prctl_pdeathsig(signal.SIGKILL)
    ignore = has_fault("ignore_sigterm")
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_process_title(title)
    configure_logger(server_args, prefix=prefix)


def run_scheduler_process(server_args: ServerArgs, rank: RankInfo, pipe_writer: Any) -> None:
    prefix = rank.prefix(server_args)
    setup_child(f"sglang::scheduler{prefix.replace(' ', '_')}", server_args, prefix)
    signal.signal(signal.SIGUSR1, lambda *_: _crash_requested.set())
    leak_shm_files("scheduler")
    try:
        pipe_writer.send(_load_model(server_args, rank))
        _event_loop()
    except Exception:
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        try:
            os.kill(rank.launcher_pid, signal.SIGQUIT)
        except OSError:
            pass
        time.sleep(5)  # the launcher SIGKILLs the tree; exiting first would race its EOF check
        sys.exit(1)
