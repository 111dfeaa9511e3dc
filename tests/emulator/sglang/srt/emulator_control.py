"""Environment knobs that steer the emulator (docs/conventions.md, "Emulator control")."""

import os
import secrets
import time
from typing import List, Set

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
