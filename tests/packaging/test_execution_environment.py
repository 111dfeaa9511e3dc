"""An execution environment built with ansible-builder gets the collection's dependencies.

`ansible-builder create` renders a build context from a definition that installs this
collection's artifact; then the context's own galaxy stage (`ansible-galaxy collection install
-r requirements.yml`) and builder stage (`introspect.py`) run here, without a container engine.
Their output is what the image build would pip/dnf install: it must carry psutil and requests
(requirements.txt) and the bindep entries, reached through meta/execution-environment.yml.

ansible-builder is installed once into tests/output/ansible-builder/ (from the package index).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from typing import Dict, List

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
BUILDER_VERSION = "3.2.0"
BUILDER_VENV = os.path.join(ROOT, "tests", "output", "ansible-builder")

pytestmark = pytest.mark.timeout(600)


def run(cmd: List[str], cwd: str, env: Dict[str, str]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=500, check=False)
    assert proc.returncode == 0, "%s failed (%d):\n%s\n%s" % (cmd, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def clean_env() -> Dict[str, str]:
    """No checkout config: ansible.cfg's collections_path would make galaxy see the checkout."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}


@pytest.fixture(scope="session")
def builder() -> str:
    stamp = os.path.join(BUILDER_VENV, "version")
    python = os.path.join(BUILDER_VENV, "bin", "python")
    if not (os.path.exists(stamp) and open(stamp, encoding="utf-8").read() == BUILDER_VERSION):
        env = clean_env()
        run([sys.executable, "-m", "venv", "--clear", BUILDER_VENV], ROOT, env)
        run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "ansible-builder==%s" % BUILDER_VERSION], ROOT, env)
        with open(stamp, "w", encoding="utf-8") as handle:
            handle.write(BUILDER_VERSION)
    return BUILDER_VENV


@pytest.fixture(scope="session")
def artifact(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("dist"))
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", out, ROOT],
        out, clean_env())
    (name,) = [n for n in os.listdir(out) if n.endswith(".tar.gz")]
    return os.path.join(out, name)


def test_artifact_carries_the_dependency_declarations(artifact: str) -> None:
    with tarfile.open(artifact) as tar:
        meta = yaml.safe_load(tar.extractfile("meta/execution-environment.yml"))
        requirements = tar.extractfile(meta["dependencies"]["python"]).read().decode()
        bindep = tar.extractfile(meta["dependencies"]["system"]).read().decode()
    assert "psutil" in requirements and "requests" in requirements
    assert "python3-devel" in bindep


def test_builder_context_installs_psutil_and_requests(builder: str, artifact: str, tmp_path) -> None:
    name = os.path.basename(artifact)
    definition = {
        "version": 3,
        "images": {"base_image": {"name": "quay.io/fedora/fedora:42"}},
        "dependencies": {
            "ansible_core": {"package_pip": "ansible-core>=2.17"},
            "ansible_runner": {"package_pip": "ansible-runner"},
            "galaxy": {"collections": [{"name": "collections/" + name, "type": "file"}]},
        },
        "additional_build_files": [{"src": artifact, "dest": "collections"}],
    }
    (tmp_path / "execution-environment.yml").write_text(yaml.safe_dump(definition))
    env = clean_env()
    run([os.path.join(builder, "bin", "ansible-builder"), "create", "-f", "execution-environment.yml",
         "-c", "context", "--output-filename", "Containerfile"], str(tmp_path), env)

    context = tmp_path / "context"
    containerfile = (context / "Containerfile").read_text()
    assert "ansible-galaxy collection install" in containerfile
    assert "introspect.py introspect" in containerfile
    build = context / "_build"
    assert (build / "collections" / name).is_file()

    # The galaxy stage: install what requirements.yml names, from the context.
    collections = tmp_path / "usr-share-ansible-collections"
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "-r", "requirements.yml",
         "--collections-path", str(collections)], str(build), env)
    assert (collections / "ansible_collections" / "llmops" / "sglang" / "MANIFEST.json").is_file()

    # The builder stage: the context's own introspect script writes what gets installed.
    pip_out, bindep_out = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    run([os.path.join(builder, "bin", "python"), str(build / "scripts" / "introspect.py"), "introspect",
         "--write-pip", str(pip_out), "--write-bindep", str(bindep_out), str(collections)],
        str(tmp_path), env)
    pip_lines = pip_out.read_text().splitlines()
    for package in ("psutil", "requests"):
        assert [line for line in pip_lines if line.startswith(package) and "llmops.sglang" in line], pip_lines
    assert any(line.startswith("python3-devel [compile platform:rpm]") for line in bindep_out.read_text().splitlines())
