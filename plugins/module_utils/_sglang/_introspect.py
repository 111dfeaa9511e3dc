"""The CLI of THE sglang an interpreter would run: every flag with type, default, choices, help.

sglang has no JSON dump of its arguments, and `--help | grep` hides failures (incident #1).
So the target interpreter runs `sglang.launch_server` as `python -m` would, with
`ArgumentParser.parse_args`/`parse_known_args` patched to capture the parser that knows
`--model-path` and stop right there: before any model, GPU or network work, in every version
(0.5.6 and 0.5.23 both build the parser in `prepare_server_args` and parse it first thing).
Fallback: `ServerArgs.add_cli_args(ArgumentParser())`. Results are cached per install.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tempfile
import time
from typing import Any, Dict, Optional

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._interpreter import Interpreter
from ansible_collections.llmops.sglang.plugins.module_utils._host._record import (
    default_state_dir, dir_problem, ensure_dir, io_error, write_json_atomic)

CACHE_VERSION = 2  # 2: warnings are one-line summaries, not tracebacks

# Runs inside the target interpreter; argv[1] is the file that receives the JSON result
# (stdout belongs to the server code, which may print anything).
_SCRIPT = r'''
import argparse, json, os, sys, traceback
OUT = sys.argv[1]

class _Captured(BaseException):  # BaseException: sglang's `except Exception` cannot swallow it
    pass

_orig = {"parse_args": argparse.ArgumentParser.parse_args,
         "parse_known_args": argparse.ArgumentParser.parse_known_args}
_seen = []

def _wrap(name):
    def method(self, *args, **kwargs):
        if "--model-path" in getattr(self, "_option_string_actions", {}):
            _seen.append(self)
            raise _Captured()
        return _orig[name](self, *args, **kwargs)
    return method

argparse.ArgumentParser.parse_args = _wrap("parse_args")
argparse.ArgumentParser.parse_known_args = _wrap("parse_known_args")

def _jsonable(value):
    if value is argparse.SUPPRESS:
        return None
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, (set, frozenset, tuple)):
            return [_jsonable(v) for v in value]
        return repr(value)

_BUILTIN_TYPES = {str: "str", int: "int", float: "float", bool: "bool"}

def _dump(parser, source):
    names = {}
    for key, cls in parser._registries.get("action", {}).items():
        if isinstance(cls, type) and key is not None:
            names.setdefault(cls, key)
    names[argparse._StoreAction] = "store"
    flags = {}
    for act in parser._actions:
        if isinstance(act, argparse._HelpAction) or not act.option_strings:
            continue
        action = names.get(type(act), type(act).__name__)
        if act.type is not None:
            kind = _BUILTIN_TYPES.get(act.type) or getattr(act.type, "__name__", repr(act.type))
        elif act.nargs == 0:
            kind = "bool"
        elif action in ("store", "append"):
            kind = "str"
        elif action == "count":
            kind = "int"
        else:
            kind = None
        help_text = act.help
        hidden = help_text is argparse.SUPPRESS
        if hidden:
            help_text = ""
        elif help_text:
            try:
                help_text = parser._get_formatter()._expand_help(act)
            except Exception:
                pass
        entry = {
            "option_strings": list(act.option_strings), "dest": act.dest, "type": kind,
            "default": _jsonable(act.default),
            "choices": [_jsonable(c) for c in act.choices] if act.choices is not None else None,
            "nargs": _jsonable(act.nargs), "required": bool(act.required), "action": action,
            "help": help_text or "", "hidden": hidden,
            "metavar": _jsonable(act.metavar),
        }
        long_names = [o for o in act.option_strings if o.startswith("--")]
        flags[(long_names or act.option_strings)[0]] = entry
    return {"flags": flags, "source": source, "prog": parser.prog}

def _version():
    try:
        try:
            import importlib.metadata as md
        except ImportError:
            import importlib_metadata as md
        return md.version("sglang")
    except Exception:
        return None

def _summary(exc):
    """One line an operator can act on: what failed, and where in sglang's import chain."""
    loc = None
    tb = exc.__traceback__
    while tb is not None:  # the innermost frame that is not importlib/runpy machinery
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith("<"):
            loc = "%s:%d" % (name, tb.tb_lineno)
        tb = tb.tb_next
    where = (" (at %s)" % loc) if loc else ""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return ("Python module '%s' is not installed in %s%s"
                % (exc.name, sys.prefix, (" (imported at %s)" % loc) if loc else "")), exc.name
    text = ("%s: %s" % (type(exc).__name__, exc)) if str(exc) else type(exc).__name__
    text = text.splitlines()[0][:500] + where
    root, seen = exc, set()
    while id(root) not in seen:  # transformers' lazy imports hide the real error behind its own
        seen.add(id(root))
        nxt = root.__cause__ or (None if root.__suppress_context__ else root.__context__)
        if nxt is None:
            break
        root = nxt
    if root is not exc and not isinstance(root, _Captured):
        cause, name = _summary(root)
        return text + ", caused by " + cause, name
    return text, None

