"""The demo inventory and the GPU script keep their state in private places when run as root:
never a predictable path under a world-writable directory (/tmp, /dev/shm), which any local
user could create first (and own) before root writes records and runs the supervisor there."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess

from helpers import play_runs
from helpers.fixtures import ROOT

WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")


def _rendered(*names: str) -> list:
    """The inventory's values of `names` for localhost, from the minimal callback's JSON (the
    yaml result format folds a long value, such as a path with a space, over several lines)."""
    env = dict(play_runs.env(), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    res = subprocess.run([play_runs.ANSIBLE, "localhost", "-i", os.path.join(ROOT, "inventory", "local.yml"),
                          "-m", "ansible.builtin.debug", "-a", "msg={{ [%s] }}" % ", ".join(names)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    head, _sep, body = res.stdout.partition(" => ")
    assert res.returncode == 0 and head.strip() == "localhost | SUCCESS", res.stdout + res.stderr
    return json.loads(body)["msg"]


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def test_demo_inventory_dirs_are_in_the_checkout():
    """Every demo directory lies in the checkout's own gitignored .cache/demo: the inventory adds
    no world-writable place of its own. A checkout that itself lies under /tmp is the operator's
    choice (CI clones there), so the world-writable check covers what the inventory adds."""
    paths = _rendered("sglang_state_dir", "sglang_log_dir", "sglang_extraction_dump_dir")
    checkout = os.path.realpath(ROOT)
    demo = os.path.join(checkout, ".cache", "demo")
    checkout_in_world_writable = any(_under(checkout, d) for d in WORLD_WRITABLE)
    for path in paths:
        assert os.path.isabs(path), path
        assert _under(os.path.realpath(path), demo) and os.path.realpath(path) != demo, path
        if not checkout_in_world_writable:
            assert not any(_under(path, d) for d in WORLD_WRITABLE), path


def _gpu_work_line() -> str:
    with open(os.path.join(ROOT, "tests", "gpu", "run.sh")) as fh:
        lines = [line for line in fh if re.match(r"\s*(export\s+)?GPUVAL_WORK=", line)]
    assert len(lines) == 1, lines
    return lines[0].strip()


def test_gpu_script_work_dir_is_private_and_unpredictable():
    """The default GPUVAL_WORK (state, logs, venvs of the GPU validation) is a fresh 0700
    directory of root's, another one at every run."""
    line = _gpu_work_line()
    env = {k: v for k, v in os.environ.items() if k != "GPUVAL_WORK"}
    made = []
    try:
        for _attempt in range(2):
            res = subprocess.run(["bash", "-c", '%s\nprintf "%%s" "$GPUVAL_WORK"' % line], env=env,
                                 capture_output=True, text=True, timeout=30, check=True)
            made.append(res.stdout)
        assert made[0] != made[1], "the same work dir at every run: %s" % made[0]
        for path in made:
            st = os.lstat(path)
            assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700, (path, oct(st.st_mode))
            assert st.st_uid == os.geteuid()
    finally:
        # only directories these two runs made (a fixed path is nobody's to delete here)
        if len(made) == 2 and made[0] != made[1]:
            for path in made:
                if path and os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
