"""The repository's layout as published: what is committed, where tools expect it.

Fast, static checks (no network, no build): the dependency declarations ansible-builder reads,
molecule's top-level scenarios, no committed symlink, no sanity ignore file.
tests/packaging/test_execution_environment.py renders and introspects a real build context.
"""
from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from typing import Dict, List

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANAGED_HOST_PACKAGES = ("psutil", "requests")


def load_yaml(rel: str) -> Dict:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def requirement_names(rel: str) -> List[str]:
    names = []
    with open(os.path.join(ROOT, rel), encoding="utf-8") as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].lower())
    return names


def tracked(*args: str) -> List[str]:
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-s", "--"] + list(args),
                         check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line]


def test_execution_environment_file_names_existing_dependency_files() -> None:
    meta = load_yaml("meta/execution-environment.yml")
    assert meta["version"] == 1
    deps = meta["dependencies"]
    assert deps == {"python": "requirements.txt", "system": "bindep.txt"}
    for rel in deps.values():
        assert os.path.isfile(os.path.join(ROOT, rel)), rel


def test_requirements_declare_what_the_modules_import() -> None:
    assert sorted(requirement_names("requirements.txt")) == sorted(MANAGED_HOST_PACKAGES)


def test_dependency_files_are_published() -> None:
    """galaxy.yml's build_ignore must not drop what ansible-builder reads from the artifact."""
    patterns = load_yaml("galaxy.yml").get("build_ignore", [])
    for rel in ("requirements.txt", "bindep.txt", "meta/execution-environment.yml", "meta/runtime.yml"):
        assert not [p for p in patterns if fnmatch.fnmatch(rel, p)], rel


def test_molecule_scenarios_are_at_the_top_level() -> None:
    scenarios = sorted(d for d in os.listdir(os.path.join(ROOT, "molecule"))
                       if os.path.isfile(os.path.join(ROOT, "molecule", d, "molecule.yml")))
    assert scenarios == ["broken_venv", "restart", "serving", "teardown"]
    assert not os.path.exists(os.path.join(ROOT, "extensions", "molecule"))
    assert tracked("extensions") == []


def test_no_symlink_is_committed() -> None:
    """ansible-test sanity rejects directory symlinks; make creates the one ad hoc use needs."""
    links = [line.split("\t", 1)[1] for line in tracked() if line.startswith("120000 ")]
    assert links == []


def test_no_sanity_ignore_file() -> None:
    assert tracked("tests/sanity") == []
    assert not os.path.exists(os.path.join(ROOT, "tests", "sanity"))
