"""Install the emulator (tests/emulator) into the running interpreter's environment as the
distribution `sglang`, without pip or setuptools: copy the package, write a dist-info and the
console scripts. run.sh's fallback for GPU hosts where `pip install --no-build-isolation
./tests/emulator` cannot build offline (e.g. a venv without setuptools / bdist_wheel).

    <venv>/bin/python tests/gpu/install_emulator.py tests/emulator
"""
import os
import re
import shutil
import sys
import sysconfig


def main(src: str) -> int:
    with open(os.path.join(src, "pyproject.toml")) as fh:
        text = fh.read()
    version = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)
    scripts = dict(re.findall(r'^([A-Za-z0-9_.-]+)\s*=\s*"([\w.]+:\w+)"', text.split("[project.scripts]", 1)[1], re.M))
    purelib = sysconfig.get_paths()["purelib"]
    bindir = sysconfig.get_paths()["scripts"]
    dest = os.path.join(purelib, "sglang")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(os.path.join(src, "sglang"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    info = os.path.join(purelib, "sglang-%s.dist-info" % version)
    shutil.rmtree(info, ignore_errors=True)
    os.makedirs(info)
    files = {
        "METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: %s\nRequires-Dist: setproctitle\n" % version,
        "INSTALLER": "llmops-gpuval\n",
        "top_level.txt": "sglang\n",
        "entry_points.txt": "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(scripts.items())),
        "RECORD": "",
    }
    for name, body in files.items():
        with open(os.path.join(info, name), "w") as fh:
            fh.write(body)
    for name, target in scripts.items():
        mod, func = target.split(":")
        path = os.path.join(bindir, name)
        with open(path, "w") as fh:
            fh.write("#!%s\nimport sys\nfrom %s import %s\nsys.exit(%s())\n" % (sys.executable, mod, func, func))
        os.chmod(path, 0o755)
    print("installed sglang %s (emulator) into %s, scripts %s" % (version, purelib, sorted(scripts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "tests/emulator"))
