"""_redact: the one process describer and the one result redaction every module result passes."""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK


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


def test_one_deep_redaction_behind_every_name():
    # sglang_ready's verdict, the probe's server_info and every module result: one walk
    data = {"servers": [{"argv": ["srv", "--api-key", "k3y-old"], "env": {"HF_TOKEN": "x"}}],
            "info": {"hf_token": "hf_x", "nested": [{"admin_api_key": "k3y-old"}]},
            "line": "Bearer k3y-old and lit3ral-secret"}
    deep = _redact.redact_deep(data, ["lit3ral-secret"])
    assert deep == _redact.redact_result(data, ["lit3ral-secret"])
    text = json.dumps(deep)
    assert "k3y-old" not in text and "hf_x" not in text and "lit3ral-secret" not in text


def test_describe_process_is_the_one_process_description():
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
    proc = _procs.Proc(pid=42, ppid=1, pgid=42, sid=42, comm="srv", state="S", uid=0, start_time=1.0,
                       cmdline=["srv --api-key k3y-old --port 1"])
    out = _redact.describe_process(proc, address="0.0.0.0")
    assert out == {"pid": 42, "name": "srv", "user": proc.user, "cmdline": "srv --api-key %s --port 1" % MASK,
                   "address": "0.0.0.0"}
    assert _redact.describe_process(proc, limit=10)["cmdline"] == "srv --a..."
    kthread = _procs.Proc(pid=2, ppid=0, pgid=0, sid=0, comm="kthreadd", state="S", uid=0, start_time=1.0)
    assert _redact.describe_process(kthread)["cmdline"] == "[kthreadd]"


def test_masked_argv_is_the_list_form_of_the_description():
    # results that keep argv as a list (the probe's port holders and server members) mask it
    # the same way and show `[comm]` for a process without a command line
    from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _discovery
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
    proc = _procs.Proc(pid=42, ppid=1, pgid=42, sid=42, comm="srv", state="S", uid=0, start_time=1.0,
                       cmdline=["srv", "--api-key", "k3y-old", "sglang::x --api-key k3y-old"])
    assert _redact.masked_argv(proc.cmdline, proc.comm) == ["srv", "--api-key", MASK, "sglang::x --api-key " + MASK]
    assert " ".join(_redact.masked_argv(proc.cmdline, proc.comm)) == _redact.describe_cmdline(proc.cmdline, proc.comm)
    assert _redact.masked_argv([], "kthreadd") == ["[kthreadd]"]
    kthread = _procs.Proc(pid=2, ppid=0, pgid=0, sid=0, comm="kthreadd", state="S", uid=0, start_time=1.0)
    assert _discovery.Member(kthread, "other", "test").to_dict()["cmdline"] == ["[kthreadd]"]
    assert _discovery.Member(proc, "main", "test").to_dict()["cmdline"] == _redact.masked_argv(proc.cmdline, "srv")
