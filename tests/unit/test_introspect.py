"""_introspect: the parser is captured before the server starts; fallback; errors; cache."""
from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _introspect as S
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import Interpreter

SERVER_ARGS = '''
import argparse, json
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, required=True, help="model")
        parser.add_argument("--port", type=int, default=30000, help="port (default %(default)s)")
        parser.add_argument("--mem-fraction-static", type=float, default=None)
        parser.add_argument("--reasoning-parser", choices=["deepseek-r1", "kimi_k2"], default=None)
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--json-model-override-args", type=json.loads, default={})
        parser.add_argument("--weird", default=object())
        parser.add_argument("--hidden-thing", help=argparse.SUPPRESS)
def prepare_server_args(argv):
    pre = argparse.ArgumentParser(add_help=False)   # a small pre-parser must not be captured
    pre.add_argument("--config")
    pre.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)
'''

LAUNCH = '''
import os, sys
from sglang.srt.server_args import prepare_server_args
if __name__ == "__main__":
    print("noise on stdout that is not JSON")
    args = prepare_server_args(sys.argv[1:])
    open(os.environ["STUB_STARTED"], "w").write("the server started: interception failed")
'''


def _stub(tmp_path, launch: str = LAUNCH, server_args: str = SERVER_ARGS) -> str:
    root = tmp_path / "stub"
    srt = root / "sglang" / "srt"
    srt.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (srt / "__init__.py").write_text("")
    (srt / "server_args.py").write_text(textwrap.dedent(server_args))
    (root / "sglang" / "launch_server.py").write_text(textwrap.dedent(launch))
    return str(root)


@pytest.fixture
def stub_env(tmp_path, monkeypatch):
    def make(**kw) -> Interpreter:
        root = _stub(tmp_path, **kw)
        monkeypatch.setenv("PYTHONPATH", root)
        monkeypatch.setenv("STUB_STARTED", str(tmp_path / "started"))
        return Interpreter(path=sys.executable, sglang_installed=True, sglang_version="0.0.1",
                           sglang_location=os.path.join(root, "sglang"), install_mtime=1.0)
    return make


def test_captures_parser_before_server_starts(stub_env, tmp_path):
    interp = stub_env()
    res = S.introspect(interp, cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "started").exists()
    flags = res["flags"]
    assert res["source"] == "sglang.launch_server" and res["cached"] is False
    assert "--config" not in flags and "--help" not in flags
    assert flags["--model-path"]["option_strings"] == ["--model-path", "--model"]
    assert flags["--model-path"]["required"] is True
    assert flags["--port"]["type"] == "int" and flags["--port"]["default"] == 30000
    assert flags["--port"]["help"] == "port (default 30000)"
    assert flags["--mem-fraction-static"]["type"] == "float"
    assert flags["--reasoning-parser"]["choices"] == ["deepseek-r1", "kimi_k2"]
    assert flags["--trust-remote-code"]["type"] == "bool"
    assert flags["--trust-remote-code"]["action"] == "store_true"
    assert flags["--json-model-override-args"]["type"] == "loads"
    assert flags["--weird"]["default"].startswith("<object object")
    assert flags["--hidden-thing"]["hidden"] is True
    json.dumps(res)


def test_cache_hit_and_corrupt_cache(stub_env, tmp_path):
    interp = stub_env()
    cache = str(tmp_path / "cache")
    first = S.introspect(interp, cache_dir=cache)
    second = S.introspect(interp, cache_dir=cache)
    assert second["cached"] is True and second["flags"] == first["flags"]
    assert second["seconds"] < 0.3
    path = first["cache_path"]
    assert os.path.dirname(path) == cache
    with open(path, "w") as fh:
        fh.write("{not json")
    third = S.introspect(interp, cache_dir=cache)
    assert third["cached"] is False and set(third["flags"]) == set(first["flags"])
    assert S.introspect(interp, cache_dir=cache)["cached"] is True


