"""PRIVATE to llmops.sglang. The one way a module ends: a redacted result or a failure with a reason.

Every module's main() builds its AnsibleModule and hands its body to `run()`. The body returns
the result dict or raises: SglangError (a precise message and a reason code set where it was
raised), OSError (named after its path), or anything else (internal_error, with the traceback
in `exception` so `-vvv` shows it, never as the message).
"""
from __future__ import annotations

import errno
import gc
import traceback
from typing import Any, Callable, Dict, Iterable, Mapping, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import redact_result

Body = Callable[[Any], Dict[str, Any]]

# errno -> reason: the faults an operator acts on differently (free space, permissions).
_OS_REASONS = {errno.ENOSPC: "no_space", errno.EDQUOT: "no_space", errno.EACCES: "permission_denied",
               errno.EPERM: "permission_denied", errno.EROFS: "read_only_fs", errno.ENOENT: "not_found"}


def os_error_reason(exc: OSError) -> str:
    return _OS_REASONS.get(exc.errno or 0, "io_error")


def os_error_message(exc: OSError) -> str:
    """`<path>: <strerror>` (and the second path of a rename/link), never a bare errno."""
    text = exc.strerror or str(exc)
    paths = [p for p in (exc.filename, getattr(exc, "filename2", None)) if p]
    return "%s: %s" % (" -> ".join(str(p) for p in paths), text) if paths else text


def failure(exc: BaseException, module_name: str) -> Dict[str, Any]:
    """The fail_json keyword arguments for an exception (msg, reason, details)."""
    if isinstance(exc, SglangError):
        details = dict(exc.details)
        details.setdefault("reason", "error")
        return dict(details, msg=exc.msg)
    if isinstance(exc, OSError):
        return dict(msg="%s: %s" % (module_name, os_error_message(exc)), reason=os_error_reason(exc),
                    path=exc.filename)
    return dict(msg="%s failed unexpectedly: %s: %s" % (module_name, type(exc).__name__, exc),
                reason="internal_error", exception=traceback.format_exc())


def _clean(data: Mapping[str, Any], secrets: Iterable[Optional[str]]) -> Dict[str, Any]:
    """Every result and failure leaves through the one redaction (msg included)."""
    return redact_result(data, secrets)


def started() -> None:
    """First in a module's main(). Run as a program, a module file turns the collector off
    while its code is imported (no sweep finds garbage in freshly imported modules; ~25 ms of
    every run): what the imports made lives as long as the module's process, so it is frozen
    (never swept) and the collector goes back on for the module's own work. Nothing happens
    when the collector is on (the module file was imported, not run)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def ending(module: Any) -> None:
    """A module process ends with its next call (exit_json/fail_json print the result, then
    sys.exit): what is alive now lives until then. gc.freeze() spares the interpreter's shutdown
    its cyclic collections over all of it (30-40 ms of every module run; reference counting
    still frees and closes everything as before). Only for a real AnsibleModule: a caller that
    goes on living (a test with a stand-in) keeps its collector as it was."""
    from ansible.module_utils.basic import AnsibleModule

    if isinstance(module, AnsibleModule):
        gc.freeze()


def run(module: Any, body: Body, module_name: str, secrets: Iterable[Optional[str]] = ()) -> None:
    """Run the module body and end the module: exit_json or fail_json, both redacted."""
    secrets = [s for s in secrets if s]
    try:
        result = body(module)
    except Exception as exc:  # the single failure path: see failure()
        fields = _clean(failure(exc, module_name), secrets)
        ending(module)
        module.fail_json(**fields)
        return
    fields = _clean(result, secrets)
    ending(module)
    module.exit_json(**fields)
