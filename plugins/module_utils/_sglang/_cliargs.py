"""Server arguments: the operator's `args` mapping -> an argv list, checked against the flags
that THIS sglang version really has (introspected argparse data), plus the fingerprint.

Everything here is pure: no processes, no files. The fingerprint covers every input that
defines the server, secrets included as sha256 digests only, so a changed key is a changed
config although the key itself is never stored.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._core._redact import MASK, SECRET_FLAGS, is_secret_env, \
    is_secret_flag

# Flags owned by dedicated module parameters (canonical name -> parameter). Their aliases are
# caught through the introspected option_strings as well.
DEDICATED_FLAGS: Dict[str, str] = {
    "--model-path": "model_path",
    "--model": "model_path",
    "--host": "host",
    "--port": "port",
    "--tp-size": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--api-key": "api_key",
}
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_FLAG_INT_TYPES = ("int", "human_readable_int")
_FLAG_FLOAT_TYPES = ("float",)


def normalize_key(key: object) -> str:
    """'reasoning_parser' / 'reasoning-parser' -> '--reasoning-parser'. A key with leading
    dashes or spaces is refused: it usually means a copy-paste of a command line, and guessing
    would hide typos such as '--reasoning-parser kimi_k2' as one key."""
    if not isinstance(key, str) or not key:
        raise ValueError("args key %r is not a non-empty string" % (key,))
    if key.startswith("-"):
        raise ValueError("args key %r starts with '-': write it without dashes, e.g. %r"
                         % (key, key.lstrip("-").replace("_", "-")))
    if any(ch.isspace() for ch in key):
        raise ValueError("args key %r contains whitespace: one key per flag, the value goes in the "
                         "mapping value" % (key,))
    if not _KEY.match(key):
        raise ValueError("args key %r has characters other than letters, digits, '-' and '_'" % (key,))
    return "--" + key.replace("_", "-")


def normalize_args(args: Optional[Mapping[str, Any]]) -> Tuple[Dict[str, Any], List[str]]:
    """Keys normalised to '--flag' form (order kept); errors for bad keys, duplicate spellings
    of one flag, and values of an unsupported type."""
    out: Dict[str, Any] = {}
    errors: List[str] = []
    for key, value in (args or {}).items():
        try:
            flag = normalize_key(key)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        if flag in out:
            errors.append("args gives flag %s twice (as %r and another spelling)" % (flag, key))
            continue
        problem = _value_problem(flag, value)
        if problem:
            errors.append(problem)
            continue
        out[flag] = value
    return out, errors


def _value_problem(flag: str, value: Any) -> Optional[str]:
    scalars = (str, int, float, bool, type(None))
    if isinstance(value, (list, tuple)):
        bad = [v for v in value if not isinstance(v, (str, int, float)) or isinstance(v, bool)]
        if bad:
            return "args %s: list items must be strings or numbers, got %r" % (flag, bad[0])
        return None
    if isinstance(value, dict):
        return None  # passed as one JSON string (e.g. --json-model-override-args)
    if not isinstance(value, scalars):
        return "args %s: unsupported value type %s" % (flag, type(value).__name__)
    if isinstance(value, str) and "\0" in value:
        return "args %s: value contains a NUL byte" % flag
    return None


def dedicated_conflicts(args: Mapping[str, Any], flags: Optional[Mapping[str, Dict[str, Any]]] = None) -> List[str]:
    """Errors for flags that a dedicated parameter owns (also through argparse aliases)."""
    errors = []
    for flag in args:
        names = {flag}
        info = lookup(flags, flag) if flags else None
        if info:
            names.update(info.get("option_strings") or [])
        owned = sorted(n for n in names if n in DEDICATED_FLAGS)
        if owned:
            param = DEDICATED_FLAGS[owned[0]]
            errors.append("args %s duplicates the %r parameter: set %s instead" % (flag, param, param))
    return errors


def lookup(flags: Optional[Mapping[str, Dict[str, Any]]], flag: str) -> Optional[Dict[str, Any]]:
    """The introspected entry for '--flag' (by name or by one of its option_strings)."""
    if not flags:
        return None
    if flag in flags:
        return flags[flag]
    for info in flags.values():
        if flag in (info.get("option_strings") or []):
            return info
    return None


def is_bare_flag(info: Optional[Mapping[str, Any]]) -> bool:
    """store_true/store_const/count style: takes no value."""
    if not info:
        return False
    action = str(info.get("action") or "").lower()
    if info.get("nargs") == 0 or info.get("nargs") == "0":
        return True
    flag_actions = ("store_true", "storetrue", "store_false", "storefalse", "store_const", "storeconst", "count")
    return any(word in action for word in flag_actions)


def takes_many(info: Optional[Mapping[str, Any]]) -> bool:
    """nargs '+', '*' or N>1: one flag followed by all list items (repeating would keep only
    the last occurrence)."""
    if not info:
        return False
    nargs = info.get("nargs")
    return nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)


def _type_name(info: Mapping[str, Any]) -> str:
    raw = info.get("type")
    if raw is None:
        return ""
    name = raw if isinstance(raw, str) else getattr(raw, "__name__", str(raw))
    # "<class 'int'>" / "builtins.int" / "int" -> "int"
    match = re.search(r"([A-Za-z_][A-Za-z0-9_]*)'?>?$", name)
    return match.group(1) if match else name


def _check_type(flag: str, info: Mapping[str, Any], value: Any) -> Optional[str]:
    tname = _type_name(info)
    if tname in _FLAG_INT_TYPES:
        if isinstance(value, bool) or isinstance(value, float):
            return "args %s expects an integer, got %r" % (flag, value)
        if isinstance(value, str):
            ok = re.fullmatch(r"\s*-?\d+\s*", value) or (
                tname == "human_readable_int" and re.fullmatch(r"\d+(\.\d+)?(Ki|Mi|Gi|Ti|k|M|G|T)", value.strip()))
            if not ok:
                return "args %s expects an integer, got %r" % (flag, value)
    elif tname in _FLAG_FLOAT_TYPES:
        if isinstance(value, bool):
            return "args %s expects a number, got %r" % (flag, value)
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return "args %s expects a number, got %r" % (flag, value)
    return None


def _check_choices(flag: str, info: Mapping[str, Any], value: Any, version: str) -> Optional[str]:
    choices = info.get("choices")
    if not choices:
        return None
    allowed = [str(c) for c in choices]
    if str(value) in allowed:
        return None
    near = difflib.get_close_matches(str(value), allowed, n=3)
    hint = " (did you mean %s?)" % ", ".join(near) if near else ""
    return ("args %s=%r is not a valid choice in sglang %s%s; valid choices: %s"
            % (flag, value, version or "(unknown version)", hint, ", ".join(allowed)))


def validate_against_flags(args: Mapping[str, Any], flags: Mapping[str, Dict[str, Any]],
                           version: str = "") -> List[str]:
    """Every flag must exist in THIS sglang version, bare flags get booleans, value flags get
    values, numbers where argparse wants numbers, values inside `choices`."""
    errors: List[str] = []
    known = sorted({s for info in flags.values() for s in (info.get("option_strings") or [])} | set(flags))
    for flag, value in args.items():
        info = lookup(flags, flag)
        if info is None:
            near = difflib.get_close_matches(flag, known, n=3)
            hint = "; did you mean %s?" % ", ".join(near) if near else ""
            errors.append("args %s: sglang %s has no flag %s%s"
                          % (flag, version or "(unknown version)", flag, hint))
            continue
        if value is None or value is False:
            continue  # omitted from argv
        if is_bare_flag(info):
            if value is not True:
                errors.append("args %s takes no value (it is a switch): use true or false, got %r"
                              % (flag, value))
            continue
        if value is True:
            errors.append("args %s needs a value; true only works for switches" % flag)
            continue
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if isinstance(value, dict):
            continue
        for item in items:
            problem = _check_type(flag, info, item) or _check_choices(flag, info, item, version)
            if problem:
                errors.append(problem)
    return errors


def _str_value(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def args_to_argv(args: Mapping[str, Any], flags: Optional[Mapping[str, Dict[str, Any]]] = None) -> List[str]:
    """true -> bare flag; false/None -> omitted; list -> repeated flag (or one flag with all
    items for nargs '+'/'*'); dict -> one JSON string; anything else -> its string."""
    argv: List[str] = []
    for flag, value in args.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
            continue
        if isinstance(value, (list, tuple)):
            if takes_many(lookup(flags, flag)):
                argv.append(flag)
                argv.extend(_str_value(v) for v in value)
            else:
                for item in value:
                    argv.extend([flag, _str_value(item)])
            continue
        argv.extend([flag, _str_value(value)])
    return argv


def server_argv(entry: Sequence[str], model_path: str, host: str, port: int, tp_size: int,
                args: Mapping[str, Any], api_key: Optional[str] = None,
                flags: Optional[Mapping[str, Dict[str, Any]]] = None) -> List[str]:
    """The full command line: entry point, dedicated flags, then the operator's args."""
    argv = list(entry) + ["--model-path", model_path, "--host", host, "--port", str(port),
                          "--tp-size", str(tp_size)]
    if api_key:
        argv += ["--api-key", api_key]  # sglang only takes it on argv; redacted everywhere else
    return argv + args_to_argv(args, flags)


