"""Root ran code from another user's site-packages: `_deps.trusted` judged the interpreter's path only.

A root-owned venv whose site-packages another user can write (a shared venv opened to a group
for `pip install`) passed: the missing-library search ran `<venv>/bin/python -c "import psutil,
requests"` as root, and site.py executed that user's `.pth` file as uid 0. The probe suggested
such a venv too.

Now an interpreter is run or named only when what it executes from is root's or the module's
user's and closed to others as well: pyvenv.cfg and the `home` it names, lib/pythonX.Y, each
site/dist-packages directory and its top-level entries (.pth files, packages)
(`_deps.interpreter_reason`); the library check runs with `-I`.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _deps
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch, _interpreter


@pytest.fixture
def venv(shared_tmp) -> str:
    """A root-owned venv (bin/ and every directory above it root's, 0755)."""
    path = os.path.join(shared_tmp, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True, capture_output=True)
    return path


def _site(venv: str) -> str:
    return glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]


def _plant_pth(user, site: str, proof: str) -> None:
    pth = "import os; open(%r, 'w').write('uid=%%d' %% os.getuid())\n" % proof
    user.run(["sh", "-c", 'printf "%%s" "$0" > %s/evil.pth' % site, pth])


def test_a_venv_whose_site_packages_another_user_owns_is_never_run(venv, throwaway_user, shared_tmp):
    python = os.path.join(venv, "bin", "python")
    assert _deps.trusted(python), "the clean root-owned venv must be trusted (the control)"
    site = _site(venv)
    os.chown(site, throwaway_user.uid, throwaway_user.gid)
    proof = os.path.join(shared_tmp, "pwned")
    _plant_pth(throwaway_user, site, proof)
    assert _depsearch.interpreter_with(hints=[python]) != python
    assert not os.path.exists(proof), "the other user's .pth ran as root"
    assert not _deps.trusted(python)
    why = _deps.interpreter_reason(python)
    assert why is not None and throwaway_user.name in why and site in why
    assert _interpreter.untrusted_install({"python": python}) == why  # never suggested by the probe


def test_a_group_writable_site_packages_is_refused(venv):
    site = _site(venv)
    os.chmod(site, 0o775)
    assert not _deps.trusted(os.path.join(venv, "bin", "python"))
    why = _deps.interpreter_reason(os.path.join(venv, "bin", "python"))
    assert why is not None and "writable by group or others" in why


def test_another_users_pth_in_a_root_site_packages_is_refused(venv, throwaway_user, shared_tmp):
    site = _site(venv)
    pth = os.path.join(site, "evil.pth")
    with open(pth, "w", encoding="utf-8") as fh:
        fh.write("import os\n")
    os.chown(pth, throwaway_user.uid, throwaway_user.gid)
    assert not _deps.trusted(os.path.join(venv, "bin", "python"))
    why = _deps.interpreter_reason(os.path.join(venv, "bin", "python"))
    assert why is not None and pth in why


def test_another_users_pyvenv_cfg_is_refused(venv, throwaway_user):
    cfg = os.path.join(venv, "pyvenv.cfg")
    os.chown(cfg, throwaway_user.uid, throwaway_user.gid)
    assert not _deps.trusted(os.path.join(venv, "bin", "python"))
    why = _deps.interpreter_reason(os.path.join(venv, "bin", "python"))
    assert why is not None and cfg in why


def test_the_library_check_is_isolated_and_still_finds_the_venv(venv, shared_tmp):
    """-I drops PYTHON* variables and the user site only: the venv's own site-packages count."""
    site = _site(venv)
    os.mkdir(os.path.join(site, "onlyhere"))
    with open(os.path.join(site, "onlyhere", "__init__.py"), "w", encoding="utf-8") as fh:
        fh.write("")
    python = os.path.join(venv, "bin", "python")
    assert _deps.has_libs(python, ["onlyhere"])
    assert not _deps.has_libs(python, ["no_such_module_rv"])
