"""A state, log or TMPDIR directory that another user can write gives that user root's hands.

Root used to accept any state dir, install the supervisor script in it and execute it from
there, and write files in it through predictable temporary names. Now such directories are
refused (reason `unsafe_dir`, the path, owner and mode named), new ones are created 0700, files
are written through fresh O_EXCL|O_NOFOLLOW temporary files, and the supervisor runs from the
collection's own code, never from a file on disk.
"""
from __future__ import annotations

import json
import os
import signal
import stat

import pytest

from _launchsec import NAME as SEC, kill_session, sleeper, spec
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _introspect
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from helpers.fixtures import TEST_RUN_ID, free_port, marked_pids, run_module, wait_for

SECRET = b"root's precious file\n"


def _victim(directory: str) -> str:
    path = os.path.join(directory, "victim")
    with open(path, "wb") as fh:
        fh.write(SECRET)
    os.chmod(path, 0o600)
    return path


def _public_tmp(shared_tmp: str) -> str:
    """A world-writable sticky directory like /tmp, where any user can pre-create a directory."""
    path = os.path.join(shared_tmp, "tmp")
    os.mkdir(path)
    os.chmod(path, 0o1777)
    return path


def _untouched(path: str) -> bool:
    st = os.lstat(path)
    with open(path, "rb") as fh:
        return fh.read() == SECRET and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0


def test_state_dir_of_another_user_is_refused_before_root_writes_in_it(throwaway_user, shared_tmp, tmp_path):
    """The user owns the state dir (0777) and plants a symlink where root writes a temporary file."""
    state = os.path.join(_public_tmp(shared_tmp), "state")
    throwaway_user.run(["mkdir", "-m", "0777", state])
    victim = _victim(shared_tmp)
    # Predictable temporary names of the old code: <script>.<pid>.tmp, written by this process.
    for name in ("llmops-sglang-supervisor.py", SEC + ".json"):
        throwaway_user.run(["ln", "-s", victim, os.path.join(state, "%s.%d.tmp" % (name, os.getpid()))])
    launched = None
    try:
        with pytest.raises(SglangError) as info:
            launched = _launcher.spawn(spec(state, str(tmp_path / "logs"), sleeper()))
    finally:
        if launched:
            kill_session(launched.get("sid"))
    exc = info.value
    assert exc.details["reason"] == "unsafe_dir"
    assert state in exc.msg and throwaway_user.name in exc.msg and "0777" in exc.msg, exc.msg
    assert _untouched(victim)
    assert sorted(os.listdir(state)) == sorted("%s.%d.tmp" % (n, os.getpid())
                                               for n in ("llmops-sglang-supervisor.py", SEC + ".json"))
    assert not os.path.exists(str(tmp_path / "logs"))  # refused before anything else was made


@pytest.mark.parametrize("case", ["other_owner_0700", "root_0777", "root_sticky_1777", "group_writable",
                                  "parent_world_writable", "log_dir_other_owner"])
def test_unsafe_directories_are_refused(case, throwaway_user, shared_tmp, tmp_path):
    target = os.path.join(_public_tmp(shared_tmp), "dir")
    if case == "other_owner_0700":
        throwaway_user.run(["mkdir", "-m", "0700", target])
    elif case in ("root_0777", "root_sticky_1777", "group_writable"):
        os.mkdir(target)
        os.chmod(target, {"root_0777": 0o777, "root_sticky_1777": 0o1777, "group_writable": 0o770}[case])
    elif case == "parent_world_writable":
        parent = os.path.join(shared_tmp, "open")
        os.mkdir(parent)
        os.chmod(parent, 0o777)  # no sticky bit: anyone can rename what root creates in it
        target = os.path.join(parent, "state")
    if case == "log_dir_other_owner":
        throwaway_user.run(["mkdir", "-m", "0755", target])
        with pytest.raises(SglangError) as info:
            _launcher.spawn(spec(str(tmp_path / "state"), target, sleeper()))
    else:
        with pytest.raises(SglangError) as info:
            _record.ensure_dir(target)
    assert info.value.details["reason"] == "unsafe_dir", info.value.msg
    assert info.value.details["path"] in info.value.msg
    if case == "parent_world_writable":
        assert not os.path.exists(target)


