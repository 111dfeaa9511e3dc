"""Secret flags were recognised by a name suffix only (-token, -api-key, a fixed list).

`args: {ssl-keyfile-password: ...}` (an SGLang/uvicorn option) or any `--*-secret` flag went
unmasked into the launch record's fingerprint_inputs and argv, module results, diffs and the
world-readable report, and was not kept in the 0600 secrets file (only values the record masks
are kept). Environment names had a wider rule (PASSWORD, SECRET, CREDENTIAL).

Now one secret-name rule (`_redact.is_secret_name`) judges argument and environment names alike;
the record masks these flags, the secrets file keeps them, argv and log text hide them.

The last test writes the record as root into a 0755 directory and reads it back as another user:
what any local user could read before.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._host import _last_good
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _cliargs

SECRET = "hunter2-rv-secret"
FLAGS = ("--ssl-keyfile-password", "--admin-secret", "--db-passwd", "--cloud-credential")


def _inputs(args):
    return _cliargs.fingerprint_inputs("/usr/bin/python3", "0.5.0", "sglang.launch_server", "/m", "127.0.0.1",
                                       30000, 1, args, {"TOKENIZERS_PARALLELISM": "false"}, None)


@pytest.mark.parametrize("flag", FLAGS)
def test_the_record_masks_the_flag_and_the_secrets_file_keeps_it(flag):
    args = {flag: SECRET, "--tokenizer-path": "/tok", "--max-total-tokens": 4096}
    hashed, redacted = _inputs(args)
    assert redacted["args"][flag] == _redact.MASK
    assert hashed["args"][flag].startswith("sha256:")
    # settings whose names only look like secrets stay readable
    assert redacted["args"]["--tokenizer-path"] == "/tok"
    assert redacted["args"]["--max-total-tokens"] == 4096
    assert redacted["env"]["TOKENIZERS_PARALLELISM"] == "false"
    kept = _last_good.launch_secrets(None, args, {}, redacted)
    assert kept["args"] == {flag: SECRET}
    assert _cliargs.is_secret_arg(flag.lstrip("-").replace("-", "_"))
    assert SECRET in _cliargs.argv_secrets(None, args, {})


@pytest.mark.parametrize("flag", FLAGS)
def test_argv_and_log_text_hide_the_value(flag):
    argv = ["python", "-m", "sglang.launch_server", flag, SECRET, "%s=%s" % (flag, SECRET), "--port", "1"]
    shown = _redact.redact_argv(argv)
    assert SECRET not in " ".join(shown)
    assert shown[-2:] == ["--port", "1"]
    assert SECRET not in json.dumps(_redact.redact_deep({"argv": argv}))
    log = "server_args=ServerArgs(%s='%s', port=1)" % (flag.lstrip("-").replace("-", "_"), SECRET)
    assert SECRET not in _redact.redact_text(log)


def test_another_user_reading_the_record_never_sees_the_value(throwaway_user, shared_tmp):
    _hashed, redacted = _inputs({"--ssl-keyfile-password": SECRET})
    path = os.path.join(shared_tmp, "inst.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(_redact.redact_deep({"fingerprint_inputs": redacted}), fh)
    os.chmod(path, 0o644)  # what the report and result views are: readable by others
    seen = throwaway_user.run([sys.executable, "-c", "import sys; print(open(sys.argv[1]).read())", path]).stdout
    assert "ssl-keyfile-password" in seen and SECRET not in seen
