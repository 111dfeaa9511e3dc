"""Detokenizer process: only its title, PDEATHSIG and lifetime matter to the emulator."""

import threading

from sglang.srt.emulator_control import leak_shm_files
from sglang.srt.managers.scheduler import setup_child
from sglang.srt.server_args import ServerArgs


def run_detokenizer_process(server_args: ServerArgs) -> None:
    setup_child("sglang::detokenizer", server_args)
    leak_shm_files("detokenizer")
    threading.Event().wait()
