"""One exception type for the library: modules turn it into fail_json(msg=..., **details)."""
from __future__ import annotations

from typing import Any


class SglangError(Exception):
    """A precise, operator-facing failure. `msg` is shown as is; `details` go into the result."""

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details
