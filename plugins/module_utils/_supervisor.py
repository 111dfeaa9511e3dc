"""The supervising parent of one server: a tiny stdlib-only script written into the state dir
and run with the venv's interpreter as the session leader of the launch.

Why a parent at all: the module process exits at the end of the task, so nobody would be left
to collect the server's exit status; the supervisor waits for it and writes
`<name>.exit.json` (atomically), which is how sglang_ready tells "died with exit 1" from "still
loading". It forwards SIGTERM/SIGINT to the server (a teardown that signals only the supervisor
still stops the server) and otherwise does nothing: no restarts, no output of its own except
one line when the server cannot be executed at all.

Usage: python -I -S <script> <exit_path> <launch_id> -- <server argv...>
"""
from __future__ import annotations

import hashlib
import os

from ansible_collections.llmops.sglang.plugins.module_utils._record import ensure_dir

SCRIPT_NAME = "llmops-sglang-supervisor.py"

SOURCE = r'''# llmops.sglang supervising parent (generated; see plugins/module_utils/_supervisor.py)
import json
import os
import signal
import subprocess
import sys
import time


def write_exit(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as fh:
        json.dump(data, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def main():
    exit_path, launch_id = sys.argv[1], sys.argv[2]
    argv = sys.argv[sys.argv.index("--") + 1:]
    child = None

    def forward(signum, frame):
        if child is not None and child.returncode is None:
            try:
                os.kill(child.pid, signum)
            except OSError:
                pass

    # Handlers (not SIG_IGN): exec resets handlers to default in the server, SIG_IGN it would keep.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    signal.signal(signal.SIGHUP, lambda s, f: None)
    try:
        # stdin/stdout/stderr are inherited: /dev/null and this launch's log file.
        child = subprocess.Popen(argv, close_fds=True)
    except OSError as exc:
        sys.stderr.write("llmops-sglang-supervisor: cannot execute %s: %s\n" % (argv[0], exc.strerror or exc))
        sys.stderr.flush()
        write_exit(exit_path, {"launch_id": launch_id, "pid": None, "returncode": 127,
                               "signal": None, "exited_at": time.time(),
                               "error": "cannot execute %s: %s" % (argv[0], exc.strerror or exc)})
        return 127
    returncode = child.wait()  # PEP 475: retried after our signal handlers run
    sig = -returncode if returncode < 0 else None
    write_exit(exit_path, {"launch_id": launch_id, "pid": child.pid, "returncode": returncode,
                           "signal": signal.Signals(sig).name if sig else None,
                           "exited_at": time.time()})
    return 128 + sig if sig else returncode


if __name__ == "__main__":
    sys.exit(main())
'''


def script_path(state_dir: str) -> str:
    return os.path.join(state_dir, SCRIPT_NAME)


def install(state_dir: str) -> str:
    """Write the script (only when its content differs: concurrent launches of other instances
    may be running it) and return its path."""
    ensure_dir(state_dir)
    path = script_path(state_dir)
    wanted = SOURCE.encode("utf-8")
    try:
        with open(path, "rb") as fh:
            if hashlib.sha256(fh.read()).digest() == hashlib.sha256(wanted).digest():
                return path
    except OSError:
        pass
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as fh:
        fh.write(wanted)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def command(python: str, state_dir: str, exit_path: str, launch_id: str, server_argv: list) -> list:
    """The supervisor's own argv. -I -S: stdlib only, immune to PYTHON* variables and site hooks
    of the venv (they are for the server, not for this parent)."""
    return [python, "-I", "-S", script_path(state_dir), exit_path, launch_id, "--"] + list(server_argv)
