"""The supervising parent of one server: a tiny stdlib-only program run with the venv's
interpreter as the session leader of the launch.

Why a parent at all: the module process exits at the end of the task, so nobody would be left
to collect the server's exit status; the supervisor waits for it and writes
`<name>.exit.json` (atomically), which is how sglang_ready tells "died with exit 1" from "still
loading". It forwards SIGTERM/SIGINT to the server (a teardown that signals only the supervisor
still stops the server) and otherwise does nothing: no restarts, no output of its own except
one line when the server cannot be executed or the exit file cannot be written.

With cgroup containment it first moves itself into the instance cgroup (named in the payload),
before the server exists, so the server and everything it ever forks is born inside; if that
fails the server is not started (exit 126, reason containment_failed in the exit file).

Nothing is executed from a file: the interpreter runs a one-line bootstrap given with `-c`,
which reads this source and the server's argv from a pipe on its stdin. The module fills that
pipe before the spawn (no other process can write it), so the supervisor runs the collection's
own code, and the server's argv - API key included - is in no process's argv but the server's.

Command line: python -I -S -c <bootstrap> llmops-sglang-supervisor <instance>
"""
from __future__ import annotations

import fcntl
import json
import os
from typing import Dict, List, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError

TITLE = "llmops-sglang-supervisor"
# -I -S: stdlib only, immune to PYTHON* variables and site hooks of the venv (they are for the
# server, not for this parent).
BOOTSTRAP = ("import json,sys;p=json.loads(sys.stdin.buffer.read());"
             "exec(compile(p.pop('source'),'%s','exec'),{'__name__':'__main__','PAYLOAD':p})" % TITLE)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux; named in fcntl from Python 3.10

SOURCE = r'''# llmops.sglang supervising parent (see plugins/module_utils/_launch/_supervisor.py)
import json
import os
import signal
import subprocess
import sys
import time

NAME = "llmops-sglang-supervisor"


def say(text):
    sys.stderr.write("%s: %s\n" % (NAME, text))
    sys.stderr.flush()


def write_exit(path, data):
    """A fresh temporary file (O_EXCL|O_NOFOLLOW: nothing planted is followed), fsync, rename;
    removed again on any failure, which is reported in the log."""
    payload = json.dumps(data, sort_keys=True).encode("utf-8")
    tmp = os.path.join(os.path.dirname(path), ".%s.%s.tmp" % (os.path.basename(path), os.urandom(6).hex()))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        say("cannot write %s: %s" % (path, exc.strerror or exc))
        return
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        say("cannot write %s: %s" % (path, exc.strerror or exc))


def join_cgroup(path):
    """Move this process into the instance cgroup before the server exists: every process the
    server ever forks is then born inside it. None when done, else the error text."""
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as fh:
            fh.write("0\n")
    except OSError as exc:
        return "cannot join cgroup %s: %s" % (path, exc.strerror or exc)
    return None


def main():
    exit_path, launch_id, argv = PAYLOAD["exit_path"], PAYLOAD["launch_id"], PAYLOAD["argv"]
    if PAYLOAD.get("cgroup"):
        error = join_cgroup(PAYLOAD["cgroup"])
        if error:
            say(error)
            write_exit(exit_path, {"launch_id": launch_id, "pid": None, "returncode": 126, "signal": None,
                                   "exited_at": time.time(), "error": error, "reason": "containment_failed"})
            return 126
    # stdin was the pipe this program came through: the server gets /dev/null.
    null = os.open(os.devnull, os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)
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
        # env None: the server inherits this process's environment (the launch's own); the
        # systemd backend sends it in the payload instead (unit properties are readable by all)
        child = subprocess.Popen(argv, close_fds=True, env=PAYLOAD.get("env"))
    except OSError as exc:
        error = "cannot execute %s: %s" % (argv[0], exc.strerror or exc)
        say(error)
        write_exit(exit_path, {"launch_id": launch_id, "pid": None, "returncode": 127,
                               "signal": None, "exited_at": time.time(), "error": error})
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


def command(python: str, name: str) -> List[str]:
    """The supervisor's own argv: the interpreter, the bootstrap and a label for `ps`; no path
    to execute and nothing of the server's command line."""
    return [python, "-I", "-S", "-c", BOOTSTRAP, TITLE, name]


def payload(exit_path: str, launch_id: str, server_argv: List[str], cgroup: Optional[str] = None,
            env: Optional[Dict[str, str]] = None) -> bytes:
    """`cgroup`: the instance cgroup the supervisor joins first thing (None: stay where it is).
    `env`: the server's whole environment (None: the supervisor's own, passed on)."""
    return json.dumps({"source": SOURCE, "exit_path": exit_path, "launch_id": launch_id,
                       "argv": list(server_argv), "cgroup": cgroup, "env": env}).encode("ascii")


def payload_pipe(data: bytes) -> int:
    """The read end of a pipe that already holds `data` and its end (the write end is closed),
    to be the supervisor's stdin: the spawn never blocks on a supervisor that starts slowly."""
    read_fd, write_fd = os.pipe()
    try:
        if len(data) > 65536:
            try:
                fcntl.fcntl(write_fd, _F_SETPIPE_SZ, len(data))
            except OSError:
                pass  # the write below says whether it fits
        os.set_blocking(write_fd, False)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(write_fd, view):]
            except BlockingIOError:
                raise SglangError("the server command line is too long to hand to the supervisor (%d bytes)"
                                  % len(data), reason="argv_too_long")
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return read_fd
