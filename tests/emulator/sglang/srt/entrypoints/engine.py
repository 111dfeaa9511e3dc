"""Subprocess launch (spawn) and the wait for the schedulers, shaped like srt/entrypoints/engine.py."""

import logging
import multiprocessing as mp
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from sglang.srt.emulator_control import benign_warnings
from sglang.srt.managers.scheduler import RankInfo, run_scheduler_process
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


def _ctx() -> Any:
    return mp.get_context("spawn")


@dataclass
class Subprocesses:
    """The launcher's direct children; `schedulers` are None-free only without DP."""

    schedulers: List[Any] = field(default_factory=list)
    others: List[Any] = field(default_factory=list)
    readers: List[Any] = field(default_factory=list)
    infos: List[Dict[str, Any]] = field(default_factory=list)

    def all(self) -> List[Any]:
        return self.schedulers + self.others


def _local_tp_ranks(server_args: ServerArgs) -> List[int]:
    per_node = max(1, server_args.tp_size // max(1, server_args.nnodes))
    first = server_args.node_rank * per_node
    return list(range(first, first + per_node))


def launch_schedulers(
    server_args: ServerArgs, launcher_pid: int, dp_rank: Optional[int] = None
) -> Tuple[List[Any], List[Any]]:
    procs, readers = [], []
    for local, tp_rank in enumerate(_local_tp_ranks(server_args)):
        reader, writer = _ctx().Pipe(duplex=False)
        rank = RankInfo(tp_rank=tp_rank, local_rank=local, dp_rank=dp_rank, launcher_pid=launcher_pid)
        proc = _ctx().Process(target=run_scheduler_process, args=(server_args, rank, writer))
        proc.start()
        writer.close()  # keep only the child's end open, so its death reads as EOF
        procs.append(proc)
        readers.append(reader)
    return procs, readers


def _scheduler_died_error(rank: int, proc: Any) -> RuntimeError:
    proc.join(timeout=10)
    return RuntimeError(
        f"Rank {rank} scheduler died during initialization "
        f"(exit code: {proc.exitcode}). "
        f"If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. "
        f"Run `dmesg -T | grep -i oom` to check."
    )


def wait_for_schedulers(readers: List[Any], procs: List[Any]) -> List[Dict[str, Any]]:
    """poll() with a timeout so a dead child is seen, and signal handlers keep running."""
    infos: List[Dict[str, Any]] = []
    for i, reader in enumerate(readers):
        while not reader.poll(timeout=0.2):
            pass
        try:
            data = reader.recv()
        except EOFError:
            raise _scheduler_died_error(i, procs[i])
        infos.extend(data if isinstance(data, list) else [data])
    return infos


def launch_subprocesses(server_args: ServerArgs) -> Subprocesses:
    """Schedulers (or the DP controller), detokenizer, extra tokenizer workers; then wait."""
    from sglang.srt.managers.data_parallel_controller import run_data_parallel_controller_process
    from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
    from sglang.srt.managers.tokenizer_worker import run_tokenizer_worker

    subs = Subprocesses()
    launcher = os.getpid()
    if server_args.dp_size > 1:
        reader, writer = _ctx().Pipe(duplex=False)
        ctrl = _ctx().Process(
            target=run_data_parallel_controller_process, args=(server_args, launcher, writer)
        )
        ctrl.start()
        writer.close()
        subs.schedulers, subs.readers = [ctrl], [reader]
    else:
        subs.schedulers, subs.readers = launch_schedulers(server_args, launcher)
    if server_args.node_rank == 0:
        detok = _ctx().Process(target=run_detokenizer_process, args=(server_args,))
        detok.start()
        subs.others.append(detok)
        if server_args.tokenizer_worker_num > 1:
            for _worker in range(server_args.tokenizer_worker_num):
                worker = _ctx().Process(target=run_tokenizer_worker, args=(server_args,))
                worker.start()
                subs.others.append(worker)
    if server_args.node_rank == 0 and benign_warnings():
        # The tokenizer manager imports every multimodal processor (0.5.23:
        # srt/managers/multimodal_processor.py); a missing optional module is logged and skipped.
        e = ModuleNotFoundError("No module named 'transformers.models.glm_ocr'")
        logger.warning("Ignore import error when loading sglang.srt.multimodal.processors.glm_ocr: %s", e)
    subs.infos = wait_for_schedulers(subs.readers, subs.schedulers)
    return subs
