"""_interpreter: resolve() errors name the path; discover() reads metadata without running."""
from __future__ import annotations

import os
import stat
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _interpreter as I
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


def _script(path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _fake_install(root, version: str = "0.5.6", pyver: str = "python3.11", venv: bool = True) -> str:
    """A venv-shaped tree with sglang dist-info and a bin/python that must NOT be run."""
    site = root / "lib" / pyver / "site-packages"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "launch_server.py").write_text("")
    dist = site / ("sglang-%s.dist-info" % version)
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: %s\n\nbody\n" % version)
    (root / "bin").mkdir()
    marker = root / "ran"
    _script(root / "bin" / "python", "#!/bin/sh\ntouch %s\n" % marker)
    if venv:
        (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return str(root)


def test_resolve_current_python_reports_version_without_sglang():
    interp = I.resolve(python=sys.executable)
    assert interp.path == os.path.abspath(sys.executable)
    assert interp.python_version == "%d.%d.%d" % sys.version_info[:3]
    assert interp.sglang_installed is False and interp.sglang_version is None
    assert interp.entrypoints == {"launch_server": False, "serve": False}
    assert set(interp.to_dict()) >= {"path", "venv", "is_venv", "entrypoints", "install_mtime", "error"}


def test_resolve_bare_name_is_reported_absolute():
    name = os.path.basename(sys.executable)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    assert os.path.isabs(I.resolve(python=name).path)


@pytest.mark.parametrize("case", ["missing", "file", "nobin"])
def test_resolve_bad_venv_names_the_path(tmp_path, case):
    target = tmp_path / "venv"
    if case == "file":
        target.write_text("")
    elif case == "nobin":
        target.mkdir()
    with pytest.raises(SglangError) as err:
        I.resolve(venv=str(target))
    assert str(target) in err.value.msg
    assert {"missing": "does not exist", "file": "not a directory", "nobin": "no bin/python"}[case] in err.value.msg


def test_resolve_not_executable_not_python_and_crashing(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(SglangError, match="not executable") as err:
        I.resolve(python=str(text))
    assert str(text) in err.value.msg
    text.chmod(0o755)
    with pytest.raises(SglangError, match="cannot be executed as a Python interpreter|failed"):
        I.resolve(python=str(text))
    crash = _script(tmp_path / "crash", "#!/bin/sh\necho 'Fatal: libpython missing' >&2\nexit 1\n")
    with pytest.raises(SglangError) as err:
        I.resolve(python=crash)
    assert "Fatal: libpython missing" in err.value.msg and err.value.details["rc"] == 1
    quiet = _script(tmp_path / "quiet", "#!/bin/sh\necho hello\n")
    with pytest.raises(SglangError, match="not a Python interpreter"):
        I.resolve(python=quiet)


def test_resolve_rejects_both():
    with pytest.raises(SglangError, match="mutually exclusive"):
        I.resolve(venv="/a", python="/b")


def test_broken_venv_symlink(tmp_path):
    (tmp_path / "bin").mkdir()
    os.symlink("/nonexistent/python3.99", str(tmp_path / "bin" / "python"))
    with pytest.raises(SglangError, match="broken symlink"):
        I.resolve(venv=str(tmp_path))


def test_resolve_finds_sglang_in_a_venv_with_a_stub_package(tmp_path):
    venv = tmp_path / "env"
    import subprocess
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pkg = os.path.join(site, "sglang")
    os.makedirs(pkg)
    # __init__ must never run: it would fail the probe here.
    with open(os.path.join(pkg, "__init__.py"), "w") as fh:
        fh.write("raise ImportError('torch missing: __init__ must not run')\n")
    open(os.path.join(pkg, "launch_server.py"), "w").close()
    dist = os.path.join(site, "sglang-0.5.6.dist-info")
    os.makedirs(dist)
    with open(os.path.join(dist, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.6\n")
    interp = I.resolve(venv=str(venv))
    assert interp.is_venv and interp.venv == str(venv)
    assert interp.sglang_installed and interp.sglang_version == "0.5.6"
    assert interp.sglang_location == pkg and interp.install_mtime
    assert interp.entrypoints["launch_server"] and not interp.entrypoints["serve"]


def test_discover_reads_metadata_without_running(tmp_path):
    root = _fake_install(tmp_path / "ml-env", "0.5.23")
    found = I.discover([str(tmp_path / "*") + "/"])
    assert len(found) == 1
    item = found[0]
    assert item["python"] == os.path.join(root, "bin", "python")
    assert item["venv"] == root and item["sglang_version"] == "0.5.23"
    assert item["location"].endswith("site-packages/sglang")
    assert not os.path.exists(os.path.join(root, "ran"))  # never executed


def test_discover_dedupes_and_handles_missing_paths(tmp_path):
    _fake_install(tmp_path / "a", "0.5.6")
    patterns = [str(tmp_path / "a"), str(tmp_path / "a") + "/", str(tmp_path / "nope*")]
    assert len(I.discover(patterns)) == 1
    assert I.discover([str(tmp_path / "nothing")]) == []


def test_where_is_sglang_adds_the_installs_running_servers_use(tmp_path, monkeypatch):
    root = _fake_install(tmp_path / "odd place" / "env", "0.5.23")
    monkeypatch.setattr(I, "running_interpreter_roots", lambda: [str(root) + "/"])
    others = I.where_is_sglang(I.Interpreter(path="/usr/bin/python3"), [str(tmp_path / "nowhere")])
    assert [o["python"] for o in others] == [os.path.join(str(root), "bin", "python")]


def test_discover_version_from_dirname_when_metadata_missing(tmp_path):
    root = tmp_path / "x"
    _fake_install(root, "0.5.7")
    os.unlink(str(root / "lib" / "python3.11" / "site-packages" / "sglang-0.5.7.dist-info" / "METADATA"))
    assert I.discover([str(root)])[0]["sglang_version"] == "0.5.7"


def test_where_is_sglang_excludes_the_interpreter_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(I, "running_interpreter_roots", lambda: [])  # other servers on this host
    root = _fake_install(tmp_path / "ml-env", "0.5.23")
    mine = I.Interpreter(path="/usr/bin/python3")
    others = I.where_is_sglang(mine, [root])
    assert [o["python"] for o in others] == [os.path.join(root, "bin", "python")]
    same = I.Interpreter(path=os.path.join(root, "bin", "python"))
    assert I.where_is_sglang(same, [root]) == []


def test_in_use_prefers_running_instances_then_dead_records(tmp_path, monkeypatch):
    from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import in_use

    monkeypatch.setattr(_deps, "untrusted_reason", lambda path, euid=None: None)  # synthetic paths

    servers = [
        {"main": True, "pid": 7, "user": "bob", "instance": None,
         "interpreter": {"cmdline": "/home/bob/env/bin/python", "venv": "/home/bob/env"}},
        {"main": True, "pid": 9, "user": "root", "instance": None,
         "interpreter": {"cmdline": "/opt/other/bin/python", "venv": "/opt/other"}},
        {"main": True, "pid": 8, "user": "root", "instance": "serving",
         "interpreter": {"cmdline": "/root/ml-env/bin/python", "venv": "/root/ml-env"}},
        {"main": False, "pid": None, "user": "root", "instance": None, "interpreter": {}},
        {"main": True, "pid": 5, "user": "root", "instance": "broken",
         "interpreter": {"cmdline": "/usr/bin/python3", "venv": None}},
        {"main": True, "pid": 4, "user": "root", "instance": "in-a-container", "other_namespace": True,
         "interpreter": {"cmdline": "/container/env/bin/python", "venv": "/container/env"}},
    ]
    records = [{"name": "old", "path": "/s/old.json", "alive": False, "interpreter": "/opt/old/bin/python",
                "venv": "/opt/old", "sglang_version": "0.5.6"},
               {"name": "serving", "alive": True, "interpreter": "/root/ml-env/bin/python", "venv": "/root/ml-env"}]
    installs = [{"python": "/root/ml-env/bin/python", "venv": "/root/ml-env", "sglang_version": "0.5.23"}]
    got = in_use(servers, records, installs, exclude="/usr/bin/python3", user="root")
    assert [g["python"] for g in got] == ["/root/ml-env/bin/python", "/opt/other/bin/python",
                                          "/home/bob/env/bin/python", "/opt/old/bin/python"]
    assert got[0]["source"] == "the running instance 'serving' (pid 8)" and got[0]["sglang_version"] == "0.5.23"
    assert got[1]["sglang_version"] is None
    assert got[3]["sglang_version"] == "0.5.6" and "last launch of instance 'old'" in got[3]["source"]


def test_in_use_never_returns_an_interpreter_another_user_can_replace(monkeypatch):
    """bob's venv is listed apart (with why), never returned as advice, whatever its rank."""
    from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import in_use

    monkeypatch.setattr(_deps, "untrusted_reason", lambda path, euid=None: "owned by user bob (/home/bob)"
                        if path.startswith("/home/bob/") else None)
    servers = [{"main": True, "pid": 7, "user": "root", "instance": "serving",
                "interpreter": {"cmdline": "/home/bob/env/bin/python", "venv": "/home/bob/env"}},
               {"main": True, "pid": 9, "user": "root", "instance": None,
                "interpreter": {"cmdline": "/opt/other/bin/python", "venv": "/opt/other"}}]
    records = [{"name": "old", "path": "/s/old.json", "alive": False, "interpreter": "/home/bob/env/bin/python",
                "venv": "/home/bob/env"}]
    withheld: list = []
    got = in_use(servers, records, [], user="root", untrusted=withheld)
    assert [g["python"] for g in got] == ["/opt/other/bin/python"]
    assert [(w["python"], w["why"]) for w in withheld] == [
        ("/home/bob/env/bin/python", "owned by user bob (/home/bob)")]
    assert withheld[0]["source"] == "the running instance 'serving' (pid 7)"
    assert in_use(servers, records, [], user="root") == got  # without a collector: just left out


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_where_is_sglang_leaves_out_another_users_install(tmp_path, monkeypatch):
    monkeypatch.setattr(I, "running_interpreter_roots", lambda: [])
    mine = _fake_install(tmp_path / "mine", "0.5.23")
    theirs = _fake_install(tmp_path / "theirs", "0.5.24")
    os.chown(theirs, 4321, 4321)
    got = I.where_is_sglang(I.Interpreter(path="/usr/bin/python3"), [mine, theirs])
    assert [o["python"] for o in got] == [os.path.join(mine, "bin", "python")]
    item = I.discover([theirs])[0]
    assert I.untrusted_install(item) == "owned by user 4321 (%s)" % theirs
