"""A "foreign" CUDA process for the GPU validation: not started by ansible, not an sglang
process, holding memory on one GPU until killed (or until --lifetime seconds pass, so a
crashed validation never leaves it behind for long).

    python3 tests/gpu/foreign_cuda.py --gpu 1 --mib 2048 --ready /tmp/x.ready

Writes "<pid>\n" to --ready once the memory is allocated and touched. With GPUVAL_FAKE_TOKEN
set (GPU_DRYRUN=fake), it allocates nothing: the fake NVML lists it from its environment.
"""
import argparse
import os
import signal
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, default=1)
    ap.add_argument("--mib", type=int, default=2048)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--lifetime", type=float, default=480.0)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    held = None
    if not os.environ.get("GPUVAL_FAKE_TOKEN"):
        import torch

        if not torch.cuda.is_available():
            print("foreign_cuda: torch sees no CUDA device", file=sys.stderr)
            return 2
        torch.cuda.set_device(args.gpu)
        held = torch.ones(args.mib * 1024 * 1024, dtype=torch.uint8, device="cuda:%d" % args.gpu)
        torch.cuda.synchronize()
        print("foreign_cuda: pid %d holds %d MiB on cuda:%d (%s)"
              % (os.getpid(), args.mib, args.gpu, torch.cuda.get_device_name(args.gpu)), flush=True)
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as fh:
        fh.write("%d\n" % os.getpid())
    os.replace(tmp, args.ready)
    deadline = time.monotonic() + args.lifetime
    while time.monotonic() < deadline:
        time.sleep(0.5)
    del held
    return 0


if __name__ == "__main__":
    sys.exit(main())
