"""What a module run compiles and imports before it does its work: modules run from source on
every run (AnsiballZ ships no bytecode), so each import on the common path costs its compile.
These tests pin the deferrals (nothing here measures time): a library imported where it is used
stays there, and the interpreter's answer reads sglang's dist-info without importlib.metadata."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _interpreter

REFERENCE = ("import json, importlib.metadata as md\n"
             "d = md.distribution('sglang')\n"
             "print(json.dumps({'version': d.version, 'dist_path': str(d._path),\n"
             "                  'console_scripts': [e.name for e in d.entry_points if e.group == 'console_scripts']}))\n")


def _answer(python: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-X", "importtime", "-c", _interpreter._PROBE_SCRIPT], capture_output=True,
                          text=True, cwd="/", env=env, check=True)


def _parsed(out: str) -> dict:
    start, end = out.find(_interpreter._BEGIN), out.find(_interpreter._END)
    return json.loads(out[start + len(_interpreter._BEGIN):end])


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> str:
    """A venv with an sglang dist-info spelled as pip may spell it (upper case, post release)
    and a console script beside another entry point group."""
    root = tmp_path_factory.mktemp("interp") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = str(root / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(os.path.join(site, "sglang"))
    open(os.path.join(site, "sglang", "launch_server.py"), "w").close()
    dist = os.path.join(site, "SGLang-0.5.6.post1.dist-info")
    os.makedirs(dist)
    with open(os.path.join(dist, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: SGLang\nVersion: 0.5.6.post1\n\nVersion: not this one\n")
    with open(os.path.join(dist, "entry_points.txt"), "w") as fh:
        fh.write("[console_scripts]\nsglang = sglang.cli.main:main\n# a comment\n\n[other]\nx = y:z\n")
    return python


def test_the_interpreters_answer_reads_the_dist_info_without_importlib_metadata(venv):
    proc = _answer(venv)
    data = _parsed(proc.stdout)
    assert "importlib.metadata" not in proc.stderr, "the answer imported importlib.metadata"
    reference = json.loads(subprocess.run([venv, "-c", REFERENCE], capture_output=True, text=True, cwd="/",
                                          check=True).stdout)
    assert {k: data[k] for k in reference} == reference
    assert data["version"] == "0.5.6.post1" and data["console_scripts"] == ["sglang"]


def test_an_interpreter_without_sglang_is_answered_without_importlib_metadata():
    proc = _answer(sys.executable, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    data = _parsed(proc.stdout)
    assert "importlib.metadata" not in proc.stderr
    assert data["version"] is None and data["dist_path"] is None and data["location"] is None
    assert "PackageNotFoundError" in data["metadata_error"]


def test_a_zip_on_the_path_is_left_to_importlib_metadata(venv, tmp_path):
    """Where the hand reader cannot say what importlib.metadata would find first (a zip on
    sys.path), importlib.metadata answers: the zip's sglang comes before the venv's."""
    archive = tmp_path / "first.zip"
    with zipfile.ZipFile(str(archive), "w") as zf:
        zf.writestr("sglang-9.9.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    env = dict(os.environ, PYTHONPATH=str(archive))
    proc = _answer(venv, env=env)
    assert "importlib.metadata" in proc.stderr
    assert _parsed(proc.stdout)["version"] == "9.9.9"


def _imported_after(code: str) -> set:
    """The collection's module_utils a fresh interpreter has imported after running `code`."""
    from helpers.fixtures import COLLECTIONS

    probe = code + ("\nimport sys\nprint(' '.join(sorted(m.rsplit('.', 1)[-1] for m in sys.modules "
                    "if '.plugins.module_utils._' in m)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/",
                         env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    return set(out.stdout.split())


def test_choosing_a_containment_backend_compiles_no_pidfd_code():
    loaded = _imported_after("from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment\n"
                             "_containment.choose('auto')")
    assert "_containment" in loaded and "_pidfd" not in loaded


def test_the_diagnosis_of_no_server_compiles_no_log_patterns():
    loaded = _imported_after("from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _diagnosis\n"
                             "assert _diagnosis.servers([]) == []")
    assert "_logpatterns" not in loaded


def test_a_probe_without_a_gpu_backend_answers_as_the_gpu_reader_does_without_compiling_it():
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
    from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe

    assert _probe.gpus("none", [], {}) == _gpus.query_gpus("none").to_dict()
    loaded = _imported_after("from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe\n"
                             "_probe.gpus('none', [], {})")
    assert "_gpus" not in loaded


@pytest.mark.parametrize("module", ["sglang_probe", "sglang_teardown", "sglang_prewarm", "sglang_lock",
                                    "sglang_launch", "sglang_ready", "sglang_drain", "sglang_router"])
def test_no_dataclass_of_a_modules_start_has_its_docstring_built_at_import(module):
    """A dataclass without a docstring gets one built from inspect.signature when its module is
    imported (~0.5 ms each, on every module run)."""
    from helpers.fixtures import COLLECTIONS

    code = ("import dataclasses, sys\n"
            "import ansible_collections.llmops.sglang.plugins.modules.%s\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _discovery\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._host import _shm\n"
            "for name, mod in sorted(sys.modules.items()):\n"
            "    if '.plugins.module_utils._' in name:\n"
            "        for obj in vars(mod).values():\n"
            "            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == name \\\n"
            "                    and (obj.__doc__ or '').startswith(obj.__name__ + '('):\n"
            "                print(name.rsplit('.', 1)[-1], obj.__name__)\n" % module)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/",
                         env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    assert out.stdout == "", "dataclasses without a docstring: %s" % out.stdout


_ENDING = """
import atexit, gc, os
from ansible.module_utils import basic
from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit

module = basic.AnsibleModule(argument_spec={})
atexit.register(lambda: os.write(2, b"frozen=%d" % gc.get_freeze_count()))
_exit.run(module, lambda m: {"changed": False}, "sglang_x")
"""


def test_a_module_run_ends_without_the_shutdowns_sweep_of_everything_alive(tmp_path):
    """What is alive when a module ends lives until its process does: frozen (gc.freeze), the
    interpreter's shutdown does not sweep it (30-40 ms a run); the result still comes out."""
    from helpers.fixtures import COLLECTIONS

    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {}}))
    out = subprocess.run([sys.executable, "-c", _ENDING, str(args)], capture_output=True, text=True, cwd="/",
                         env=dict(os.environ, PYTHONPATH=COLLECTIONS), check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["changed"] is False
    frozen = int(out.stderr.rsplit("frozen=", 1)[-1])
    assert frozen > 1000, out.stderr


def test_a_caller_that_goes_on_keeps_its_collector():
    import gc

    from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit

    class Stand:
        def exit_json(self, **kw):
            self.kw = kw

    before = gc.get_freeze_count()
    stand = Stand()
    _exit.run(stand, lambda m: {"changed": False}, "sglang_x")
    assert stand.kw == {"changed": False} and gc.get_freeze_count() == before


_COUNTED = """
import gc, os, runpy, sys
early = []


def count(phase, info):
    basic = sys.modules.get("ansible.module_utils.basic")
    if phase == "start" and basic is not None and not hasattr(basic, "AnsibleModule"):
        early.append(info["generation"])


gc.callbacks.append(count)
module, sys.argv = sys.argv[1], ["x"] + sys.argv[2:]
import atexit
atexit.register(lambda: os.write(2, b"early=%d enabled=%d" % (len(early), gc.isenabled())))
runpy.run_module("ansible_collections.llmops.sglang.plugins.modules." + module, run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["sglang_probe", "sglang_teardown", "sglang_lock", "sglang_prewarm",
                                    "sglang_drain", "sglang_router", "sglang_launch", "sglang_ready"])
def test_a_module_run_imports_its_code_without_collections_then_collects_again(module, tmp_path):
    """Run as a program, a module file turns the collector off before ansible and the
    collection are imported (no sweep can find garbage there: ~25 ms a run) and main() turns it
    back on. Bad arguments end each run right after that."""
    from helpers.fixtures import COLLECTIONS

    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"no_such_option": 1}}))
    out = subprocess.run([sys.executable, "-c", _COUNTED, module, str(args)], capture_output=True, text=True,
                         cwd="/", env=dict(os.environ, PYTHONPATH=COLLECTIONS), check=False)
    assert json.loads(out.stdout.strip().splitlines()[-1])["failed"] is True, out.stdout + out.stderr
    assert out.stderr.rsplit("early=", 1)[-1] == "0 enabled=1", out.stderr


def test_importing_a_module_file_leaves_the_collector_alone():
    from helpers.fixtures import COLLECTIONS

    code = ("import gc\nimport ansible_collections.llmops.sglang.plugins.modules.sglang_probe\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit\n"
            "_exit.started()\nprint(gc.isenabled(), gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/",
                         env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    assert out.stdout.split() == ["True", "0"]
