# llmops.sglang get-pip stand-in (do not remove this marker line: scripts/sanity.sh looks for it)
"""Offline stand-in for the get-pip.py bootstrap script ansible-test downloads.

ansible-test bootstraps pip into each virtual environment it creates by running a cached
``~/.ansible/test/cache/get_pip_<version>.py`` and downloads that file from
ci-files.testing.ansible.com when it is missing. That host is not reachable from CI here, but
PyPI is, so scripts/sanity.sh installs this file under that name. It is called with the same
arguments as the real get-pip.py (``--disable-pip-version-check pip==X.Y --no-setuptools
--no-wheel``), seeds pip from the interpreter's bundled wheel (``ensurepip``) and then lets that
pip install the requested packages from the package index.
"""

import subprocess
import sys

DROP = {"--no-setuptools": "setuptools", "--no-wheel": "wheel"}


def main():
    args = [arg for arg in sys.argv[1:] if arg not in DROP]
    unwanted = [DROP[arg] for arg in sys.argv[1:] if arg in DROP]
    pip = [sys.executable, "-m", "pip"]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"],
                          stdout=subprocess.DEVNULL)
    if args:
        subprocess.check_call(pip + ["install", "--quiet"] + args)
    # ensurepip of older Pythons also seeds setuptools; the real get-pip.py would not with these flags.
    if unwanted:
        subprocess.check_call(pip + ["uninstall", "--quiet", "--yes"] + unwanted,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as exc:
        sys.exit(exc.returncode or 1)