def _purge_sglang():
    # A failed `import sglang` leaves half-initialised submodules behind (0.5.23: the
    # namespace package sglang.srt without its parent), and the next import then dies with
    # KeyError('sglang') instead of the real cause.
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    import importlib
    importlib.invalidate_caches()

result = None
errors = []
summaries = []
missing = None
sys.argv = ["launch_server", "--model-path", "x"]
try:
    import runpy
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    errors.append("sglang.launch_server returned without parsing its arguments")
    summaries.append(errors[-1])
except _Captured:
    result = _dump(_seen[-1], "sglang.launch_server")
except BaseException as exc:
    errors.append(traceback.format_exc())
    text, missing = _summary(exc)
    summaries.append(text)
if result is None:
    _purge_sglang()
    try:
        from sglang.srt.server_args import ServerArgs
        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        result = _dump(parser, "sglang.srt.server_args.ServerArgs.add_cli_args")
    except BaseException as exc:
        errors.append(traceback.format_exc())
        text, name = _summary(exc)
        missing = missing or name
        if text not in summaries:
            summaries.append("fallback ServerArgs.add_cli_args: " + text)
if result is None or not result["flags"]:
    sys.stderr.write("\n".join(errors) or "no flags found\n")
    sys.stderr.flush()
    with open(OUT, "w") as fh:
        json.dump({"error": "; ".join(summaries) or "the sglang parser has no flags",
                   "missing_module": missing}, fh)
    os._exit(3)
result["sglang_version"] = _version()
result["warnings"] = []
if result["source"] != "sglang.launch_server" and summaries:
    result["warnings"].append(
        "sglang.launch_server did not get as far as parsing its arguments (%s); the flags come from "
        "ServerArgs.add_cli_args, which misses any flag the launcher adds itself" % summaries[0])
with open(OUT, "w") as fh:
    json.dump(result, fh)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)  # skip atexit hooks and non-daemon threads the import may have started
