"""Shared pytest fixtures: the library on sys.path, module runner, emulator processes, ports.

Every process a test starts is started here in its own session and killed here by pgid, plus
any escaped process carrying this test run's marker value: nothing else on the host is touched.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

pytest_plugins = ["helpers.fixtures"]
