"""Another user's FIFO hung root's probe and missing-library search for ever.

`sglang_probe`'s discovery (`_interpreter.discover`, over globs such as /home/*/*/) and the
missing-library search (`_depsearch.interpreter_with`) read `<site>/sglang-*.dist-info/METADATA`
of any user's venv with a blocking open(): a FIFO there blocked the root module with no timeout.
The search also read every `<state_dir>/*.json` with a plain open(). The interpreter probe's
script (run in the candidate interpreter) read METADATA and entry_points.txt the same way.

Now every such file is opened O_RDONLY|O_NONBLOCK|O_NOFOLLOW, must be a regular file on its
descriptor and is read up to a cap; records go through `_record.read_json`.

Each root call runs in a child process with a timeout: on the old code it never returned.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from helpers.fixtures import COLLECTIONS
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _interpreter

SITE = "venv/lib/python3.11/site-packages"
DIST = SITE + "/sglang-0.5.0.dist-info"
PRE = "from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch, _interpreter\n"
HANG_S = 20


@pytest.fixture
def fifo_home(throwaway_user, shared_tmp) -> str:
    """The attacker's home: a venv-looking tree whose sglang METADATA (and entry_points.txt) is a
    FIFO nobody writes to, and a state dir whose record is a FIFO."""
    home = os.path.join(shared_tmp, "home")
    os.mkdir(home, 0o755)
    os.chown(home, throwaway_user.uid, throwaway_user.gid)
    throwaway_user.run(["sh", "-c", "cd %s && mkdir -p %s venv/bin state && ln -s %s venv/bin/python && "
                        "mkfifo %s/METADATA %s/entry_points.txt state/inst.json"
                        % (shlex.quote(home), DIST, shlex.quote(sys.executable), DIST, DIST)])
    return home


def _root(code: str, **env: str) -> subprocess.CompletedProcess:
    run_env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    run_env.update(env)
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S,
                              env=run_env, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the root process still blocks after %d s on another user's FIFO" % HANG_S)


def test_discovery_skips_a_fifo_metadata(fifo_home):
    out = _root(PRE + "import json; print(json.dumps(_interpreter.discover([%r])))" % (fifo_home + "/*/"))
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert [f["dist_info"] for f in found] == [os.path.join(fifo_home, DIST)]
    assert found[0]["sglang_version"] == "0.5.0"  # from the directory's name: the FIFO is never opened


def test_the_missing_library_search_skips_a_fifo_record(fifo_home):
    out = _root(PRE + "import json; print(json.dumps(_depsearch._record_interpreters([%r])))"
                % os.path.join(fifo_home, "state"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_missing_library_search_skips_a_fifo_metadata(fifo_home):
    out = _root(PRE + "import json; print(json.dumps(_depsearch.interpreter_with(search_paths=[%r])))"
                % (fifo_home + "/*/"))
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found is None or not found.startswith(fifo_home)  # the attacker's venv is never named


def test_the_interpreter_probe_script_skips_a_fifo_metadata(fifo_home):
    out = _root(_interpreter._PROBE_SCRIPT, PYTHONPATH=os.path.join(fifo_home, SITE))
    assert out.returncode == 0, out.stderr
    assert "is not a regular file" in out.stdout