'''


def default_cache_dir() -> str:
    return os.path.join(default_state_dir(), "introspect-cache")


def cache_key(interp: Interpreter) -> str:
    """Same interpreter + same install (version, location, mtime) -> same CLI."""
    parts = [interp.path, os.path.realpath(interp.path), interp.sglang_version or "",
             interp.sglang_location or "", repr(interp.install_mtime), str(CACHE_VERSION)]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def _read_cache(path: str) -> Optional[Dict[str, Any]]:
    """A valid cache entry or None; a corrupted file is ignored (and rewritten by the caller)."""
    data = _read_result(path)
    if data is None or not isinstance(data.get("flags"), dict) or not data["flags"]:
        return None
    if data.get("source") != "sglang.launch_server":  # fallbacks are never cached (see introspect)
        return None
    return data


def _write_cache(path: str, data: Dict[str, Any]) -> Optional[str]:
    """Best effort: a read-only or unsafe state dir must not fail an introspection. The cache
    dir and any missing parent (the state dir itself, on a first run) are created 0700."""
    try:
        ensure_dir(os.path.dirname(path), label="introspection cache dir")
        write_json_atomic(path, data, mode=0o600)
    except SglangError as exc:
        return "introspection cache not written: %s" % exc.msg
    return None


def _run(interp: Interpreter, timeout: float) -> Dict[str, Any]:
    try:
        scratch = tempfile.TemporaryDirectory(prefix="llmops-introspect-")
    except OSError as exc:
        raise io_error("create a scratch directory for introspection in", tempfile.gettempdir(), exc)
    with scratch as tmp:
        out_path = os.path.join(tmp, "flags.json")
        env = dict(os.environ)
        env.pop("PYTHONSTARTUP", None)
        env["TMPDIR"] = tmp  # anything the import creates (ZMQ sockets, ...) goes away with tmp
        proc = subprocess.Popen([interp.path, "-c", _SCRIPT, out_path], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp, env=env,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise SglangError("introspecting sglang with %s took longer than %.0f s" % (interp.path, timeout),
                              reason="introspect_timeout", python=interp.path)
        finally:
            _kill_group(proc)  # the import may have spawned helpers; they die with the session
        err = stderr.decode("utf-8", "replace").strip()
        data = _read_result(out_path)
        if proc.returncode != 0 or data is None or "flags" not in data:
            failure = data.get("error") if isinstance(data, dict) else None
            tail = (failure or " | ".join(err.splitlines()[-3:])
                    or stdout.decode("utf-8", "replace").strip()[-500:])
            missing = data.get("missing_module") if isinstance(data, dict) else None
            raise SglangError("cannot read the sglang CLI with %s (exit %s): %s"
                              % (interp.path, proc.returncode, tail or "no output"),
                              reason="introspect_failed", python=interp.path,
                              rc=proc.returncode, stderr=err[-8000:], missing_module=missing)
        return data


def _read_result(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def introspect(interp: Interpreter, cache_dir: Optional[str] = None, timeout: float = 180) -> Dict[str, Any]:
    """{"flags", "cached", "seconds", "sglang_version", "interpreter", "source", "cache_path"}.
    Raises SglangError (with the interpreter's stderr) instead of ever returning no flags."""
    started = time.monotonic()
    if not interp.sglang_installed:
        raise SglangError("python %s has no sglang installed: cannot introspect its CLI" % interp.path,
                          reason="sglang_missing", python=interp.path, stderr=interp.error or "")
    path = os.path.join(cache_dir or default_cache_dir(), cache_key(interp) + ".json")
    # A cache dir another user could write is neither read nor written (they could forge flags).
    unsafe = dir_problem(os.path.dirname(path), "introspection cache dir")
    note = ("introspection cache not used: %s" % unsafe) if unsafe else None
    data = None if unsafe else _read_cache(path)
    cached = data is not None
    if data is None:
        data = _run(interp, timeout)
        data["interpreter"] = interp.path
        data["sglang_version"] = data.get("sglang_version") or interp.sglang_version
        if data.get("source") == "sglang.launch_server" and not unsafe:
            note = _write_cache(path, data)
        # else a fallback: not cached, so installing what the launcher missed takes effect at once
        # (the cache key only sees the sglang install, not its dependencies)
    return {
        "flags": data["flags"], "cached": cached, "seconds": round(time.monotonic() - started, 3),
        "sglang_version": data.get("sglang_version"), "interpreter": interp.path,
        "source": data.get("source"),
        "cache_path": path if note is None and (cached or data.get("source") == "sglang.launch_server") else None,
        "warnings": list(data.get("warnings") or []) + ([note] if note else []),
    }


def normalize_flag(name: str) -> str:
    """"reasoning-parser", "--reasoning-parser", "reasoning_parser" -> "--reasoning-parser"."""
    return "--" + name.strip().lstrip("-").replace("_", "-")


def flag_lookup(flags: Dict[str, Dict[str, Any]], name: str) -> Optional[Dict[str, Any]]:
    """The flag entry for any spelling of its name, aliases and dest included; None if absent."""
    wanted = normalize_flag(name)
    if wanted in flags:
        return flags[wanted]
    dest = name.strip().lstrip("-").replace("-", "_")
    for entry in flags.values():
        if wanted in entry.get("option_strings", ()) or name.strip() in entry.get("option_strings", ()):
            return entry
    for entry in flags.values():
        if entry.get("dest") == dest:
            return entry
    return None
