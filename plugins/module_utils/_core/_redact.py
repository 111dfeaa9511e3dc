"""Secrets never leave the library in clear: argv, environments and log text are redacted here."""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

MASK = "********"
# Result keys whose value is a secret wherever they appear (server_info, records, inputs).
SECRET_KEYS = ("api_key", "admin_api_key", "hf_token")

# Flags whose value is a secret (sglang: --api-key, --admin-api-key; hub tokens). Any other flag
# whose name is_secret_name says so is masked too (--ssl-keyfile-password, --admin-secret, ...).
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--hf-token", "--token")
# The one secret-name rule, for arguments and environment variables alike (a name is read upper
# case, "-" as "_"): it says token, secret, password, credential or API key, or ends in _KEY.
# TOKENIZER and TOKENS (a tokenizer's path, token counts) are settings, not secrets.
_SECRET_NAME = re.compile(r"(TOKEN(?!IZER|S(?:_|$))|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|_KEY$|CREDENTIAL)", re.I)
_TEXT_PATTERNS = (
    # server_args=ServerArgs(..., api_key='abc', ...) as sglang logs it
    re.compile(r"((?:admin_)?api_key\s*=\s*)('[^']*'|\"[^\"]*\"|[^,\s)]+)"),
    re.compile(r"(\"(?:admin_)?api_key\"\s*:\s*)(\"[^\"]*\")"),
    re.compile(r"(Bearer\s+)(\S+)"),
    re.compile(r"(--(?:admin-api-key|api-key|hf-token|token)[= ]\s*)(\S+)"),
    # --ssl-keyfile-password x, ssl_keyfile_password='x' (ServerArgs), --admin-secret=x
    re.compile(r"(--[\w-]*(?:password|passwd|secret|credential)[\w-]*[= ]\s*)(\S+)", re.I),
    re.compile(r"(\b\w*(?:password|passwd|secret|credential)\w*\s*=\s*)('[^']*'|\"[^\"]*\"|[^,\s)]+)", re.I),
    re.compile(r"((?:HF_TOKEN|HUGGING_FACE_HUB_TOKEN)=)(\S+)"),
)


def is_secret_name(name: str) -> bool:
    """True when `name` (an env variable, a flag --x-y or an args key x_y) holds a secret."""
    return bool(_SECRET_NAME.search(str(name).strip().lstrip("-").replace("-", "_")))


def is_secret_env(key: str) -> bool:
    return is_secret_name(key)


def is_secret_flag(flag: str) -> bool:
    """True for a long flag (`--name`) whose value is a secret."""
    return flag in SECRET_FLAGS or (flag.startswith("--") and is_secret_name(flag))


def redact_env(env: Mapping[str, str]) -> Dict[str, str]:
    return {k: (MASK if is_secret_env(k) and v else v) for k, v in env.items()}


def redact_argv(argv: Iterable[str], extra_flags: Iterable[str] = ()) -> List[str]:
    """Mask the value after a secret flag, in both `--flag value` and `--flag=value` forms."""
    flags = tuple(SECRET_FLAGS) + tuple(extra_flags)
    out: List[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            mask_next = False
            if not arg.startswith("--"):  # a secret-named switch without a value: the next flag stays
                out.append(MASK)
                continue
        name, eq, _value = arg.partition("=")
        if name in flags or is_secret_flag(name):
            if eq:
                out.append(name + "=" + MASK)
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append(arg)
    return out


def redact_text(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """Mask known secret shapes, then every literal secret value we were given."""
    for pattern in _TEXT_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, MASK)
    return text


def redact_deep(data: Any, secrets: Iterable[Optional[str]] = (), keys: Iterable[str] = SECRET_KEYS) -> Any:
    """The one deep redaction: a copy of JSON-like data with secret keys masked at any depth,
    lists of strings read as argv (a value after a secret flag masked), and every string
    through redact_text (secret shapes and every literal secret value given)."""
    hidden = set(keys)
    values = [s for s in secrets if s]

    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {k: (MASK if k in hidden and node[k] else walk(v)) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            items = list(node)
            if items and all(isinstance(i, str) for i in items):
                items = redact_argv(items)
            return [walk(i) for i in items]
        if isinstance(node, str):
            return redact_text(node, values)
        return node

    return walk(data)


# --- describing a process ----------------------------------------------------------------------

def mask_cmdline(argv: Sequence[str], extra_flags: Iterable[str] = ()) -> List[str]:
    """A process's argv fit to show: the value after every secret flag masked, and secret shapes
    inside each argument too (a setproctitle title is one string: `srv --api-key X`)."""
    return [redact_text(arg) for arg in redact_argv(argv, extra_flags)]


def masked_argv(argv: Sequence[str], comm: Optional[str]) -> List[str]:
    """A process's argv as a list fit to show (mask_cmdline), `[comm]` when it has none
    (kernel threads, zombies): the list form of describe_cmdline, for results that keep argv."""
    return mask_cmdline(argv) or ["[%s]" % comm]


def describe_cmdline(argv: Sequence[str], comm: Optional[str] = None, limit: int = 0) -> str:
    """The one-line command line of a process for messages and results, secrets masked;
    `[comm]` when it has none (kernel threads, zombies); cut to `limit` characters when > 0."""
    text = " ".join(mask_cmdline(argv)) or ("[%s]" % comm if comm else "")
    if limit and len(text) > limit:
        text = text[:max(0, limit - 3)] + "..."
    return text


def describe_process(proc: Any, limit: int = 0, **extra: Any) -> Dict[str, Any]:
    """The one description of a process for messages and results: pid, name, user and its
    command line as one string, secrets masked (`[comm]` when it has none; cut to `limit`
    characters when > 0), plus `extra`. `proc` is a _procs.Proc (pid, comm, user, cmdline)."""
    out: Dict[str, Any] = {"pid": proc.pid, "name": proc.comm, "user": proc.user,
                           "cmdline": describe_cmdline(proc.cmdline, proc.comm, limit)}
    out.update(extra)
    return out


# --- the last line of defence: every module result ---------------------------------------------

def redact_result(result: Mapping[str, Any], secrets: Iterable[Optional[str]] = ()) -> Dict[str, Any]:
    """Copy of a module result fit to return (redact_deep of the whole result)."""
    return dict(redact_deep(dict(result), secrets))
