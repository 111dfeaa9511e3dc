"""Launch the inference server."""

import os
import sys
import warnings

from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.utils import kill_process_tree


def run_server(server_args: ServerArgs) -> None:
    """Imported lazily, as in 0.5.23: an import failure of the server shows up here."""
    from sglang.srt.entrypoints.http_server import launch_server

    launch_server(server_args)


if __name__ == "__main__":
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but "
        "'sglang serve' is the recommended entrypoint.\n"
        "  Example: sglang serve --model-path <model> [options]",
        UserWarning,
        stacklevel=1,
    )

    server_args = prepare_server_args(sys.argv[1:])

    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
