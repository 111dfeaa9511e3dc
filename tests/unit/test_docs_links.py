"""README.md and docs/ name only what the repository has.

Every relative Markdown link must resolve, every repository path named in the text (inline code,
code blocks) must exist, and the user docs name nothing outside the repository: no path of a
development machine, no design notes that are not published, no issue numbers.
"""
from __future__ import annotations

import glob
import os
import re
from typing import Iterator, List, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# First path components that mean "a path in this repository". Kept fixed on purpose: a doc that
# still names a directory the repository no longer has (e.g. extensions/) must be caught.
TOP_LEVEL = (
    ".ci", ".venv", ".venv-emulator", ".whl", "benchmarks", "build", "changelogs", "collections",
    "docs", "extensions", "inventory", "meta", "molecule", "playbooks", "plugins", "roles",
    "scripts", "tests",
)
TOP_LEVEL_FILES = (
    ".ansible-lint", ".gitignore", "COPYING", "Makefile", "README.md", "ansible.cfg", "bindep.txt",
    "galaxy.yml", "requirements.txt", "requirements-dev.txt",
)
# Created at run time (make, tests, benchmarks, the GPU wheel download), never committed.
RUNTIME_PREFIXES = (
    ".venv/", ".venv-emulator/", ".whl/", "build/", "tests/output/", "benchmarks/results/",
    "collections/",
)

# Things a user doc must not say (pattern, why).
FORBIDDEN = (
    (re.compile(r"/work/"), "a path on a development machine"),
    (re.compile(r"shared/reference"), "background notes that are not part of the repository"),
    (re.compile(r"\b(?:DESIGN|STYLE)\.md\b"), "a design note that is not part of the repository"),
    (re.compile(r"\bissues? #?\d+\b", re.I), "an issue number (describe the collection instead)"),
    (re.compile(r"\b(?:lent|lend|lends|lending)\b", re.I), "how test machines were obtained"),
    (re.compile(r"\bdevice (?:kind|time|machines?|runs?)\b", re.I), "how test machines were obtained"),
)

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^(```|~~~)")
TOKEN_STRIP = "\"'.,:;()[]"


def doc_files() -> List[str]:
    """README.md and every Markdown file under docs/, relative to the root."""
    found = ["README.md"]
    for base, _dirs, files in os.walk(os.path.join(ROOT, "docs")):
        for name in sorted(files):
            if name.endswith(".md"):
                found.append(os.path.relpath(os.path.join(base, name), ROOT))
    return sorted(found)


def read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as handle:
        return handle.read()


def code_texts(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, text) of inline code spans and of the lines of fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            yield number, line
        else:
            for match in INLINE_CODE.finditer(line):
                yield number, match.group(1)


def expand_braces(path: str) -> List[str]:
    """`a.{md,json}` -> [a.md, a.json] (one level, as the docs write it)."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [path[:match.start()] + part + path[match.end():] for part in match.group(1).split(",")]


def repo_path(token: str) -> str:
    """The token as a repository path, or '' when it names none."""
    token = token.strip(TOKEN_STRIP)
    if token.startswith("./"):
        token = token[2:]
    if not token or "<" in token or "$" in token or "://" in token:
        return ""
    head = token.split("/", 1)[0]
    if "/" in token and head in TOP_LEVEL:
        return token
    if token in TOP_LEVEL_FILES:
        return token
    return ""


def exists(path: str) -> bool:
    """The path exists; for a pytest node id (file::test, file::Class::test) the test does too."""
    if "::" in path:
        path, node = path.split("::", 1)
        return exists(path) and node_defined(path, node)
    if any((path.rstrip("/") + "/").startswith(prefix) for prefix in RUNTIME_PREFIXES):
        return True
    for candidate in expand_braces(path.rstrip("/")):
        if glob.glob(os.path.join(ROOT, candidate)):
            continue
        return False
    return True


def node_defined(path: str, node: str) -> bool:
    """Every name of `Class::test[param]` is defined (def/class) in the test file."""
    try:
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            source = handle.read()
    except OSError:
        return False
    names = [part.split("[", 1)[0] for part in node.split("::") if part]
    return all(re.search(r"^\s*(?:async\s+)?(?:def|class)\s+%s\b" % re.escape(n), source, re.M) for n in names)


def broken_links(rel: str) -> List[str]:
    problems = []
    base = os.path.dirname(os.path.join(ROOT, rel))
    for number, line in enumerate(read(rel).splitlines(), 1):
        for match in LINK.finditer(line):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(base, target))):
                problems.append("%s:%d: link to %s, which does not exist" % (rel, number, target))
    return problems


def missing_paths(rel: str) -> List[str]:
    problems = []
    for number, text in code_texts(read(rel)):
        for token in re.split(r"[\s=]+", text):
            path = repo_path(token)
            if path and not exists(path):
                problems.append("%s:%d: names %s, which is not in the repository" % (rel, number, path))
            library = re.fullmatch(r"(_[a-z0-9_]+\.py)", token.strip(TOKEN_STRIP))
            if library and not glob.glob(os.path.join(ROOT, "plugins/module_utils", "*", library.group(1))):
                problems.append("%s:%d: names %s, which is not in plugins/module_utils"
                                % (rel, number, library.group(1)))
    return problems


def forbidden_mentions(rel: str) -> List[str]:
    problems = []
    for number, line in enumerate(read(rel).splitlines(), 1):
        for pattern, why in FORBIDDEN:
            match = pattern.search(line)
            if match:
                problems.append("%s:%d: '%s': %s" % (rel, number, match.group(0), why))
    return problems


@pytest.mark.parametrize("rel", doc_files())
def test_relative_links_resolve(rel: str) -> None:
    problems = broken_links(rel)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", doc_files())
def test_named_repository_paths_exist(rel: str) -> None:
    problems = missing_paths(rel)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", doc_files())
def test_docs_name_nothing_outside_the_repository(rel: str) -> None:
    problems = forbidden_mentions(rel)
    assert not problems, "\n".join(problems)


def test_the_checker_sees_what_it_must(tmp_path) -> None:
    """The helpers recognise the shapes the docs use (so an empty result means something)."""
    assert repo_path("`extensions/molecule/`".strip("`")) == "extensions/molecule/"
    assert repo_path("tests/gpu/results/x.{md,json}") == "tests/gpu/results/x.{md,json}"
    assert repo_path("changelogs/fragments/<topic>.yml") == ""
    assert repo_path("/root/ml-env") == ""
    assert repo_path("galaxy.yml,") == "galaxy.yml"
    assert repo_path("molecule") == ""  # a word; molecule/ names the directory
    assert not exists("plugins/modules/no_such_module.py")
    assert exists(".venv/bin/ansible-test")
    assert exists("tests/unit/test_docs_links.py::test_the_checker_sees_what_it_must")
    assert not exists("tests/unit/test_docs_links.py::test_no_such_test")
    assert expand_braces("a.{md,json}") == ["a.md", "a.json"]
    lines = list(code_texts("x `plugins/a.py` y\n```\nscripts/b.sh --x\n```\n"))
    assert lines == [(1, "plugins/a.py"), (3, "scripts/b.sh --x")]
