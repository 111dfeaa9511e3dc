"""What the probe lists as launch records: `<name>.json` only, never the instance's other JSON
files (exit file, remembered start, last-good record) read as records of dead servers."""
from __future__ import annotations

import json
import os

from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe


def _write(path, data) -> None:
    with open(path, "w") as fh:
        json.dump(data, fh)
    os.chmod(path, 0o600)


def test_only_launch_records_are_records(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    _write(state / "serving.json", {"name": "serving", "launch_id": "L1", "pid": 1, "start_time": 0.0})
    _write(state / "serving.exit.json", {"launch_id": "L1", "returncode": 1})
    _write(state / "serving.timeline.json", {"format": 1, "launch_id": "L1", "start_seconds": 12.0})
    _write(state / "serving.good.json", {"name": "serving", "launch_id": "L0"})
    unavailable: list = []
    records = _probe.read_records(str(state), unavailable)
    assert [r["path"] for r in records] == [str(state / "serving.json")]
    assert records[0]["name"] == "serving"


def test_record_file_names() -> None:
    assert _record.is_record_file("a-b_1.json")
    for name in ("a.exit.json", "a.timeline.json", "a.good.json", ".a.json", "a.json.damaged-20260101T000000Z",
                 "a.json.tmp", "a.lock"):
        assert not _record.is_record_file(name), name
