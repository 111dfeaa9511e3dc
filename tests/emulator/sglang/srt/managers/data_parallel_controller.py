"""Data parallel controller: owns the DP schedulers (they are ITS children, as in real sglang)."""

import logging
import os
import signal
import threading
import traceback
from typing import Any

from sglang.srt.managers.scheduler import setup_child
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


def run_data_parallel_controller_process(
    server_args: ServerArgs, launcher_pid: int, pipe_writer: Any
) -> None:
    from sglang.srt.entrypoints.engine import launch_schedulers, wait_for_schedulers

    setup_child("sglang::data_parallel_controller", server_args)
    try:
        procs, readers = [], []
        for dp_rank in range(server_args.dp_size):
            p, r = launch_schedulers(server_args, launcher_pid, dp_rank=dp_rank)
            procs += p
            readers += r
        pipe_writer.send(wait_for_schedulers(readers, procs))
    except Exception:
        logger.error("DataParallelController hit an exception: %s", traceback.format_exc())
        os.kill(launcher_pid, signal.SIGQUIT)
        return
    threading.Event().wait()
