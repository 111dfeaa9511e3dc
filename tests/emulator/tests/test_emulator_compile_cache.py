"""Where the compile caches go, as each emulated version decides (0.5.23 redirects them under
SGLANG_CACHE_DIR at import, 0.5.6 does not), and --enable-torch-compile without torch."""

import json
import os
import subprocess
import textwrap

import pytest

VARS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "TILELANG_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE")
SHOW = "import json, os, sglang; print(json.dumps({k: os.environ.get(k) for k in %r}))" % (VARS,)


def env_after_import(python, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in VARS and not k.startswith("SGLANG_")}
    env.update(HOME=str(tmp_path), **extra)
    out = subprocess.run([python, "-c", SHOW], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_0523_redirects_the_third_party_caches_under_sglang_cache_dir(emulator_python, tmp_path):
    got = env_after_import(emulator_python, tmp_path, SGLANG_EMULATOR_LOG_VERSION="0.5.23")
    base = os.path.join(str(tmp_path), ".cache", "sglang")
    assert got == {"TRITON_CACHE_DIR": base + "/triton", "TORCHINDUCTOR_CACHE_DIR": base + "/inductor",
                   "CUDA_CACHE_PATH": base + "/nv", "TILELANG_CACHE_DIR": base + "/tilelang",
                   "FLASHINFER_WORKSPACE_BASE": base}
    # SGLANG_CACHE_DIR moves them all; a value already set wins (setdefault)
    got = env_after_import(emulator_python, tmp_path, SGLANG_EMULATOR_LOG_VERSION="0.5.23",
                           SGLANG_CACHE_DIR="/srv/c", TRITON_CACHE_DIR="/mine")
    assert got["TORCHINDUCTOR_CACHE_DIR"] == "/srv/c/inductor" and got["TRITON_CACHE_DIR"] == "/mine"


def test_056_leaves_them_to_the_libraries_defaults(emulator_python, tmp_path):
    got = env_after_import(emulator_python, tmp_path)
    assert got == {k: None for k in VARS}  # inductor: tempfile.gettempdir()/torchinductor_<user>


@pytest.mark.parametrize("version,expected", [("0.5.23", "{home}/.cache/sglang/deep_gemm"),
                                              ("0.5.6", "{home}/.cache/deep_gemm")])
def test_deep_gemm_cache_dir_per_version(emulator_python, tmp_path, version, expected):
    code = "from sglang.srt import environ; print(environ.dg_cache_dir())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.update(HOME=str(tmp_path), SGLANG_EMULATOR_LOG_VERSION=version)
    out = subprocess.run([emulator_python, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         check=True)
    assert out.stdout.strip() == expected.format(home=tmp_path)


def test_torch_compile_flag_without_torch_compiles_nothing_and_says_so(emulator_python):
    code = textwrap.dedent("""
        import logging, sys
        sys.modules["torch"] = None  # torch not installed
        logging.basicConfig(level=logging.INFO)
        from sglang.srt.model_executor import torch_compile
        from sglang.srt.server_args import prepare_server_args
        args = prepare_server_args(["--model-path", "m", "--enable-torch-compile", "--torch-compile-max-bs", "8"])
        assert args.enable_torch_compile and args.torch_compile_max_bs == 8
        assert torch_compile.prepare(False, 8, None) is None
        assert torch_compile.prepare(True, 8, None) is None
        print("ok")
    """)
    out = subprocess.run([emulator_python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert "--enable-torch-compile: torch is not installed; nothing is compiled." in out.stderr