def test_sticky_parent_is_fine_and_new_dirs_are_private(shared_tmp):
    sticky = _public_tmp(shared_tmp)  # others cannot rename what root creates here
    target = os.path.join(sticky, "a", "b")
    _record.ensure_dir(target)
    for path in (os.path.join(sticky, "a"), target):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    _record.ensure_dir(target)  # idempotent


def test_launch_creates_private_dirs_and_runs_nothing_from_disk(tmp_path):
    state, logs = str(tmp_path / "new" / "state"), str(tmp_path / "new" / "logs")
    rec = _launcher.spawn(spec(state, logs, sleeper()))
    try:
        for path in (state, logs, rec["tmpdir"]):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
        sup = _procs.read_proc(rec["supervisor_pid"])
        # Nothing on the supervisor's command line is a file but the interpreter itself.
        files = [a for a in sup.cmdline[1:] if os.path.exists(a)]
        assert files == [], sup.cmdline
        assert not [n for n in os.listdir(state) if n.endswith(".py")]
        assert stat.S_IMODE(os.stat(rec["log_path"]).st_mode) == 0o600
    finally:
        kill_session(rec["sid"])


def test_exit_file_is_never_written_through_a_planted_symlink(tmp_path, shared_tmp):
    """The supervisor's exit file used a predictable temporary name (<exit>.<pid>.tmp) opened
    without O_NOFOLLOW/O_EXCL: a symlink there made root overwrite (and chmod) its target."""
    victim = _victim(shared_tmp)
    rec = _launcher.spawn(spec(str(tmp_path / "state"), str(tmp_path / "logs"), sleeper()))
    try:
        os.symlink(victim, "%s.%d.tmp" % (rec["exit_path"], rec["supervisor_pid"]))
        os.kill(rec["supervisor_pid"], signal.SIGTERM)
        assert wait_for(lambda: os.path.exists(rec["exit_path"]), 20)
        assert _untouched(victim)
        assert json.load(open(rec["exit_path"]))["launch_id"] == rec["launch_id"]
        assert stat.S_IMODE(os.lstat(rec["exit_path"]).st_mode) == 0o600
    finally:
        kill_session(rec["sid"])


def test_introspection_cache_creates_the_state_dir_private(tmp_path):
    state = str(tmp_path / "state")
    note = _introspect._write_cache(os.path.join(state, "introspect-cache", "k.json"),
                                    {"flags": {"--port": {}}, "source": "sglang.launch_server"})
    assert note is None
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(state, "introspect-cache")).st_mode) == 0o700


def test_module_refuses_a_state_dir_another_user_owns(throwaway_user, shared_tmp, tmp_path, emulator_python):
    state = os.path.join(_public_tmp(shared_tmp), "state")
    throwaway_user.run(["mkdir", "-m", "0777", state])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    args = {"name": SEC, "venv": os.path.dirname(os.path.dirname(emulator_python)), "model_path": str(model),
            "port": free_port(), "state_dir": state, "log_dir": str(tmp_path / "logs"), "gpu_backend": "none",
            "env": {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}}
    try:
        result = run_module("sglang_launch", args)
        assert result["_rc"] != 0 and result["reason"] in ("unsafe_dir", "preflight_failed"), result
        assert state in result["msg"] and throwaway_user.name in result["msg"], result["msg"]
        assert [n for n in os.listdir(state) if os.lstat(os.path.join(state, n)).st_uid == 0] == []
        assert marked_pids(state_prefix=state) == []
    finally:
        for pid in marked_pids(state_prefix=state):
            os.kill(pid, signal.SIGKILL)


def test_plan_refuses_a_state_dir_another_user_owns(throwaway_user, shared_tmp, tmp_path, emulator_python):
    """Check mode (the restart's plan) refuses it too: before anything is stopped, with unsafe_dir."""
    state = os.path.join(_public_tmp(shared_tmp), "state")
    throwaway_user.run(["mkdir", "-m", "0777", state])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    args = {"name": SEC, "venv": os.path.dirname(os.path.dirname(emulator_python)), "model_path": str(model),
            "port": free_port(), "state_dir": state, "log_dir": str(tmp_path / "logs"), "gpu_backend": "none"}
    result = run_module("sglang_launch", args, check_mode=True)
    assert result["_rc"] != 0 and result["reason"] == "unsafe_dir", result
    assert state in result["msg"] and throwaway_user.name in result["msg"], result["msg"]
    assert os.listdir(state) == []
