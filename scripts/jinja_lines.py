"""Count the lines of Jinja in roles/ and playbooks/ YAML: a line holding `{{` or `{%`, or one
inside a multi-line expression. Decisions belong in tested filter plugins (plugins/filter), so
tests/unit/test_jinja_budget.py keeps this count from growing.

    python3 scripts/jinja_lines.py          the heaviest files and the total
"""
from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OPEN = re.compile(r"\{\{|\{%")
_CLOSE = re.compile(r"\}\}|%\}")


def count_text(text: str) -> int:
    lines = depth = 0
    for line in text.splitlines():
        opens, closes = len(_OPEN.findall(line)), len(_CLOSE.findall(line))
        if depth > 0 or opens:
            lines += 1
        depth = max(0, depth + opens - closes)
    return lines


def count_tree(root: str = ROOT) -> Dict[str, int]:
    """Jinja lines per YAML file under roles/ and playbooks/, paths relative to root."""
    counts: Dict[str, int] = {}
    for top in ("roles", "playbooks"):
        for base, _dirs, files in os.walk(os.path.join(root, top)):
            for name in files:
                if name.endswith((".yml", ".yaml")):
                    path = os.path.join(base, name)
                    with open(path, encoding="utf-8") as fh:
                        counts[os.path.relpath(path, root)] = count_text(fh.read())
    return counts


def heaviest(counts: Dict[str, int], n: int = 10) -> List[Tuple[str, int]]:
    return sorted(((p, c) for p, c in counts.items() if c), key=lambda pc: (-pc[1], pc[0]))[:n]


def main() -> int:
    counts = count_tree()
    for path, lines in heaviest(counts):
        print("%5d %s" % (lines, path))
    print("%5d total" % sum(counts.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
