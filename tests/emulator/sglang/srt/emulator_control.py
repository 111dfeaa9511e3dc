"""Environment knobs that steer the emulator (docs/conventions.md, "Emulator control")."""

import os
import secrets
import time
from typing import List, Optional, Set

FAULT_NAMES = (
    "import_error", "oom", "scheduler_death", "hang", "escape", "ignore_sigterm", "leak_shm",
    "crash_after",
)


def faults() -> Set[str]:
    raw = os.environ.get("SGLANG_EMULATOR_FAULT", "")
    return {f.strip() for f in raw.split(",") if f.strip()}


def has_fault(name: str) -> bool:
    return name in faults()


def _float_env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def phase_seconds() -> float:
    return _float_env("SGLANG_EMULATOR_PHASE_SECONDS", 0.5)


def phase_override(name: str) -> Optional[float]:
    """`SGLANG_EMULATOR_<NAME>_SECONDS` when set (INIT, SHARD, MEMORY_POOL, GRAPH_BS), else None:
    the caller falls back to its share of SGLANG_EMULATOR_PHASE_SECONDS."""
    raw = os.environ.get(f"SGLANG_EMULATOR_{name}_SECONDS", "").strip()
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:
        return None


def phase_time(name: str, share: float = 1.0) -> float:
    """Seconds for one step of a phase: its override, else `share` of the phase time."""
    override = phase_override(name)
    return phase_seconds() * share if override is None else override


def default_shards() -> int:
    """Weight files to emulate when --model-path is not a local checkpoint directory."""
    return max(1, int(_float_env("SGLANG_EMULATOR_SHARDS", 4)))


def load_weights_enabled() -> bool:
    """`1`: really read the weight files of --model-path (opt in; off by default)."""
    return os.environ.get("SGLANG_EMULATOR_LOAD_WEIGHTS", "").strip().lower() in ("1", "true", "yes")


def log_version() -> str:
    """Wording of the load and CUDA graph lines: `0.5.6` (default) or `0.5.23`."""
    return "0.5.23" if os.environ.get("SGLANG_EMULATOR_LOG_VERSION", "").strip() == "0.5.23" else "0.5.6"


def crash_after_seconds() -> float:
    return _float_env("SGLANG_EMULATOR_CRASH_AFTER", 5.0)


def benign_warnings() -> bool:
    """Print, at every start, the harmless warnings a real 0.5.23 server prints on a host that
    lacks optional dependencies (their text contains fatal-looking words). `0` turns them off."""
    return os.environ.get("SGLANG_EMULATOR_BENIGN_WARNINGS", "1").strip().lower() not in ("0", "false", "no")


def gpu_mib() -> int:
    return int(_float_env("SGLANG_EMULATOR_GPU_MIB", 0))


def phase_sleep(factor: float = 1.0) -> None:
    time.sleep(max(0.0, phase_seconds() * factor))


def phase_sleep_for(name: str) -> None:
    time.sleep(phase_time(name))


_held_shm: List[object] = []


def leak_shm_files(kind: str) -> None:
    """Create /dev/shm files like 0.5.23 (sgl_shm_<kind>_<pid>_<rand>) and 0.5.6 (psm_<hex>).

    They stay open while the process lives (so "held by a live process" is observable) and are
    never removed: that is the leak.
    """
    if not has_fault("leak_shm") or not os.path.isdir("/dev/shm"):
        return
    pid = os.getpid()
    for name in (f"sgl_shm_{kind}_{pid}_{secrets.token_hex(4)}", f"psm_{secrets.token_hex(4)}"):
        fh = open(os.path.join("/dev/shm", name), "wb")
        fh.write(b"\0" * 4096)
        fh.flush()
        _held_shm.append(fh)
