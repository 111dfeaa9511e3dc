"""An output (dump) directory missing at the preflight, taken by another user during the teardown.

The launch's preflight accepted a missing output directory and created it only after the
teardown, right before the spawn. A local user who watched the old server's port close and made
that name in the shared sticky root (/dev/shm) in the gap had create() refuse it (unsafe_dir,
another user's directory): the old server was stopped and no new one started - the host DOWN,
and the rollback refused for the same directory. Now a replacement creates its missing output
directories under the instance lock before anything is stopped; after the teardown they are only
judged again.
"""
from __future__ import annotations

import os
import uuid

from helpers.fixtures import TEST_RUN_ID, free_port, run_module

WATCHER = ("import os, socket, sys, time\n"
           "port, path = int(sys.argv[1]), sys.argv[2]\n"
           "deadline = time.time() + 60\n"
           "while time.time() < deadline:\n"
           "    try:\n"
           "        socket.create_connection(('127.0.0.1', port), timeout=2).close()\n"
           "    except socket.timeout:\n"
           "        continue\n"
           "    except ConnectionRefusedError:\n"
           "        try:\n"
           "            os.mkdir(path, 0o755)\n"
           "            print('took', path, flush=True)\n"
           "        except OSError as exc:\n"
           "            print('could not take', path, exc, flush=True)\n"
           "        break\n"
           "    time.sleep(0.002)\n")


def test_a_missing_output_dir_is_made_before_the_old_server_stops(emulator_python, model_dir, tmp_path,
                                                                  throwaway_user):
    name = "outdir-%s" % uuid.uuid4().hex[:8]
    port = free_port()
    state = str(tmp_path / "state")
    dump = "/dev/shm/llmops-sec-%s" % uuid.uuid4().hex[:8]
    base = {"name": name, "venv": os.path.dirname(os.path.dirname(emulator_python)), "model_path": model_dir,
            "port": port, "state_dir": state, "log_dir": str(tmp_path / "logs"), "gpu_backend": "none",
            "env": {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}}
    ready_args = {"name": name, "state_dir": state, "timeout": 60, "poll_interval": 0.1, "settle": 0.3}
    try:
        assert run_module("sglang_launch", base)["_rc"] == 0
        assert run_module("sglang_ready", ready_args).get("ready") is True
        watcher = throwaway_user.start(["/usr/bin/python3", "-c", WATCHER, str(port), dump])
        # the restart now writes dumps there (serving -> extraction): the directory is new
        second = run_module("sglang_launch", dict(base, output_dirs=[{"path": dump}], args={"max-running-requests": 8},
                                                  teardown={"ports": [port], "grace_period": 5}))
        watcher.wait(timeout=60)
        assert second["_rc"] == 0 and second["changed"], (second.get("reason"), second.get("msg"))
        st = os.lstat(dump)
        assert st.st_uid == os.geteuid(), "the output directory is another user's"
        assert dump in second["output_dirs_created"], second
        assert run_module("sglang_ready", ready_args).get("ready") is True
    finally:
        run_module("sglang_teardown", {"name": name, "state_dir": state, "ports": [port], "gpu_backend": "none"})
        if os.path.isdir(dump) and not os.path.islink(dump):
            os.rmdir(dump)
