"""Fixtures of the integration tests that several files share."""
from __future__ import annotations

from typing import Iterator

import pytest

from helpers.fleet import Fleet


@pytest.fixture
def fleet(tmp_path) -> Iterator[Fleet]:
    """Three emulator workers behind no router yet (the test starts it); everything stopped after."""
    f = Fleet(str(tmp_path / "fleet"), size=3)
    try:
        yield f
    finally:
        f.stop_router()
        f.down()
