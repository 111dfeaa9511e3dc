"""`killall_sglang` stand-in: prints what the real one would sweep; kills nothing (unsafe)."""

import os


def main() -> None:
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if "sglang::" in cmd or "sglang.launch_server" in cmd:
            print(f"would kill {pid}: {cmd}")
