"""Shared pytest fixtures: the library on sys.path, module runner, emulator processes, ports.

Every process a test starts is started here in its own session and killed here by pgid, plus
any escaped process carrying this test run's marker value: nothing else on the host is touched.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = os.path.join(ROOT, "collections", "ansible_collections", "llmops", "sglang")
# The checkout is the collection through a link `make` creates (never committed: a directory
# symlink fails ansible-test sanity); pytest run directly on a fresh clone makes it the same way.
if not os.path.lexists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink("../../..", LINK)
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

pytest_plugins = ["helpers.fixtures"]
