"""Finding 2 of the third review: the missing-library search never runs, nor names, an
interpreter from another mount namespace.

A container's process runs `/proc/<its pid>/root/<dir>/python3 -m sglang.launch_server`. From the
host, that path opens the CONTAINER's file (the magic link leads into its mount namespace) while
its resolved string names a root-owned host file that passes every ownership check. The old
search took it from the command line, ran it as root (`python3 -c "import psutil, requests"`) and
then recommended it. Here the "container" is `unshare --mount` with a private bind mount over a
directory, and its python3 writes a marker when it is run; a root-owned host link to the same
/proc path is offered as the module's own `python` hint too.
"""
from __future__ import annotations

import os

IN_NAMESPACE = r"""
import json, os, subprocess, sys, time
from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch
base = sys.argv[1]
target, container, marker = base + "/target", base + "/container", base + "/ran"
code = ('mount --bind "$1" "$2" && exec -a "/proc/$$/root$2/python3" "$3" -c "import time; time.sleep(120)" '
        '-m sglang.launch_server')
proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "bash", "-c", code, "bash",
                         container, target, sys.executable], stdin=subprocess.DEVNULL)
path = "/proc/%d/root%s/python3" % (proc.pid, target)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    with open("/proc/%d/cmdline" % proc.pid, "rb") as fh:
        if fh.read().startswith(path.encode()):
            break
    time.sleep(0.05)
link = base + "/hint/python3"
os.makedirs(base + "/hint")
os.symlink(path, link)
params = {"python": link, "state_dir": base + "/state", "search_paths": [base + "/no-installs/*/"]}
found = _depsearch.report(["no_such_library_llmops"], params)
print(json.dumps({"path": path, "link": link, "report": found, "ran": os.path.exists(marker),
                  "running": _depsearch.running_interpreters(), "why": _deps.untrusted_reason(path),
                  "why_link": _deps.untrusted_reason(link),
                  "container_sees": open("/proc/%d/root%s/python3" % (proc.pid, target)).read()}))
proc.kill()
"""


def _script(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o755)


def test_an_interpreter_in_another_mount_namespace_is_never_run_or_named(tmp_path, pidns):
    base = str(tmp_path)
    os.chmod(base, 0o755)
    for name in ("target", "container", "state"):
        os.mkdir(os.path.join(base, name), 0o755)
    # the host's file at the resolved path: root's, harmless, no libraries
    _script(os.path.join(base, "target", "python3"), "#!/bin/sh\nexit 1\n")
    # the container's file behind /proc/<pid>/root: it would "have" every library
    _script(os.path.join(base, "container", "python3"), "#!/bin/sh\necho ran >> %s/ran\nexit 0\n" % base)
    ran = pidns(IN_NAMESPACE, base)
    res = ran.data
    assert ran.rc == 0 and res, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "echo ran" in res["container_sees"]  # the path really opens the container's file
    assert res["ran"] is False, "host root ran the container's python3: %s" % res["report"]
    assert not os.path.exists(os.path.join(base, "ran"))
    report = res["report"]
    assert report["interpreter_with_libraries"] is None, report
    assert res["path"] not in report["msg"] and res["link"] not in report["msg"], report["msg"]
    assert res["path"] not in res["running"], res["running"]
    assert res["why"].startswith("a path through /proc"), res["why"]
    assert "opens another file than" in res["why_link"], res["why_link"]
