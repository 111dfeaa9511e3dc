"""module_utils imports go one way: _core <- _host <- _sglang <- the engines. A lower package
never imports a higher one (not even inside a function): that is how the _deps <-> _interpreter
cycle came about."""
from __future__ import annotations

import ast
import os
from typing import List

from helpers.fixtures import ROOT

UTILS = os.path.join(ROOT, "plugins", "module_utils")
PREFIX = "ansible_collections.llmops.sglang.plugins.module_utils."
RANK = {"_core": 0, "_host": 1, "_sglang": 2}
ENGINE = 3


def _rank(package: str) -> int:
    return RANK.get(package, ENGINE)


def _imported_packages(path: str) -> List[str]:
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    out = []
    for node in ast.walk(tree):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        out += [n[len(PREFIX):].split(".")[0] for n in names if n.startswith(PREFIX)]
    return out


def test_no_package_imports_a_higher_one():
    upward = []
    for package in sorted(os.listdir(UTILS)):
        folder = os.path.join(UTILS, package)
        if not os.path.isdir(folder) or package.startswith("__"):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                for imported in _imported_packages(os.path.join(folder, name)):
                    if _rank(imported) > _rank(package):
                        upward.append("%s/%s imports %s" % (package, name, imported))
    assert upward == []
