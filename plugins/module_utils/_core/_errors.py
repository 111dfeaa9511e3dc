"""One exception type for the library (modules turn it into fail_json(msg=..., **details)) and
the registry of the failure reasons it carries."""
from __future__ import annotations

from typing import Any, Dict


class SglangError(Exception):
    """A precise, operator-facing failure. `msg` is shown as is; `details` go into the result."""

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details


# Every failure reason a module returns (`reason` beside `msg`), with what it means: one
# registry, so that a new code is a choice, not a typo. tests/unit/test_reasons.py fails on a
# `reason="..."` in plugins/ that is not here. Bad input is `bad_input` in new code;
# `invalid_argument` and `bad_option` are older names of the same thing, kept because playbooks
# match on them; the `bad_<what>` codes name what was bad.
BAD_INPUT = "bad_input"
REASONS: Dict[str, str] = {
    # bad input: refused before anything is looked at or changed
    "bad_input": "an option's value is not acceptable",
    "invalid_argument": "an option's value is not acceptable (older name of bad_input)",
    "bad_option": "an option's value is not acceptable (older name of bad_input)",
    "bad_name": "an instance name that could name another instance's files",
    "bad_port": "a port outside 1-65535",
    "bad_gpus": "a GPU index that is not ASCII digits",
    "bad_index": "an index out of range",
    "bad_pattern": "a process pattern that is empty, invalid or matches everything",
    "bad_purge_path": "a purge path that is not a dedicated directory",
    "bad_protect": "a protected-process pattern that is invalid",
    "bad_spawn_timeout": "a spawn timeout out of range",
    "bad_model_path": "a model path that is neither a directory nor a hub id",
    "bad_log": "a log path that is not a regular file of this launch",
    "empty_scope": "a teardown with nothing to select",
    "scope_conflict": "options that select contradicting things",
    "argv_too_long": "a server command line longer than the kernel allows",
    "unsupported": "something this host or version cannot do",
    # the interpreter and sglang
    "python_missing": "the interpreter does not exist",
    "python_not_executable": "the interpreter is not executable",
    "python_timeout": "the interpreter did not answer in time",
    "not_python": "the file is not a Python interpreter",
    "venv_missing": "the venv does not exist",
    "venv_not_dir": "the venv is not a directory",
    "sglang_missing": "the interpreter cannot import sglang",
    "introspect_failed": "sglang's CLI could not be read",
    "introspect_timeout": "sglang's CLI was not read in time",
    "missing_library": "psutil or requests is missing where the module runs",
    "preflight_failed": "the launch's preflight found errors; nothing was stopped",
    # files, directories, records
    "unsafe_dir": "a directory another user can write or own",
    "unsafe_symlink": "a symlink out of the allowed tree",
    "unsafe_purge_path": "a purge path that is unsafe to delete in",
    "unsafe_record": "a launch record in an unsafe place",
    "unsafe_cgroup": "a cgroup another user controls",
    "not_a_directory": "a path that must be a directory is not",
    "not_regular_file": "a path that must be a regular file is not",
    "missing_file": "a file that must exist does not",
    "record_missing": "no launch record for the instance",
    "record_invalid": "a launch record without the fields it needs",
    "record_damaged": "a launch record that is not a JSON object (kept aside)",
    "last_good_unreadable": "the last proven-good record cannot be read",
    "no_last_good": "the instance has no last proven-good launch",
    "promote_failed": "the ready launch could not be recorded as the last good one",
    "no_space": "no space or inodes left",
    "permission_denied": "the operating system refused access",
    "read_only_fs": "a read-only filesystem",
    "not_found": "a path vanished",
    "io_error": "another operating-system error",
    # processes, ports, GPUs, containment
    "port_busy": "the port is held by another process",
    "port_still_held": "the port still has a listener after the teardown",
    "foreign_listener": "the listener is not the instance's sglang server",
    "foreign_gpu_processes": "processes that are not targets compute on the managed GPUs",
    "gpu_not_released": "the GPU still lists a target after the teardown",
    "other_instance": "a process of another instance is on a managed port",
    "survivors": "targets still alive after SIGKILL",
    "d_state": "targets stuck in uninterruptible sleep",
    "signal_failed": "a signal could not be sent",
    "spawn_failed": "the server could not be started",
    "spawn_timeout": "the server was not started in time",
    "cgroup_busy": "the instance's cgroup holds another launch",
    "containment_unavailable": "the containment asked for is not available here",
    "containment_failed": "the containment could not be set up or stopped",
    "locked": "the instance's lock is held by another holder",
    "lock_failed": "the lock could not be taken or released",
    "memory_floor": "prewarming would go below the memory floor",
    "no_weights": "the model path has no weight files",
    # readiness (sglang_ready) and the launch's own verdicts
    "exited": "the launched server exited before it was ready",
    "died": "the launched server died right after the launch",
    "fatal_log": "the launch's log has a fatal line",
    "stale_server": "another, older server answers on the port",
    "config_mismatch": "the server runs another configuration than asked for",
    "config_changed": "a running server would be replaced without the teardown that stops it",
    "code_changed": "the sglang code the running server imports changed on disk since it started",
    # the restart's operation lock as its summary reports it (not failures)
    "not_used": "the restart ran without an operation lock",
    "not_taken": "the plan took no operation lock (it did not get that far)",
    "check_only": "check mode: the operation lock was only checked, never taken",
    "unresponsive": "the instance runs but does not answer",
    "log_missing": "the launch's log does not exist",
    "log_truncated": "the launch's log was cut while it was followed",
    "ready_line_hidden": "the log level hides the ready line",
    "work_failed": "the ready server failed its proof of work",
    # servers and routers
    "timeout": "the wait ended without a verdict",
    "pending": "a slice ended before a verdict (the action plugin goes on)",
    "server_unresponsive": "the proven server does not answer",
    "no_load_source": "the server exposes no load endpoint",
    "unauthorized": "the server or router refused the API key",
    "router_refused": "the router refused the request",
    "router_unreachable": "the router did not answer",
    "last_healthy_worker": "the worker is the router's last healthy one",
    # the modules' own
    "error": "a failure raised without a reason of its own",
    "internal_error": "an unexpected exception (its traceback in `exception`)",
}