def expected_server_info(model_path: str, tp_size: int, port: int, args: Mapping[str, Any]) -> Dict[str, Any]:
    """What /server_info must report for this launch (names as sglang reports them)."""
    expect: Dict[str, Any] = {"model_path": model_path, "tp_size": tp_size, "port": port}
    for flag, value in args.items():
        if flag.endswith("-parser") and value not in (None, False, True):
            expect[flag[2:].replace("-", "_")] = value
    return expect


# --- fingerprint ---------------------------------------------------------------------------

def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _secret_arg(flag: str) -> bool:
    """_redact's one secret-name rule (the env's): --ssl-keyfile-password, --x-secret, --x-token."""
    return is_secret_flag(flag)


def fingerprint_inputs(interpreter: str, sglang_version: str, entrypoint: str, model_path: str,
                       host: str, port: int, tp_size: int, args: Mapping[str, Any],
                       env: Mapping[str, str], api_key: Optional[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(hashed, redacted): the same inputs twice. `hashed` replaces each secret by its sha256
    (what the fingerprint is computed over); `redacted` masks it (what is stored and shown)."""
    base: Dict[str, Any] = {
        "interpreter": interpreter, "sglang_version": sglang_version, "entrypoint": entrypoint,
        "model_path": model_path, "host": host, "port": port, "tp_size": tp_size,
    }
    # false/null flags never reach argv: leaving them out keeps `x: false` == no x.
    norm_args = {k: args[k] for k in sorted(args) if args[k] is not None and args[k] is not False}
    norm_env = {k: env[k] for k in sorted(env)}
    hashed = dict(base)
    redacted = dict(base)
    hashed["args"] = {k: ("sha256:" + sha256_text(_str_value(v)) if _secret_arg(k) and v not in (None, False, True) else v)
                      for k, v in norm_args.items()}
    redacted["args"] = {k: (MASK if _secret_arg(k) and v not in (None, False, True) else v)
                        for k, v in norm_args.items()}
    hashed["env"] = {k: ("sha256:" + sha256_text(v) if is_secret_env(k) and v else v) for k, v in norm_env.items()}
    redacted["env"] = {k: (MASK if is_secret_env(k) and v else v) for k, v in norm_env.items()}
    hashed["api_key"] = "sha256:" + sha256_text(api_key) if api_key else None
    redacted["api_key"] = MASK if api_key else None
    return hashed, redacted


def fingerprint(hashed_inputs: Mapping[str, Any]) -> str:
    return sha256_text(json.dumps(hashed_inputs, sort_keys=True, separators=(",", ":")))


def diff_inputs(before: Optional[Mapping[str, Any]], after: Mapping[str, Any],
                fingerprints_differ: bool = True) -> List[Dict[str, Any]]:
    """What changed between two redacted fingerprint_inputs, one entry per top-level key or
    per args/env key. Equal redacted views with different fingerprints mean a secret changed."""
    before = before or {}
    changes: List[Dict[str, Any]] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            for sub in sorted(set(old) | set(new)):
                if old.get(sub) != new.get(sub) or (sub in old) != (sub in new):
                    changes.append({"key": "%s.%s" % (key, sub), "before": old.get(sub), "after": new.get(sub)})
        elif old != new:
            changes.append({"key": key, "before": old, "after": new})
    if not changes and fingerprints_differ:
        secrets = [k for k in ("api_key",) if after.get(k)]
        secrets += ["args.%s" % k for k, v in (after.get("args") or {}).items() if v == MASK]
        secrets += ["env.%s" % k for k, v in (after.get("env") or {}).items() if v == MASK]
        changes.append({"key": "secret", "before": MASK, "after": MASK,
                        "note": "a secret value changed (one of: %s)" % (", ".join(secrets) or "none set now")})
    return changes


def inputs_text(inputs: Optional[Mapping[str, Any]]) -> str:
    """Stable text for ansible's diff view (before/after strings)."""
    if not inputs:
        return ""
    return json.dumps(inputs, indent=2, sort_keys=True) + "\n"


def argv_secrets(api_key: Optional[str], args: Mapping[str, Any], env: Mapping[str, str]) -> List[str]:
    """Every literal secret value, for redact_text on log tails."""
    out = [api_key] if api_key else []
    out += [_str_value(v) for k, v in args.items() if _secret_arg(k) and v not in (None, False, True)]
    out += [v for k, v in env.items() if is_secret_env(k) and v]
    return [s for s in out if s]


def is_secret_arg(key: str) -> bool:
    """True for an `args` key (any spelling: api_key, --api-key, hf-token) that holds a secret."""
    flag = "--" + str(key).strip().lstrip("-").replace("_", "-")
    return _secret_arg(flag)


def secret_arg_flags(args: Iterable[str]) -> List[str]:
    """Flags beyond _redact.SECRET_FLAGS whose values redact_argv must mask too."""
    return [f for f in args if _secret_arg(f) and f not in SECRET_FLAGS]
