"""Extra tokenizer workers (--tokenizer-worker-num > 1) and the `escape` fault's runaway worker."""

import os
import signal
import threading

from sglang.srt.emulator_control import has_fault
from sglang.srt.managers.scheduler import setup_child
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import set_process_title


def run_tokenizer_worker(server_args: ServerArgs) -> None:
    setup_child(f"sglang::tokenizer_worker:{os.getpid()}", server_args)
    threading.Event().wait()


def run_escaped_worker(listen_fd: int) -> None:
    """Double fork + setsid: reparented away from the launcher, no PDEATHSIG, and it keeps the
    inherited listening socket open, so the port stays bound after the launcher dies (#15165)."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    if has_fault("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    set_process_title(f"sglang::tokenizer_worker:{os.getpid()}")
    _keep = listen_fd  # held open on purpose
    threading.Event().wait()


ESCAPE_CODE = (
    "import sys; from sglang.srt.managers.tokenizer_worker import run_escaped_worker; "
    "run_escaped_worker(int(sys.argv[1]))"
)
