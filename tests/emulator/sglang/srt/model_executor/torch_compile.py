"""`--enable-torch-compile` for real: a small model compiled with torch.compile in SGLang's mode
while the CUDA graphs are captured, its cache where the emulated version puts it.

SGLang's CudaGraphRunner (0.5.6 `cuda_graph_runner.py`, 0.5.23 `runner/base_runner.py` and
`compilation/torch_compile_decoration.py`) calls `set_torch_compile_config()` and, for every
captured batch size up to `--torch-compile-max-bs`, runs `torch.compile(model.forward,
mode=SGLANG_TORCH_COMPILE_MODE or "max-autotune-no-cudagraphs", dynamic=False)`: one compile per
batch size, each autotuning its matmuls. The cache is inductor's: TORCHINDUCTOR_CACHE_DIR when
set (0.5.23 sets it under SGLANG_CACHE_DIR at import, see `sglang/srt/environ.py`), else
`tempfile.gettempdir()/torchinductor_<user>` - for a server launched with a private TMPDIR, a
directory that goes when the TMPDIR goes.

The model: SGLANG_EMULATOR_COMPILE_BLOCKS (default 2) residual MLP blocks of width
SGLANG_EMULATOR_COMPILE_HIDDEN (default 1024), bf16 on the rank's GPU in GPU mode, float32 on
the CPU otherwise. torch is imported only when the flag is given; without torch the flag is
accepted and a warning says nothing was compiled.
"""

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

logger = logging.getLogger(__name__)

DEFAULT_MODE = "max-autotune-no-cudagraphs"


def _int_env(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, "") or default))
    except ValueError:
        return default


@dataclass
class Compiled:
    """The compiled forward and what compiling it took."""

    forward: Callable[[Any], Any]
    device: str
    dtype: Any
    hidden: int
    mode: str
    max_bs: int
    sizes: List[int] = field(default_factory=list)
    seconds: float = 0.0
    per_bs: Dict[int, float] = field(default_factory=dict)

    def run(self, bs: int) -> None:
        """One forward at batch size `bs` (the first one at a size compiles it)."""
        import torch

        if bs > self.max_bs:
            return
        tic = time.perf_counter()
        x = torch.randn(bs, self.hidden, device=self.device, dtype=self.dtype)
        self.forward(x)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        took = time.perf_counter() - tic
        self.sizes.append(bs)
        self.per_bs[bs] = round(took, 2)
        self.seconds += took


def set_torch_compile_config() -> None:
    """SGLang's set_torch_compile_config() (both versions)."""
    import torch._dynamo.config
    import torch._inductor.config

    torch._inductor.config.coordinate_descent_tuning = True
    torch._inductor.config.triton.unique_kernel_names = True
    torch._inductor.config.fx_graph_cache = True
    torch._dynamo.config.accumulated_cache_size_limit = 1024
    if hasattr(torch._dynamo.config, "cache_size_limit"):
        torch._dynamo.config.cache_size_limit = 1024


def _model(torch: Any, blocks: int, hidden: int) -> Any:
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(hidden, 4 * hidden, bias=False)
            self.down = nn.Linear(4 * hidden, hidden, bias=False)

        def forward(self, x: Any) -> Any:
            h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
            return x + self.down(torch.nn.functional.silu(self.up(h)))

    class Toy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _block in range(blocks)])

        def forward(self, x: Any) -> Any:
            for block in self.blocks:
                x = block(x)
            return x

    return Toy()


def prepare(enabled: bool, max_bs: int, gpu_device: Optional[int]) -> Optional[Compiled]:
    """The compiled forward to run during capture, or None (flag off, or no torch)."""
    if not enabled:
        return None
    try:
        import torch
    except ImportError:
        logger.warning("--enable-torch-compile: torch is not installed; nothing is compiled.")
        return None
    set_torch_compile_config()
    device = "cuda:%d" % gpu_device if gpu_device is not None else "cpu"
    dtype = torch.bfloat16 if gpu_device is not None else torch.float32
    hidden = _int_env("SGLANG_EMULATOR_COMPILE_HIDDEN", 1024)
    model = _model(torch, _int_env("SGLANG_EMULATOR_COMPILE_BLOCKS", 2), hidden).to(device=device, dtype=dtype)
    mode = os.environ.get("SGLANG_TORCH_COMPILE_MODE", DEFAULT_MODE)
    forward = torch.compile(torch.no_grad()(model.forward), mode=mode, dynamic=False)
    return Compiled(forward=forward, device=device, dtype=dtype, hidden=hidden, mode=mode, max_bs=max_bs)


def cache_dir() -> str:
    """Where inductor keeps its cache in this process (its own rule: TORCHINDUCTOR_CACHE_DIR,
    else tempfile.gettempdir()/torchinductor_<user>)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir
    except ImportError:  # older torch
        from torch._inductor.utils import cache_dir as inductor_cache_dir  # type: ignore
    return inductor_cache_dir()


def summary(compiled: Compiled) -> Dict[str, Any]:
    """What the log line reports: sizes, seconds, the cache and FX graph cache hits/misses."""
    from torch._dynamo.utils import counters

    inductor = counters.get("inductor", {})
    return {"mode": compiled.mode, "device": compiled.device, "sizes": sorted(compiled.sizes),
            "seconds": round(compiled.seconds, 2), "per_bs": dict(compiled.per_bs), "cache_dir": cache_dir(),
            "fxgraph_cache_hit": int(inductor.get("fxgraph_cache_hit", 0)),
            "fxgraph_cache_miss": int(inductor.get("fxgraph_cache_miss", 0))}


def log_summary(compiled: Optional[Compiled]) -> None:
    if compiled is None:
        return
    s = summary(compiled)
    logger.info("Emulator torch.compile: mode=%s, device=%s, bs=%s, elapsed=%.2f s, cache_dir=%s, "
                "fxgraph_cache_hit=%d, fxgraph_cache_miss=%d", s["mode"], s["device"], s["sizes"], s["seconds"],
                s["cache_dir"], s["fxgraph_cache_hit"], s["fxgraph_cache_miss"])
