"""Where the compile and JIT caches go, as SGLang 0.5.23's `sglang/srt/environ.py` decides.

0.5.23's `sglang/__init__.py` calls `redirect_third_party_caches()` at import: it `setdefault`s
TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, CUDA_CACHE_PATH, TILELANG_CACHE_DIR and
FLASHINFER_WORKSPACE_BASE under SGLANG_CACHE_DIR (default `~/.cache/sglang`); DeepGEMM's cache
is SGLANG_DG_CACHE_DIR (default `SGLANG_CACHE_DIR/deep_gemm`). 0.5.6 has no such redirect: its
torch.compile lands in inductor's default, `tempfile.gettempdir()/torchinductor_<user>`, and
DeepGEMM's in `~/.cache/deep_gemm`. The emulator follows the version it emulates
(SGLANG_EMULATOR_LOG_VERSION). Stdlib only: imported by `sglang/__init__.py`.
"""

import os
from typing import Dict


def emulated_version() -> str:
    """`0.5.23` or `0.5.6` (the default), as emulator_control.log_version() says."""
    return "0.5.23" if os.environ.get("SGLANG_EMULATOR_LOG_VERSION", "").strip() == "0.5.23" else "0.5.6"


def sglang_cache_dir() -> str:
    """SGLANG_CACHE_DIR as 0.5.23 reads it (EnvStr default `~/.cache/sglang`)."""
    return os.path.expanduser(os.environ.get("SGLANG_CACHE_DIR") or "~/.cache/sglang")


def third_party_cache_defaults() -> Dict[str, str]:
    """0.5.23's third_party_cache_defaults(), key for key."""
    base = sglang_cache_dir()
    return {
        "TRITON_CACHE_DIR": os.path.join(base, "triton"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(base, "inductor"),
        "CUDA_CACHE_PATH": os.path.join(base, "nv"),
        "TILELANG_CACHE_DIR": os.path.join(base, "tilelang"),
        # FlashInfer appends .cache/flashinfer itself: the base, not the final directory
        "FLASHINFER_WORKSPACE_BASE": base,
    }


def dg_cache_dir() -> str:
    """DeepGEMM's JIT cache (DG_JIT_CACHE_DIR) as the emulated version sets it."""
    if emulated_version() == "0.5.23":
        return os.environ.get("SGLANG_DG_CACHE_DIR") or os.path.join(sglang_cache_dir(), "deep_gemm")
    return os.environ.get("SGLANG_DG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "deep_gemm")


def redirect_third_party_caches() -> None:
    """0.5.23 only (a no-op when emulating 0.5.6): the operator's own values win (setdefault)."""
    if emulated_version() != "0.5.23":
        return
    for key, value in third_party_cache_defaults().items():
        os.environ.setdefault(key, value)
