"""A patched SGLang, or new weights at the same path, is a changed server (restart_extraction.yml
against the emulator, from a private copy of the emulator's venv and of a model directory).

The incident began with a patch to a file of the sglang package the server imports, then a
restart that had to pick it up. Without a code identity the plan said changed=0 and the old,
unpatched server kept running; so did new weights copied over the old ones.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from typing import Optional

import pytest

from helpers import play_runs
from helpers.fixtures import ROOT, emulator_python_path

SHARDS = 2


def _copy_of_venv(venv: str, dest: str) -> str:
    """Another venv with the emulator's sglang: a fresh venv (no pip), the packages copied."""
    subprocess.run([os.path.join(venv, "bin", "python"), "-m", "venv", "--without-pip", dest], check=True)
    src = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
    dst = glob.glob(os.path.join(dest, "lib", "python3*", "site-packages"))[0]
    for entry in os.listdir(src):
        if entry.startswith(("sglang", "setproctitle")):
            shutil.copytree(os.path.join(src, entry), os.path.join(dst, entry), symlinks=True)
    return dest


@pytest.fixture
def own_host(one_host, tmp_path):
    """(inventory, host vars, the private venv's sglang package, the model dir)."""
    inv, hv = one_host
    venv = _copy_of_venv(os.path.dirname(os.path.dirname(emulator_python_path())), str(tmp_path / "venv"))
    package = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "sglang"))[0]
    model = str(tmp_path / "model")
    shutil.copytree(os.path.join(ROOT, "inventory", "files", "demo-model"), model)
    for i in range(1, SHARDS + 1):
        with open(os.path.join(model, "model-%05d-of-%05d.safetensors" % (i, SHARDS)), "wb") as fh:
            fh.write(b"\0" * 4096)
    hv = dict(hv, sglang_venv=venv, sglang_model_path=model)
    play_runs.write_inventory(inv, {"h1": hv})
    return inv, hv, package, model


def _record(hv: dict) -> dict:
    with open(os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])) as fh:
        return json.load(fh)


def _changed(out: str) -> int:
    found = re.search(r"^h1\s+: ok=\d+\s+changed=(\d+)", out, re.M)
    assert found, out[-3000:]
    return int(found.group(1))


def _run(inv: str, *extra: str) -> str:
    done = play_runs.play(inv, "restart_extraction.yml", *extra)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return out


def _restarted(inv: str, hv: dict, reason: str, said: Optional[str] = None) -> dict:
    """The server is replaced and its plan says why; with `said`, a --check --diff run first
    names the change (`said`) and its files in the diff, and touches nothing."""
    before = _record(hv)
    if said is not None:
        planned = _run(inv, "--check", "--diff")
        assert "#   modified: " in planned and said in planned and "plan: %s" % reason in planned, planned[-4000:]
        assert _record(hv)["pid"] == before["pid"]
    out = _run(inv)
    assert "plan: %s; changes: " % reason in out and _changed(out) > 0, out[-4000:]
    after = _record(hv)
    assert after["pid"] != before["pid"] and after["launch_id"] != before["launch_id"]
    return after


def test_a_patch_an_added_file_and_a_replaced_shard_each_restart_the_server(own_host):
    inv, hv, package, model = own_host
    _run(inv)
    first = _record(hv)

    # an unchanged tree: nothing to do
    same = _run(inv)
    assert _changed(same) == 0 and _record(hv)["pid"] == first["pid"], same[-3000:]

    # a patched file of the package the server imports
    with open(os.path.join(package, "srt", "model_executor", "cuda_graph_runner.py"), "a") as fh:
        fh.write("\n# patched: dump hidden states\n")
    patched = _restarted(inv, hv, "code_changed", "sglang code changed since pid %s started: "
                         "srt/model_executor/cuda_graph_runner.py" % first["pid"])

    # an added file
    with open(os.path.join(package, "srt", "hs_dump_hook.py"), "w") as fh:
        fh.write("HOOK = True\n")
    added = _restarted(inv, hv, "code_changed")
    assert added["code_identity"]["files"] == patched["code_identity"]["files"] + 1

    # a weight shard replaced by a new checkpoint's (same name, same size, written later)
    shard = os.path.join(model, "model-00002-of-00002.safetensors")
    with open(shard + ".tmp", "wb") as fh:
        fh.write(b"\1" * 4096)
    st = os.stat(shard)
    os.utime(shard + ".tmp", ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))
    os.rename(shard + ".tmp", shard)
    replaced = _restarted(inv, hv, "model_changed")
    assert replaced["model_identity"]["files"]["model-00002-of-00002.safetensors"][1] == st.st_mtime_ns + 10 ** 9

    # converged again
    again = _run(inv)
    assert _changed(again) == 0 and _record(hv)["pid"] == replaced["pid"] != added["pid"], again[-3000:]
    assert first["code_identity"]["package"] == os.path.realpath(package)
    assert first["model_identity"]["files"]["model-00002-of-00002.safetensors"][0] == 4096


def test_a_record_from_before_identities_is_unknown_said_once_and_no_change(own_host):
    inv, hv, package, _model = own_host
    _run(inv)
    path = os.path.join(hv["sglang_state_dir"], "%s.json" % hv["sglang_name"])
    old = {k: v for k, v in _record(hv).items() if k not in ("code_identity", "model_identity")}
    with open(path, "w") as fh:
        json.dump(old, fh)
    with open(os.path.join(package, "srt", "hs_dump_hook.py"), "w") as fh:
        fh.write("HOOK = True\n")
    out = _run(inv)
    assert _changed(out) == 0 and _record(hv)["pid"] == old["pid"], out[-3000:]
    said = "was launched before its launch record kept code and model identity"
    assert out.count(said) == 1, out[-4000:]
