"""`sglang` console script: `sglang serve ...`, `sglang version` (as in 0.5.23)."""

import argparse
import os
from typing import List

from sglang.version import __version__


def version(args: argparse.Namespace, extra_argv: List[str]) -> None:
    print(f"sglang version: {__version__}")
    print("git revision: emulato")


def serve(args: argparse.Namespace, extra_argv: List[str]) -> None:
    from sglang.launch_server import run_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    argv = list(extra_argv)
    if argv and not argv[0].startswith("-"):  # `sglang serve <model>`
        argv = ["--model-path", argv[0], *argv[1:]]
    if any(a in argv for a in ("-h", "--help")):
        try:
            prepare_server_args(["--help"])
        except SystemExit:
            pass
        return
    server_args = prepare_server_args(argv)
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="subcommand", required=True)
    subparsers.add_parser("serve", help="Launch an SGLang server.", add_help=False)
    subparsers.add_parser("version", help="Show the version information.").set_defaults(func=version)
    args, extra_argv = parser.parse_known_args()
    if args.subcommand == "serve":
        serve(args, extra_argv)
    elif args.subcommand == "version":
        version(args, extra_argv)
