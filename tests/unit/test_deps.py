"""_deps: which libraries are missing, and which interpreter on the host has them."""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch


def _fake_python(path, has_libs: bool) -> str:
    """A stand-in interpreter: exits 0 for `-c "import ..."` when it 'has' the libraries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit %d\n" % (0 if has_libs else 1))
    path.chmod(0o755)
    return str(path)


def test_missing_imports_or_only_looks_up():
    assert _deps.missing(["json", "no_such_library_llmops"]) == ["no_such_library_llmops"]
    assert _deps.missing(["json", "no_such_library_llmops"], import_them=False) == ["no_such_library_llmops"]
    assert _deps.missing(["json"]) == []


def test_has_libs_runs_the_interpreter_without_this_pythonpath(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    (tmp_path / "only_here_llmops.py").write_text("")
    assert _deps.has_libs(sys.executable, ["json"]) is True
    assert _deps.has_libs(sys.executable, ["only_here_llmops"]) is False  # not by itself
    assert _deps.has_libs(str(tmp_path / "nothing"), ["json"]) is False


def _mnt(path, namespace: str) -> None:
    (path / "ns").mkdir()
    os.symlink(namespace, str(path / "ns" / "mnt"))


def test_running_interpreters_from_a_proc_tree(tmp_path):
    def proc(pid: int, *argv: str, namespace: str = "mnt:[1]") -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        if namespace:
            _mnt(tmp_path / str(pid), namespace)
    proc(10, "/root/ml-env/bin/python", "-m", "sglang.launch_server", "--model-path", "m")
    proc(11, "/opt/env/bin/python3", "/opt/env/bin/sglang", "serve", "--model-path", "m")
    proc(12, "sglang::scheduler_TP0")
    proc(13, "/usr/bin/python3", "-m", "http.server")
    proc(14, "python", "-m", "sglang.launch_server")  # not absolute: cannot be named
    proc(15, "/opt/venv/bin/python", "-m", "sglang.launch_server", namespace="mnt:[2]")  # a container's path
    proc(16, "/opt/other/bin/python", "-m", "sglang.launch_server", namespace="")  # namespace unreadable
    (tmp_path / "self").mkdir()
    _mnt(tmp_path / "self", "mnt:[1]")
    assert _depsearch.running_interpreters(str(tmp_path)) == ["/root/ml-env/bin/python", "/opt/env/bin/python3"]
    assert [pid for pid, _uid, _argv in _depsearch.sglang_command_lines(str(tmp_path))] == [10, 11, 14, 15, 16]


def test_a_path_through_proc_is_never_trusted(tmp_path):
    py = _fake_python(tmp_path / "env" / "bin" / "python", True)
    assert _deps.trusted(py)
    via_proc = "/proc/%d/root%s" % (os.getpid(), py)  # the same file, but another process's view
    assert _deps.untrusted_reason(via_proc).startswith("a path through /proc (%s)" % via_proc)
    assert _deps.trusted(via_proc) is False
    assert _deps.untrusted_reason("/proc/self/exe").startswith("a path through /proc")
    link = tmp_path / "env" / "bin" / "python-link"
    os.symlink("/proc/self/root" + py, str(link))
    # through this module's own root the link opens the very file its resolved path names (a
    # link into another mount namespace does not: tests/security/test_deps_other_mount_namespace.py)
    assert _deps.other_view(str(link)) is None


def test_candidates_order_hints_records_running_installs(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    (state / "a.json").write_text(json.dumps({"interpreter": "/rec/bin/python"}))
    (state / "a.exit.json").write_text(json.dumps({"interpreter": "/exit/bin/python"}))
    (state / "broken.json").write_text("{")
    monkeypatch.setattr(_depsearch, "running_interpreters", lambda: ["/run/bin/python", "/rec/bin/python"])
    monkeypatch.setattr(_depsearch, "_installed_interpreters", lambda paths: ["/inst/bin/python", sys.executable])
    got = _depsearch.candidates(["/hint/bin/python", "relative/python"], [str(state)])
    assert got == ["/hint/bin/python", "/rec/bin/python", "/run/bin/python", "/inst/bin/python"]


def test_interpreter_with_skips_lacking_and_untrusted(tmp_path, monkeypatch):
    lacking = _fake_python(tmp_path / "a" / "bin" / "python", False)
    shared = tmp_path / "shared"
    untrusted = _fake_python(shared / "bin" / "python", True)
    shared.chmod(0o777)  # anyone could replace it: never run, never named
    good = _fake_python(tmp_path / "b" / "bin" / "python", True)
    monkeypatch.setattr(_depsearch, "candidates", lambda *a, **k: [lacking, untrusted, good])
    assert _deps.trusted(untrusted) is False and _deps.trusted(good) is True
    assert _depsearch.interpreter_with(["psutil"]) == good
    monkeypatch.setattr(_depsearch, "candidates", lambda *a, **k: [lacking, untrusted])
    assert _depsearch.interpreter_with(["psutil"]) is None


def test_trusted_refuses_another_users_file(tmp_path):
    py = _fake_python(tmp_path / "bin" / "python", True)
    assert _deps.trusted(py, euid=os.geteuid())
    if os.geteuid() == 0:
        os.chown(py, 4321, 4321)
        assert _deps.trusted(py, euid=0) is False
    assert _deps.trusted("python3") is False


def test_message_names_the_interpreter_or_says_what_to_install():
    named = _deps.message(["psutil"], "/root/ml-env/bin/python")
    assert named.startswith("Failed to import the required Python library (psutil) on ")
    assert "rerun with `-e ansible_python_interpreter=/root/ml-env/bin/python`" in named
    none = _deps.message(["psutil", "requests"], None)
    assert "(psutil and requests)" in none and "apt-get install python3-psutil python3-requests" in none


def test_hints_from_module_parameters(tmp_path):
    venv = tmp_path / "venv"
    _fake_python(venv / "bin" / "python", True)
    hints = _depsearch.hints_from({"venv": str(venv), "state_dir": str(tmp_path / "s"), "search_paths": ["/x/*/"]})
    assert hints == {"hints": [str(venv / "bin" / "python")], "state_dirs": [str(tmp_path / "s")],
                     "search_paths": ["/x/*/"]}
    assert _depsearch.hints_from({"python": "/usr/bin/python3"})["hints"] == ["/usr/bin/python3"]


class _Module:
    def __init__(self, params: Dict[str, Any]) -> None:
        self.params = params
        self.failed: List[Dict[str, Any]] = []

    def fail_json(self, **kwargs: Any) -> None:
        self.failed.append(kwargs)
        raise SystemExit(1)


def test_require_fails_with_missing_library_and_the_interpreter(tmp_path, monkeypatch):
    good = _fake_python(tmp_path / "env" / "bin" / "python", True)
    monkeypatch.setattr(_depsearch, "candidates", lambda *a, **k: [good])
    module = _Module({"state_dir": str(tmp_path)})
    _depsearch.require(module, ["json"])  # present: nothing happens
    assert module.failed == []
    with pytest.raises(SystemExit):
        _depsearch.require(module, ["json", "no_such_library_llmops"])
    failure = module.failed[0]
    assert failure["reason"] == "missing_library" and failure["missing_libraries"] == ["no_such_library_llmops"]
    assert failure["interpreter_with_libraries"] == good and good in failure["msg"]


def test_untrusted_reason_says_who_or_what_could_replace_it(tmp_path):
    py = _fake_python(tmp_path / "env" / "bin" / "python", True)
    assert _deps.untrusted_reason(py) is None
    (tmp_path / "env").chmod(0o777)
    assert _deps.untrusted_reason(py) == "writable by group or others (%s)" % (tmp_path / "env")
    (tmp_path / "env").chmod(0o755)
    if os.geteuid() == 0:
        os.chown(str(tmp_path / "env" / "bin"), 4321, 4321)
        assert _deps.untrusted_reason(py) == "owned by user 4321 (%s)" % (tmp_path / "env" / "bin")
        assert _deps.trusted(py) is False
    assert _deps.untrusted_reason("python3").startswith("not an absolute path")
    assert _deps.untrusted_reason(str(tmp_path / "nope")).startswith("unreadable")
