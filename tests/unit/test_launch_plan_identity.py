"""sglang_launch's decision on a running server of the requested configuration whose code or model
changed on disk since it started (in-process, no file is read: the identities are built here)."""
from __future__ import annotations

from typing import Any, Dict

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._launch._launch_plan import (
    NOOP, REFUSE, RELAUNCH, Facts, decide, wants_probe)
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._code_identity import CodeIdentity, Root

PKG = "/venv/lib/python3.11/site-packages/sglang"
CODE = {"__init__.py": (10, 1), "launch_server.py": (20, 2), "srt/models/deepseek_v2.py": (300, 3),
        "srt/models/llama.py": (200, 4)}
SHARDS = {"model-%05d-of-00064.safetensors" % i: [4 << 30, 100 + i] for i in range(1, 65)}
MODEL = {"version": 1, "path": "/models/m", "files": dict(SHARDS, **{"config.json": [500, 7]})}


def code(listing: Dict[str, Any]) -> CodeIdentity:
    return CodeIdentity(package=PKG, source="installed", roots=[Root(PKG, "package", dict(listing))])


RECORD = {"name": "serving", "pid": 4242, "start_time": 1.5, "port": 8000, "fingerprint": "fp",
          "fingerprint_inputs": {"model_path": "/models/m"}, "log_path": "/logs/serving.log",
          "code_identity": code(CODE).record(), "model_identity": MODEL}
OURS = {"pid": 4242, "user": "root", "cmdline": ["python"], "address": "127.0.0.1", "instance": True,
        "sglang": "this instance", "foreign": False}
PATCHED = dict(CODE, **{"srt/models/deepseek_v2.py": (340, 9), "srt/hs_dump.py": (50, 9)})
NEW_SHARD = dict(MODEL, files=dict(MODEL["files"], **{"model-00003-of-00064.safetensors": [4 << 30, 999]}))


def facts(check_mode: bool, record=None, code_now=None, model_now=None, **kw: Any) -> Facts:
    record = RECORD if record is None else record
    code_now = CODE if code_now is None else code_now
    model_now = MODEL if model_now is None else model_now
    base: Dict[str, Any] = dict(name="serving", host="127.0.0.1", port=8000, check_mode=check_mode,
                                fingerprint="fp", inputs=record["fingerprint_inputs"], record=record, running=True,
                                port_state="instance", holders=(OURS,),
                                identity={"code": code(code_now), "model": model_now})
    base.update(kw)
    return Facts(**base)


# (situation, facts kw, check mode, action, reason)
TABLE = [
    ("unchanged", {}, True, NOOP, "running"),
    ("unchanged", {}, False, NOOP, "running"),
    ("code patched", dict(code_now=PATCHED), True, RELAUNCH, "code_changed"),
    ("code patched", dict(code_now=PATCHED), False, REFUSE, "code_changed"),
    ("shard replaced", dict(model_now=NEW_SHARD), True, RELAUNCH, "model_changed"),
    ("shard replaced", dict(model_now=NEW_SHARD), False, REFUSE, "model_changed"),
    ("both", dict(code_now=PATCHED, model_now=NEW_SHARD), True, RELAUNCH, "code_changed"),
    ("code ignored", dict(code_now=PATCHED, ignore_changes=("code",)), True, NOOP, "running"),
    ("model ignored", dict(model_now=NEW_SHARD, ignore_changes=("model",)), True, NOOP, "running"),
    ("old record", dict(record={k: v for k, v in RECORD.items() if not k.endswith("_identity")},
                        code_now=PATCHED, model_now=NEW_SHARD), True, NOOP, "running"),
    ("identity not read", dict(identity=None), True, NOOP, "running"),
]


@pytest.mark.parametrize("situation,kw,check_mode,action,reason", TABLE,
                         ids=["%s-%s" % (row[0], "check" if row[2] else "real") for row in TABLE])
def test_identity_table(situation, kw, check_mode, action, reason):
    d = decide(facts(check_mode, **kw))
    assert (d.action, d.reason) == (action, reason), d.message


def test_the_patch_is_named_in_the_decision_changes_and_diff():
    d = decide(facts(True, code_now=PATCHED))
    said = "sglang code changed since pid 4242 started: srt/models/deepseek_v2.py (+1 file)"
    assert d.message == "instance 'serving' is running (pid 4242) with the requested configuration, but %s: " \
                        "it must be restarted" % said
    assert [c["key"] for c in d.changes] == ["code"] and d.changes[0]["message"] == said
    assert d.changes[0]["files"] == {"modified": ["srt/models/deepseek_v2.py"], "added": ["srt/hs_dump.py"],
                                     "removed": []}
    assert d.diff["after"].endswith("# %s\n#   modified: srt/models/deepseek_v2.py\n#   added: srt/hs_dump.py\n"
                                    % said)
    real = decide(facts(False, code_now=PATCHED))
    assert real.failure.startswith(real.message) and "sglang_teardown" in real.failure
    # a server to restart is not probed first
    assert not wants_probe(facts(True, code_now=PATCHED)) and wants_probe(facts(True))


def test_a_replaced_shard_is_named():
    d = decide(facts(True, model_now=NEW_SHARD))
    assert d.changes[0]["message"] == "model weights changed: model-00003-of-00064.safetensors"
    config = dict(MODEL, files=dict(MODEL["files"], **{"config.json": [501, 8]}))
    assert decide(facts(True, model_now=config)).changes[0]["message"] == "model files changed: config.json"


def test_an_ignored_change_is_said_not_acted_on():
    d = decide(facts(True, code_now=PATCHED, ignore_changes=("code",)))
    assert d.warnings == ("sglang code changed since pid 4242 started: srt/models/deepseek_v2.py (+1 file) - "
                          "not restarted for it (ignore_changes: code)",)
    assert not d.changed and d.changes is None


def test_an_old_record_is_unknown_said_once_and_no_change():
    old = {k: v for k, v in RECORD.items() if not k.endswith("_identity")}
    d = decide(facts(True, record=old, code_now=PATCHED, model_now=NEW_SHARD))
    assert d.warnings == ("instance 'serving' (pid 4242) was launched before its launch record kept code and model "
                          "identity: whether sglang's code or the model's files changed since it started is unknown "
                          "(its next launch records them)",)
    assert not d.changed and d.diff["after"].count("#") == 0


def test_an_unchanged_server_says_nothing_about_identity():
    d = decide(facts(False))
    assert d.warnings == () and d.changes is None


def test_a_hub_model_has_no_identity_and_no_change():
    hub = dict(RECORD, model_identity=None)
    assert decide(facts(True, record=hub, model_now=None)).action == NOOP


def test_the_record_keeps_the_identity_and_the_result_its_summary(tmp_path):
    pkg = tmp_path / "site-packages" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "launch_server.py").write_text("#\n")

    class Interp:
        path, venv, is_venv, sglang_installed, sglang_location = "/v/bin/python", None, False, True, str(pkg)

    pf = _launch_exec.Preflight(report=_launch_exec._preflight.Report(), interp=Interp(), model_path="org/model")
    found = _launch_exec.read_identity({"identity_paths": []}, pf)
    assert found["code"].summary()["files"] == 1 and found["model"] is None
