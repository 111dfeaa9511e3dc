"""Fake nvidia-smi for `GPU_DRYRUN=fake` (see pynvml.py beside it): answers the two CSV
queries _gpus.py sends, from the same fake GPU state."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pynvml  # noqa: E402  (the fake one beside this file)

args = sys.argv[1:]
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as exc:
    print("NVIDIA-SMI has failed: %s" % exc)
    sys.exit(9)
count = pynvml.nvmlDeviceGetCount()
if any(a.startswith("--query-gpu=") for a in args):
    for i in range(count):
        mem = pynvml.nvmlDeviceGetMemoryInfo(i, version=pynvml.nvmlMemory_v2)  # like nvidia-smi: no reserved
        print("%d, %s, %s, %d, %d" % (i, pynvml.nvmlDeviceGetUUID(i), pynvml.nvmlDeviceGetName(i),
                                      mem.used // 1048576, mem.total // 1048576))
elif any(a.startswith("--query-compute-apps=") for a in args):
    for i in range(count):
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(i):
            print("%d, %d, %s" % (p.pid, p.usedGpuMemory // 1048576, pynvml.nvmlDeviceGetUUID(i)))
elif "-L" in args:
    for i in range(count):
        print("GPU %d: %s (UUID: %s)" % (i, pynvml.nvmlDeviceGetName(i), pynvml.nvmlDeviceGetUUID(i)))
else:
    print("fake nvidia-smi: %d GPUs" % count)