def test_cache_key_changes_with_install():
    a = Interpreter(path="/x/bin/python", sglang_version="0.5.6", install_mtime=1.0)
    b = Interpreter(path="/x/bin/python", sglang_version="0.5.6", install_mtime=2.0)
    c = Interpreter(path="/x/bin/python", sglang_version="0.5.23", install_mtime=1.0)
    assert len({S.cache_key(a), S.cache_key(b), S.cache_key(c)}) == 3


def test_unwritable_cache_is_not_a_failure(stub_env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = S.introspect(stub_env(), cache_dir=str(blocker / "cache"))
    assert res["flags"] and res["cache_path"] is None and res["warnings"]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_cache_another_user_can_write_is_neither_read_nor_written(stub_env, tmp_path):
    """A forged entry in a cache dir another user owns would pass any flag: it is ignored."""
    interp = stub_env()
    cache = tmp_path / "cache"
    cache.mkdir()
    forged = cache / (S.cache_key(interp) + ".json")
    forged.write_text(json.dumps({"flags": {"--anything": {"option_strings": ["--anything"]}},
                                  "source": "sglang.launch_server"}))
    os.chown(str(cache), 54321, 54321)
    res = S.introspect(interp, cache_dir=str(cache))
    assert res["cached"] is False and "--anything" not in res["flags"] and "--port" in res["flags"]
    assert res["cache_path"] is None and any("owned by another user" in w for w in res["warnings"])
    assert json.loads(forged.read_text())["flags"] == {"--anything": {"option_strings": ["--anything"]}}


def test_fallback_to_server_args_when_launch_server_breaks(stub_env, tmp_path):
    interp = stub_env(launch="raise ImportError('uvloop missing')\n")
    res = S.introspect(interp, cache_dir=str(tmp_path / "c"))
    assert res["source"].endswith("ServerArgs.add_cli_args")
    assert "kimi_k2" in res["flags"]["--reasoning-parser"]["choices"]


def test_failure_carries_stderr_never_empty(stub_env, tmp_path):
    interp = stub_env(launch="raise ImportError('No module named torch')\n",
                      server_args="raise ImportError('No module named torch (server_args)')\n")
    with pytest.raises(SglangError) as err:
        S.introspect(interp, cache_dir=str(tmp_path / "c"))
    assert "No module named torch" in err.value.msg
    assert "server_args" in err.value.details["stderr"]
    assert err.value.details["rc"] == 3


def test_missing_sglang_is_refused():
    with pytest.raises(SglangError, match="has no sglang"):
        S.introspect(Interpreter(path="/usr/bin/python3"))


def test_timeout(stub_env, tmp_path):
    interp = stub_env(launch="import time\ntime.sleep(30)\n")
    with pytest.raises(SglangError, match="longer than"):
        S.introspect(interp, cache_dir=str(tmp_path / "c"), timeout=1)


def test_flag_lookup_spellings():
    flags = {"--reasoning-parser": {"option_strings": ["--reasoning-parser"], "dest": "reasoning_parser"},
             "--model-path": {"option_strings": ["--model-path", "--model"], "dest": "model_path"}}
    for name in ("reasoning-parser", "--reasoning-parser", "reasoning_parser", " --reasoning_parser"):
        assert S.flag_lookup(flags, name) is flags["--reasoning-parser"]
    assert S.flag_lookup(flags, "model") is flags["--model-path"]
    assert S.flag_lookup(flags, "--nope") is None
    assert S.normalize_flag("tp_size") == "--tp-size"


# --- the shapes of the real wheels (docs/real-sglang.md) ---------------------------------------

def _tree(tmp_path, monkeypatch, files) -> Interpreter:
    root = tmp_path / "real"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("STUB_STARTED", str(tmp_path / "started"))
    return Interpreter(path=sys.executable, sglang_installed=True, sglang_version="0.5.23",
                       sglang_location=str(root / "sglang"), install_mtime=1.0)


def test_missing_dependency_in_namespace_package_is_named(tmp_path, monkeypatch):
    # 0.5.23: sglang/srt has no __init__.py and sglang/__init__.py imports sglang.srt.utils,
    # whose common.py imports numpy. The failed import leaves the namespace package sglang.srt
    # behind without its parent; the fallback then died with KeyError('sglang'), and that was
    # all the operator saw.
    interp = _tree(tmp_path, monkeypatch, {
        "sglang/__init__.py": "from sglang.srt.utils import common\n",
        "sglang/launch_server.py": LAUNCH,
        "sglang/srt/server_args.py": SERVER_ARGS,
        "sglang/srt/utils/__init__.py": "",
        "sglang/srt/utils/common.py": "import numpy_not_here_xyz\n",
    })
    with pytest.raises(SglangError) as err:
        S.introspect(interp, cache_dir=str(tmp_path / "c"))
    msg = err.value.msg
    assert "KeyError" not in msg, msg
    assert "Python module 'numpy_not_here_xyz' is not installed in %s" % sys.prefix in msg
    assert "common.py:1" in msg
    assert err.value.details["missing_module"] == "numpy_not_here_xyz"
    assert "KeyError" not in err.value.details["stderr"]


def test_fallback_is_reported_and_never_cached(tmp_path, monkeypatch):
    # 0.5.23 without huggingface_hub: the launcher dies after importing server_args (in
    # suppress_noisy_warnings), ServerArgs.add_cli_args still works. The result says so, and is
    # not cached: once the dependency is installed the launcher's own parser is read.
    launch = "from sglang.srt.server_args import prepare_server_args\nimport hub_not_here_xyz\n" + LAUNCH
    interp = _tree(tmp_path, monkeypatch, {
        "sglang/__init__.py": "",
        "sglang/launch_server.py": launch,
        "sglang/srt/server_args.py": SERVER_ARGS,
    })
    cache = str(tmp_path / "c")
    res = S.introspect(interp, cache_dir=cache)
    assert res["source"].endswith("ServerArgs.add_cli_args") and res["cache_path"] is None
    assert len(res["warnings"]) == 1 and "'hub_not_here_xyz' is not installed" in res["warnings"][0]
    assert "kimi_k2" in res["flags"]["--reasoning-parser"]["choices"]
    assert S.introspect(interp, cache_dir=cache)["cached"] is False
    (tmp_path / "real" / "hub_not_here_xyz.py").write_text("")  # the operator installs it
    fixed = S.introspect(interp, cache_dir=cache)
    assert fixed["source"] == "sglang.launch_server" and fixed["warnings"] == [] and fixed["cached"] is False
    assert S.introspect(interp, cache_dir=cache)["cached"] is True


def test_root_cause_behind_a_lazy_import_error(tmp_path, monkeypatch):
    # 0.5.6 with PyPI's CUDA torchvision next to a CPU torch: transformers' lazy loader turns
    # "operator torchvision::nms does not exist" into "Could not import module 'AutoProcessor'".
    broken = '''
    def _load():
        try:
            raise RuntimeError("operator torchvision::nms does not exist")
        except Exception as e:
            raise ModuleNotFoundError("Could not import module 'AutoProcessor'. Are this object's "
                                      "requirements defined correctly?") from e
    _load()
    '''
    interp = _tree(tmp_path, monkeypatch, {
        "sglang/__init__.py": "",
        "sglang/launch_server.py": LAUNCH,
        "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": "import fake_transformers\n" + SERVER_ARGS,
        "fake_transformers.py": broken,
    })
    with pytest.raises(SglangError) as err:
        S.introspect(interp, cache_dir=str(tmp_path / "c"))
    msg = err.value.msg
    assert "Could not import module 'AutoProcessor'" in msg
    assert "caused by RuntimeError: operator torchvision::nms does not exist" in msg
    assert "fallback" not in msg  # the same error twice is said once
