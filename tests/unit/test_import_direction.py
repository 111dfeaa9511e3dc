"""The direction of imports inside plugins/ (docs/development.md, "Layout and the import rule").

Every file under plugins/ is parsed with ast, imports inside functions and `if TYPE_CHECKING:`
included (a lazy import is still a dependency a reader must follow), and:

- a module_utils file imports only from its own package or a lower-ranked one (RANKS), and
  nothing of plugins/ outside module_utils (it is what runs on the managed host);
- no file imports a module file (plugins/modules): a module is an entry point, not a library;
- modules import only module_utils; the controller side (action, plugin_utils, filter) imports
  module_utils and plugin_utils, never a module;
- no cycle between files.

What the tree still breaks is listed in KNOWN_UPWARD and KNOWN_CYCLES, each entry once: a new
break fails, and so does an entry that no longer exists (the lists cannot rot).
"""
from __future__ import annotations

import ast
import os
import sys
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(ROOT, "plugins")
PREFIX = "ansible_collections.llmops.sglang."

# module_utils packages, lowest first. A package may import its own files and lower ranks only;
# equal ranks do not import each other. The engines of rank 4 use those of rank 3
# (_launch: its replacement stops the old server through _teardown and warms through _prewarm).
RANKS: Dict[str, int] = {
    "_core": 0,       # errors, exit, redact, options, deps, http, progress
    "_host": 1,       # processes, ports, pidfds, GPUs, cgroups, containment, shm, purge, record, lock
    "_sglang": 2,     # the interpreter, its CLI, log patterns and analysis
    "_teardown": 3,
    "_prewarm": 3,
    "_readiness": 3,
    "_fleet": 3,
    "_launch": 4,
    "_probe": 4,
    "_restart": 5,    # the restart's state machine over every engine's results (controller side)
}

# What each top-level plugins/ directory (not module_utils) may import from plugins/.
# "module_utils" stands for every module_utils package.
OUTSIDE: Dict[str, Set[str]] = {
    "modules": {"module_utils"},
    "action": {"module_utils", "plugin_utils"},
    "plugin_utils": {"module_utils", "plugin_utils"},
    "filter": {"module_utils", "plugin_utils", "filter"},
    "doc_fragments": set(),
}

# Upward imports (importer file, imported file) the tree still has: none. An entry here is a debt
# with its reason, removed when fixed:
KNOWN_UPWARD: Set[Tuple[str, str]] = set()

# File-level import cycles (the files of each strongly connected component) the tree still has:
# none.
KNOWN_CYCLES: Set[FrozenSet[str]] = set()


def _files() -> List[str]:
    """Every .py under plugins/, relative to plugins/ ('module_utils/_core/_deps.py')."""
    out = []
    for dirpath, _dirs, names in os.walk(PLUGINS):
        out += [os.path.relpath(os.path.join(dirpath, n), PLUGINS) for n in names if n.endswith(".py")]
    return sorted(out)


def _dotted(rel: str) -> str:
    """'module_utils/_core/_deps.py' -> 'plugins.module_utils._core._deps' (a package: its name)."""
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["plugins"] + parts)


def _imported_names(rel: str) -> Iterator[Tuple[int, str]]:
    """(line, dotted name below the collection) of each import of this collection in the file:
    for `from X import Y` both X and X.Y (Y may be a submodule); relative imports resolved."""
    with open(os.path.join(PLUGINS, rel), encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=rel)
    package = _dotted(rel) if rel.endswith("__init__.py") else _dotted(rel).rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PREFIX):
                    yield node.lineno, alias.name[len(PREFIX):]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith(PREFIX):
                module = node.module[len(PREFIX):]
            else:
                continue
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, module + "." + alias.name


def _file_of(dotted: str, files: Set[str]) -> Optional[str]:
    """The plugins/ file a dotted name is (a module, or a package's __init__.py), else None
    (a name inside a module, such as a class)."""
    rel = "/".join(dotted.split(".")[1:])
    for candidate in (rel + ".py", rel + "/__init__.py"):
        if candidate in files:
            return candidate
    return None


def _graph() -> Dict[str, Dict[str, int]]:
    """importer file -> {imported file: first line}. Package __init__ files count as files."""
    files = set(_files())
    graph: Dict[str, Dict[str, int]] = {f: {} for f in files}
    for rel in files:
        for line, dotted in _imported_names(rel):
            target = _file_of(dotted, files)
            if target and target != rel:
                graph[rel].setdefault(target, line)
    return graph


def _area(rel: str) -> str:
    """'module_utils/_core' for a module_utils file, else its top directory ('action')."""
    parts = rel.split("/")
    return "/".join(parts[:2]) if parts[0] == "module_utils" and len(parts) > 2 else parts[0]


