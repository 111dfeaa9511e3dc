"""Manual check on a GPU host: the emulator loads real safetensors shards into GPU memory.

Writes a checkpoint (N shards of M MiB, bf16) with safetensors.torch, launches the emulator from
this source tree with SGLANG_EMULATOR_LOAD_WEIGHTS=1 and GPU mode, cold (the shards' pages
evicted with posix_fadvise DONTNEED) then warm, and prints the load phase of each run.
Usage: python3 gpu_load_check.py DIR [SHARDS] [MIB_PER_SHARD] [TP]
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def write_checkpoint(folder: Path, shards: int, mib: int) -> int:
    import torch
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    weight_map = {}
    for name in names:
        tensors = {f"{name}.w{j}": torch.empty(mib * 1024 * 1024 // 2 // 4, dtype=torch.bfloat16) for j in range(4)}
        save_file(tensors, str(folder / name))
        weight_map.update({k: name for k in tensors})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return sum((folder / n).stat().st_size for n in names)


def evict(folder: Path) -> None:
    for path in folder.glob("*.safetensors"):
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def launch(folder: Path, tp: int, log: Path) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(HERE), SGLANG_EMULATOR_LOAD_WEIGHTS="1",
               SGLANG_EMULATOR_GPU_MIB="64", SGLANG_EMULATOR_PHASE_SECONDS="0.1", no_proxy="*")
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", str(folder),
                                 "--port", str(port), "--tp-size", str(tp), "--log-level", "debug"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
    deadline = time.time() + 300
    try:
        while time.time() < deadline and proc.poll() is None:
            if b"fired up and ready to roll" in log.read_bytes():
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"],
                                     capture_output=True, text=True, check=False).stdout
                return log.read_bytes().decode("utf-8", "replace") + "\n" + out
            time.sleep(0.2)
        return "NOT READY rc=%s\n" % proc.poll() + log.read_bytes().decode("utf-8", "replace")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def main() -> None:
    folder = Path(sys.argv[1])
    shards, mib, tp = (int(a) for a in (sys.argv[2:] + ["4", "512", "2"])[:3]) if len(sys.argv) > 2 else (4, 512, 2)
    if (folder / "config.json").exists():
        total = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    else:
        total = write_checkpoint(folder, shards, mib)
    print(f"checkpoint: {shards} shards, {total / 2**30:.2f} GiB")
    for label in ("cold", "warm"):
        if label == "cold":
            evict(folder)
        text = launch(folder, tp, folder.parent / f"{label}.log")
        print(f"===== {label}")
        for line in re.split(r"[\r\n]", text):
            if re.search(r"Load weight|Loading safetensors|Multi-thread loading|Emulator weight load|"
                         r"Capture cuda graph|ready to roll|NOT READY|Error|Traceback|MiB|pid", line):
                print(line)


if __name__ == "__main__":
    main()
