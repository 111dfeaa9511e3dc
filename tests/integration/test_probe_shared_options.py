"""sglang_probe with the shared option specs: `python` is a path (a bare name is still looked up in
PATH by the probe), `introspect_timeout` a float, as in every module that has them."""
from __future__ import annotations

import os
import shutil

from helpers.fixtures import run_module


def _probe(args, tmp_path):
    base = {"state_dir": str(tmp_path / "state"), "gpu_backend": "none", "shm_dir": str(tmp_path / "shm"),
            "search_paths": [str(tmp_path / "nowhere")]}
    base.update(args)
    return run_module("sglang_probe", base)


def test_python_given_as_a_path_is_probed(emulator_python, tmp_path):
    res = _probe({"python": emulator_python, "introspect": True, "introspect_timeout": 90.5}, tmp_path)
    assert not res.get("failed"), res.get("msg")
    assert res["interpreter"]["path"] == emulator_python and res["interpreter"]["sglang_installed"]
    assert res["introspection"]["sglang_version"] == res["interpreter"]["sglang_version"]


def test_python_given_with_a_home_relative_path_is_expanded(emulator_python, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(emulator_python, str(home / "py"))
    res = run_module("sglang_probe", {"python": "~/py", "state_dir": str(tmp_path / "state"), "gpu_backend": "none",
                                      "shm_dir": str(tmp_path / "shm"), "search_paths": [str(tmp_path / "x")]},
                     env={"HOME": str(home)})
    assert not res.get("failed"), res.get("msg")
    assert res["interpreter"]["path"] == str(home / "py")


def test_a_bare_python_name_is_still_looked_up_in_path(tmp_path):
    found = shutil.which("python3")
    res = _probe({"python": "python3"}, tmp_path)
    assert res["interpreter"] is not None and os.path.isabs(res["interpreter"]["path"]), res
    assert os.path.realpath(res["interpreter"]["path"]) == os.path.realpath(found)


def test_introspect_timeout_takes_a_fraction(emulator_python, tmp_path):
    # an int spec refused 0.5 ("cannot be converted to an int"); the shared spec is a float
    res = _probe({"python": emulator_python, "introspect_timeout": 0.5}, tmp_path)
    assert "cannot be converted" not in (res.get("msg") or ""), res.get("msg")
    assert not res.get("failed"), res.get("msg")
