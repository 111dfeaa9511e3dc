#!/usr/bin/env bash
# `make build`: build the collection artifact into build/dist/ and check what went into it.
# galaxy.yml's build_ignore must keep the virtual environments, the collections/ link back to
# the repository root (made by make), test output, build output, caches and VCS data out of the
# tarball; the dependency declarations for ansible-builder must be in it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
BIN="$ROOT/.venv/bin"
DIST="$ROOT/build/dist"
[ -x "$BIN/ansible-galaxy" ] || { echo "build: $BIN/ansible-galaxy missing; run 'make venv'" >&2; exit 2; }

version=$("$BIN/python" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')
tarball="$DIST/llmops-sglang-$version.tar.gz"
rm -f "$tarball"
mkdir -p "$DIST"
# No ANSIBLE_CONFIG games needed: `collection build` reads galaxy.yml only.
"$BIN/ansible-galaxy" collection build --force --output-path "$DIST" "$ROOT"
[ -f "$tarball" ] || { echo "build: expected $tarball" >&2; exit 1; }

"$BIN/python" - "$tarball" <<'EOF'
import json
import re
import sys
import tarfile

path = sys.argv[1]
with tarfile.open(path) as tar:
    members = tar.getmembers()
    names = [m.name for m in members]
    manifest = json.load(tar.extractfile("MANIFEST.json"))
    files = json.load(tar.extractfile("FILES.json"))

problems = []
# meta/execution-environment.yml and the files it names: what ansible-builder reads
required = ["MANIFEST.json", "FILES.json", "meta/runtime.yml", "plugins/module_utils", "COPYING",
            "README.md", "meta/execution-environment.yml", "requirements.txt", "bindep.txt"]
for name in required:
    if name not in names:
        problems.append("missing: %s" % name)
modules = [n for n in names if re.match(r"plugins/modules/[^/]+\.py$", n)]
if not modules:
    problems.append("missing: plugins/modules/*.py (no module in the artifact)")

forbidden = re.compile(
    r"(^|/)(\.venv[^/]*|\.git|__pycache__|\.pytest_cache|\.cache|\.tox|\.molecule)(/|$)"
    r"|^(collections|build|tests/output|\.ci)(/|$)"
    r"|\.pyc$|\.tar\.gz$")
for name in names:
    if forbidden.search(name):
        problems.append("must not be in the artifact: %s" % name)
for m in members:
    if m.issym() or m.islnk():
        problems.append("link in the artifact: %s -> %s" % (m.name, m.linkname))

info = manifest["collection_info"]
if (info["namespace"], info["name"]) != ("llmops", "sglang"):
    problems.append("MANIFEST.json names %s.%s" % (info["namespace"], info["name"]))

if problems:
    print("build: %s is not right:" % path)
    for p in problems:
        print("  " + p)
    sys.exit(1)
size = sum(m.size for m in members if m.isfile())
print("build: %s ok: %d files (%d modules), %d KiB unpacked"
      % (path, len(files["files"]), len(modules), size // 1024))
EOF
