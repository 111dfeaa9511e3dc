"""_redact: the one process describer and the one result redaction every module result passes."""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._redact import MASK


@pytest.mark.parametrize("argv,shown", [
    (["python3", "-m", "sglang.launch_server", "--api-key", "k3y-old"],
     "python3 -m sglang.launch_server --api-key ********"),
    (["python3", "--admin-api-key=k3y-old"], "python3 --admin-api-key=********"),
    (["sglang::x --api-key k3y-old --port 1"], "sglang::x --api-key ******** --port 1"),
    (["srv", "--hf-token", "k3y-old", "--token=k3y-old"], "srv --hf-token ******** --token=********"),
    (["python3", "--tokenizer-path", "/m"], "python3 --tokenizer-path /m"),
])
def test_describe_cmdline_masks_every_form(argv, shown):
    assert _redact.describe_cmdline(argv) == shown


def test_describe_cmdline_comm_and_limit():
    assert _redact.describe_cmdline([], "kworker/0") == "[kworker/0]"
    assert _redact.describe_cmdline(["a" * 50], limit=10) == "a" * 7 + "..."


def test_redact_result_masks_keys_argv_lists_text_and_literals():
    result = {
        "msg": "held by pid 1 (python3 --api-key k3y-old)",
        "port_holder": [{"cmdline": ["python3", "--api-key", "k3y-old"], "user": "root"}],
        "server_info": {"args": {"api_key": "k3y-old", "hf_token": "hf_x"}, "note": "uses lit3ral-secret"},
        "log_tail": "Authorization: Bearer k3y-old\nserver_args=ServerArgs(api_key='k3y-old')",
        "count": 3, "flag": True, "none": None,
    }
    out = _redact.redact_result(result, ["lit3ral-secret", None])
    text = json.dumps(out)
    assert "k3y-old" not in text and "hf_x" not in text and "lit3ral-secret" not in text
    assert out["port_holder"][0]["cmdline"] == ["python3", "--api-key", MASK]
    assert out["server_info"]["args"]["api_key"] == MASK
    assert out["count"] == 3 and out["flag"] is True and out["none"] is None
    assert result["port_holder"][0]["cmdline"][2] == "k3y-old"  # a copy: the input is untouched
