# -*- coding: utf-8 -*-
"""Filters restart_decide, restart_rollback and restart_outcome: the restart's state machine
(plugins/module_utils/_restart/_restart_outcome.py, where the action plugin
sglang_restart_outcome reads it too) as Jinja filters. Controller side only."""
from __future__ import annotations

from typing import Any, Dict

from ansible_collections.llmops.sglang.plugins.module_utils._restart._restart_outcome import (
    restart_decide, restart_outcome, restart_rollback)


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"restart_decide": restart_decide, "restart_rollback": restart_rollback,
                "restart_outcome": restart_outcome}
