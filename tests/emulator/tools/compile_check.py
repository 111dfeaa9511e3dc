"""Manual check on a GPU host: the emulator's `--enable-torch-compile` compile, cold and warm,
with the cache where each emulated version puts it.

Each run is a fresh process with a fresh private TMPDIR (as every launch through the collection
gets), HOME pointed at a scratch directory, and SGLANG_EMULATOR_LOG_VERSION set: it imports the
emulator's `sglang` (0.5.23 redirects the caches under SGLANG_CACHE_DIR at import), then compiles
the toy model for the batch sizes up to MAX_BS exactly as the graph-capture phase does. Runs per
version: cold (empty cache), again after the TMPDIR was removed (0.5.6: inductor's default cache
was in it), again with it kept. Prints one JSON line per run.
Usage: python3 compile_check.py WORKDIR [MAX_BS] [VERSIONS]   (VERSIONS: 0.5.6,0.5.23)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys
import sglang  # the 0.5.23 emulation redirects the caches here
from sglang.srt.model_executor import torch_compile
import torch
c = torch_compile.prepare(True, int(sys.argv[1]), 0 if torch.cuda.is_available() else None)
for bs in sorted((b for b in (1, 2, 4, 8, 12, 16, 24, 32) if b <= int(sys.argv[1])), reverse=True):
    c.run(bs)
print(json.dumps(torch_compile.summary(c)))
"""


def run(version: str, tmpdir: Path, home: Path, max_bs: int) -> dict:
    tmpdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR", "TRITON_CACHE", "SGLANG_"))}
    env.update(TMPDIR=str(tmpdir), HOME=str(home), SGLANG_EMULATOR_LOG_VERSION=version,
               PYTHONPATH=str(HERE) + os.pathsep + env.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", CHILD, str(max_bs)], env=env, capture_output=True, text=True,
                         timeout=900, check=False)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    work = Path(sys.argv[1])
    max_bs = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    versions = (sys.argv[3] if len(sys.argv) > 3 else "0.5.6,0.5.23").split(",")
    for version in versions:
        base = Path(tempfile.mkdtemp(prefix="cc-%s-" % version, dir=work))
        home = base / "home"
        home.mkdir()
        for label, fresh_tmp in (("cold", True), ("tmpdir_removed", True), ("tmpdir_kept", False)):
            tmp = base / "tmp"
            if fresh_tmp and tmp.exists():
                shutil.rmtree(tmp)
            res = run(version, tmp, home, max_bs)
            print(json.dumps({"version": version, "run": label, **res}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