def _allowed(src: str, dst: str) -> bool:
    a, b = _area(src), _area(dst)
    if a == b and a != "modules":
        return True
    if b == "modules":
        return False
    if a.startswith("module_utils/"):
        if not b.startswith("module_utils/"):
            return False
        return RANKS[b.split("/")[1]] < RANKS[a.split("/")[1]]
    if a == "module_utils":  # plugins/module_utils/__init__.py
        return False
    allowed = OUTSIDE.get(a, set())
    return ("module_utils" in allowed and b.startswith("module_utils")) or b in allowed


def _violations() -> Dict[Tuple[str, str], int]:
    out = {}
    for src, targets in _graph().items():
        for dst, line in targets.items():
            if not _allowed(src, dst):
                out[(src, dst)] = line
    return out


def _cycles(graph: Dict[str, Dict[str, int]]) -> Set[FrozenSet[str]]:
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    on_stack: Set[str] = set()
    stack: List[str] = []
    found: Set[FrozenSet[str]] = set()
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_every_module_utils_package_is_ranked():
    packages = {d for d in os.listdir(os.path.join(PLUGINS, "module_utils"))
                if os.path.isdir(os.path.join(PLUGINS, "module_utils", d)) and d != "__pycache__"}
    assert packages == set(RANKS), "rank new packages in RANKS (and docs/development.md): %s" % (
        sorted(packages ^ set(RANKS)))


def test_no_flat_module_utils_files():
    """New files go into the package of their concern."""
    flat = [n for n in os.listdir(os.path.join(PLUGINS, "module_utils")) if n.endswith(".py") and n != "__init__.py"]
    assert flat == []


def test_imports_go_one_way():
    broken = _violations()
    new = {k: v for k, v in broken.items() if k not in KNOWN_UPWARD}
    assert not new, "imports against the direction (docs/development.md, the import rule):\n" + "\n".join(
        "plugins/%s:%d imports plugins/%s" % (src, line, dst) for (src, dst), line in sorted(new.items()))
    gone = KNOWN_UPWARD - set(broken)
    assert not gone, "fixed: drop these from KNOWN_UPWARD: %s" % sorted(gone)


def test_nothing_imports_a_module_file():
    offenders = sorted("plugins/%s imports plugins/%s" % (src, dst)
                       for src, targets in _graph().items() for dst in targets if _area(dst) == "modules")
    assert offenders == []


def test_no_import_cycles():
    cycles = _cycles(_graph())
    new = cycles - KNOWN_CYCLES
    assert not new, "import cycles between files: %s" % [sorted(c) for c in new]
    gone = KNOWN_CYCLES - cycles
    assert not gone, "broken: drop these from KNOWN_CYCLES: %s" % [sorted(c) for c in gone]


# The checker itself, on made-up graphs and paths: what it must catch.
@pytest.mark.parametrize("src,dst,ok", [
    ("module_utils/_host/_procs.py", "module_utils/_core/_errors.py", True),
    ("module_utils/_core/_errors.py", "module_utils/_host/_procs.py", False),
    ("module_utils/_launch/_launch_exec.py", "module_utils/_teardown/_teardown_call.py", True),
    ("module_utils/_teardown/_teardown.py", "module_utils/_launch/_launcher.py", False),
    ("module_utils/_probe/_probe.py", "module_utils/_launch/_launcher.py", False),
    ("module_utils/_readiness/_readiness.py", "module_utils/_fleet/_drain.py", False),
    ("module_utils/_core/_exit.py", "plugin_utils/_progress_display.py", False),
    ("plugin_utils/_teardown_lines.py", "modules/sglang_teardown.py", False),
    ("action/sglang_launch.py", "modules/sglang_launch.py", False),
    ("modules/sglang_launch.py", "modules/sglang_teardown.py", False),
    ("modules/sglang_launch.py", "plugin_utils/_progress_display.py", False),
    ("action/sglang_ready.py", "plugin_utils/_sliced_action.py", True),
    ("plugin_utils/_operation_lock.py", "module_utils/_host/_lock.py", True),
    ("filter/restart_summary.py", "action/sglang_ready.py", False),
])
def test_rule(src, dst, ok):
    assert _allowed(src, dst) is ok


def test_cycle_finder():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}, "e": {"e": 1}, "f": {}}
    assert _cycles(graph) == {frozenset({"a", "b", "c"})}


def test_function_level_and_relative_imports_are_seen(tmp_path, monkeypatch):
    pkg = tmp_path / "module_utils" / "_core"
    pkg.mkdir(parents=True)
    (tmp_path / "module_utils" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_a.py").write_text("def f():\n    from . import _b\n")
    (pkg / "_b.py").write_text("from ansible_collections.llmops.sglang.plugins.module_utils._core._a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "PLUGINS", str(tmp_path))
    assert _cycles(_graph()) == {frozenset({"module_utils/_core/_a.py", "module_utils/_core/_b.py"})}
