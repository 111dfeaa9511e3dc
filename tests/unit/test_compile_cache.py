"""The persistent compile/JIT caches (issue 34): the variables every launch gets and their
precedence, the directory's safety checks (refused with unsafe_dir, in the preflight), the cache
surviving a teardown, clear_cache, and the probe's bounded walk."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _compile_cache as cc
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._launch._preflight import Report
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options

# SGLang 0.5.23's redirect_third_party_caches() + SGLANG_DG_CACHE_DIR, under SGLANG_CACHE_DIR
EXPECTED = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "CUDA_CACHE_PATH": "nv",
            "TILELANG_CACHE_DIR": "tilelang", "FLASHINFER_WORKSPACE_BASE": "", "SGLANG_DG_CACHE_DIR": "deep_gemm"}


@pytest.fixture
def safe_root():
    """A private directory where every directory above is root's or ours and not writable by
    others (pytest's tmp_path lies under the sticky /tmp, which the cache check refuses)."""
    home = cc.default_dir().rsplit("/.cache/", 1)[0]
    base = os.path.join(home, ".cache")
    os.makedirs(base, mode=0o700, exist_ok=True)
    path = tempfile.mkdtemp(prefix="llmops-cc-test-", dir=base)
    assert cc.problem(path) is None, cc.problem(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def expected(base):
    out = {"SGLANG_CACHE_DIR": base}
    out.update({k: os.path.join(base, v) if v else base for k, v in EXPECTED.items()})
    return out


# --- the variables and their precedence ------------------------------------------------------

def test_default_is_sglangs_own_home_cache_of_the_server_user():
    p = cc.plan(None, {})
    assert p.source == "default" and p.dir == cc.default_dir() and p.dir.endswith("/.cache/sglang")
    assert p.variables == expected(p.dir) and p.added == p.variables and p.by_env == ()


def test_option_sets_every_variable_under_it():
    p = cc.plan("/srv/cache/sglang/", {})
    assert p.source == "option" and p.dir == "/srv/cache/sglang"
    assert p.added == expected("/srv/cache/sglang")


def test_operator_values_win_one_by_one_and_the_rest_derive_from_their_sglang_cache_dir():
    p = cc.plan("/srv/cache", {"TORCHINDUCTOR_CACHE_DIR": "/data/inductor"})
    assert p.variables["TORCHINDUCTOR_CACHE_DIR"] == "/data/inductor" and p.by_env == ("TORCHINDUCTOR_CACHE_DIR",)
    assert "TORCHINDUCTOR_CACHE_DIR" not in p.added and p.added["TRITON_CACHE_DIR"] == "/srv/cache/triton"
    # SGLANG_CACHE_DIR in env: the others follow it (as 0.5.23 derives them), the option is not used,
    # and the directory is the operator's (not created, checked or cleared by the collection)
    p = cc.plan("/srv/cache", {"SGLANG_CACHE_DIR": "/data/sg", "TRITON_CACHE_DIR": "/fast/triton"})
    assert p.source == "env" and p.dir is None
    assert p.variables["TORCHINDUCTOR_CACHE_DIR"] == "/data/sg/inductor"
    assert p.variables["TRITON_CACHE_DIR"] == "/fast/triton" and p.variables["SGLANG_CACHE_DIR"] == "/data/sg"
    assert set(p.added) == set(EXPECTED) - {"TRITON_CACHE_DIR"}
    assert p.to_record()["set_by_env"] == ["SGLANG_CACHE_DIR", "TRITON_CACHE_DIR"]


def test_server_env_gets_the_caches_outside_tmpdir_and_the_operators_value_wins():
    p = cc.plan("/srv/cache", {"TRITON_CACHE_DIR": "/mine"})
    env = _launcher.build_env("/v/bin/python", "/v", {"TRITON_CACHE_DIR": "/mine"}, {"M": "1"}, "/state/x.tmp",
                              inherited={}, caches=p.added)
    assert env["TRITON_CACHE_DIR"] == "/mine" and env["TORCHINDUCTOR_CACHE_DIR"] == "/srv/cache/inductor"
    assert env["SGLANG_CACHE_DIR"] == "/srv/cache" and env["SGLANG_DG_CACHE_DIR"] == "/srv/cache/deep_gemm"
    assert env["TMPDIR"] == "/state/x.tmp"
    assert not any(env[k].startswith("/state/x.tmp") for k in cc.VARIABLES)
    # an explicit value that build_env is handed for a variable the operator also set never wins
    env = _launcher.build_env("/v/bin/python", "/v", {"TRITON_CACHE_DIR": "/mine"}, {}, "/t", inherited={},
                              caches={"TRITON_CACHE_DIR": "/theirs"})
    assert env["TRITON_CACHE_DIR"] == "/mine"


# --- refusals of an unsafe directory ---------------------------------------------------------

def test_a_shared_tmp_path_is_refused(tmp_path):
    why = cc.problem(str(tmp_path / "cache"))
    assert why and "writable by group or others" in why and "/tmp" in why
    assert "writable by group or others" in cc.problem("/tmp/sglang-cache")
    assert "writable by group or others" in cc.problem("/dev/shm/sglang-cache")


def test_symlink_anywhere_in_the_path_is_refused(safe_root):
    real = os.path.join(safe_root, "real")
    os.mkdir(real, 0o700)
    os.symlink(real, os.path.join(safe_root, "link"))
    why = cc.problem(os.path.join(safe_root, "link"))
    assert why and "is a symlink" in why and real in why  # names the directory to give instead
    why = cc.problem(os.path.join(safe_root, "link", "sub"))
    assert why and "lies under %s, which is a symlink" % os.path.join(safe_root, "link") in why


def test_group_or_other_writable_directory_or_parent_is_refused(safe_root):
    path = os.path.join(safe_root, "c")
    os.mkdir(path, 0o700)
    os.chmod(path, 0o770)
    assert "writable by group or others" in cc.problem(path)
    assert "lies under %s, which is writable" % path in cc.problem(os.path.join(path, "sub"))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_directory_is_refused(safe_root):
    path = os.path.join(safe_root, "theirs")
    os.mkdir(path, 0o700)
    os.chown(path, 65534, 65534)
    assert "owned by another user" in cc.problem(path)


def test_inside_the_launch_tmpdir_a_file_or_a_relative_path_is_refused(safe_root):
    tmpdir = os.path.join(safe_root, "state", "x.tmp")
    assert "which the teardown removes" in cc.problem(os.path.join(tmpdir, "cache"), [tmpdir])
    open(os.path.join(safe_root, "f"), "w").close()
    assert "not a directory" in cc.problem(os.path.join(safe_root, "f"))
    assert "absolute path" in cc.problem("rel/cache")
    assert "root directory" in cc.problem("/")


def test_a_directory_that_cannot_be_created_is_refused_before_the_teardown(safe_root, monkeypatch):
    """A home the server's user cannot write (a system user's /nonexistent, say): refused in the
    preflight, not at the spawn after the old server was stopped. (os.access stands in for a
    user without write permission: the tests run as root, who may write anywhere.)"""
    ro = os.path.join(safe_root, "ro")
    os.mkdir(ro, 0o500)
    real_access = os.access
    monkeypatch.setattr(cc.os, "access", lambda p, mode: False if p == ro else real_access(p, mode))
    assert "cannot be created: %s is not writable" % ro in cc.problem(os.path.join(ro, "cache"))
    assert cc.problem(os.path.join(safe_root, "fine", "cache")) is None


def test_ensure_creates_privately_and_refuses_with_unsafe_dir(safe_root, tmp_path):
    path = os.path.join(safe_root, "a", "b")
    cc.ensure(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    with pytest.raises(SglangError) as caught:
        cc.ensure(str(tmp_path / "cache"))
    assert caught.value.details["reason"] == "unsafe_dir"
    assert not (tmp_path / "cache").exists()


def params(tmp_path, **kw):
    p = dict(name="unit", venv=None, python=None, search_paths=None, entrypoint="auto", model_path="org/model",
             host="127.0.0.1", port=30000, tp_size=1, args={}, env={}, api_key=None, log_dir=None,
             state_dir=str(tmp_path / "state"), keep_logs=5, state="started", lock_timeout=30.0,
             introspect_timeout=180.0, gpu_backend="none", gpu_check=True, allow_log_level_warning=False,
             foreign_port_holders="fail", min_free_mb=0.0, min_free_inodes=0, probe_timeout=5.0, spawn_timeout=30.0,
             containment="none")
    p.update(kw)
    return p


def test_preflight_refuses_an_unsafe_cache_dir_with_unsafe_dir_before_anything(tmp_path):
    report = Report()
    plan = cc.plan(str(tmp_path / "cache"), {})
    cc.check(report, plan, str(tmp_path / "state" / "unit.tmp"))
    assert report.reason() == "unsafe_dir" and "cache_dir" in report.errors[0]
    # through the module's executor: the whole preflight fails with that reason, nothing is created
    with pytest.raises(SglangError) as caught:
        _launch_exec.run(params(tmp_path, cache_dir=str(tmp_path / "cache"), python="/nonexistent/python"),
                         check_mode=True, diff=False)
    assert any("cache_dir %s" % (tmp_path / "cache") in e for e in caught.value.details["preflight"]["errors"])
    assert not (tmp_path / "cache").exists()


def test_preflight_keeps_an_operators_env_value_with_a_warning(tmp_path, safe_root):
    report = Report()
    cc.check(report, cc.plan(None, {"SGLANG_CACHE_DIR": str(tmp_path / "mine")}), "/state/x.tmp")
    assert not report.errors and report.warnings and "is used as given" in report.warnings[0]
    report = Report()
    cc.check(report, cc.plan(safe_root, {}), "/state/x.tmp")
    assert not report.errors and not report.warnings
    assert [c["name"] for c in report.checks] == ["cache_dir"]


# --- the cache survives a teardown; clear_cache empties it -----------------------------------

def teardown_request(state_dir, **kw):
    p = {k: v.get("default") for k, v in _options.teardown().items()}
    p.update(gpus=[], sglang_processes=False, **kw)
    return _teardown_call.prepare(p, "unit", state_dir, "none")


def fill(path):
    os.makedirs(os.path.join(path, "inductor", "fxgraph"), exist_ok=True)
    with open(os.path.join(path, "inductor", "fxgraph", "entry"), "wb") as fh:
        fh.write(b"x" * 1000)
    os.makedirs(os.path.join(path, "triton"), exist_ok=True)


def write_record(state_dir, cache_dir):
    _record.ensure_dir(state_dir)
    tmpdir = _record.tmpdir_path(state_dir, "unit")
    _record.ensure_dir(tmpdir)
    open(os.path.join(tmpdir, "zmq-socket"), "w").close()
    record = {"name": "unit", "launch_id": "L1", "state_dir": state_dir, "pid": None, "tmpdir": tmpdir,
              "compile_cache": cc.plan(cache_dir, {}).to_record()}
    _record.write_record(state_dir, "unit", record)
    return tmpdir


def test_the_cache_survives_a_teardown_that_removes_the_tmpdir(safe_root):
    state_dir, cache = os.path.join(safe_root, "state"), os.path.join(safe_root, "cache")
    fill(cache)
    tmpdir = write_record(state_dir, cache)
    result = _teardown_call.run(teardown_request(state_dir), check_mode=False, diff=False, warn=lambda _t: None)
    assert result["tmpdir_removed"] == tmpdir and not os.path.exists(tmpdir)
    assert "compile_cache_cleared" not in result
    assert os.path.getsize(os.path.join(cache, "inductor", "fxgraph", "entry")) == 1000


def test_clear_cache_empties_the_records_cache_dir_and_keeps_it(safe_root):
    state_dir, cache = os.path.join(safe_root, "state"), os.path.join(safe_root, "cache")
    fill(cache)
    write_record(state_dir, cache)
    req = teardown_request(state_dir, clear_cache=True)
    seen = _teardown_call.run(req, check_mode=True, diff=False, warn=lambda _t: None)["compile_cache_cleared"]
    assert seen["entries"] == 2 and seen["bytes"] == 1000 and seen["cleared"] is False
    assert os.path.exists(os.path.join(cache, "inductor", "fxgraph", "entry"))  # check mode measures only
    result = _teardown_call.run(req, check_mode=False, diff=False, warn=lambda _t: None)
    done = result["compile_cache_cleared"]
    assert done["dir"] == cache and done["cleared"] is True and done["errors"] == [] and result["changed"]
    assert os.path.isdir(cache) and os.listdir(cache) == []


def test_clear_cache_of_an_unsafe_dir_refuses_before_anything_is_stopped(safe_root):
    state_dir, cache = os.path.join(safe_root, "state"), os.path.join(safe_root, "cache")
    fill(cache)
    tmpdir = write_record(state_dir, cache)
    os.chmod(cache, 0o777)
    with pytest.raises(SglangError) as caught:
        _teardown_call.run(teardown_request(state_dir, clear_cache=True), check_mode=False, diff=False,
                           warn=lambda _t: None)
    assert caught.value.details["reason"] == "unsafe_dir" and "before anything was stopped" in caught.value.msg
    assert os.path.isdir(tmpdir)  # the teardown did not run
    assert os.path.exists(os.path.join(cache, "inductor", "fxgraph", "entry"))


def test_clear_cache_keeps_the_operators_env_dir(safe_root):
    record = {"compile_cache": cc.plan(None, {"SGLANG_CACHE_DIR": safe_root}).to_record()}
    assert _teardown_call.cache_to_clear(record) is None
    assert _teardown_call.clear_cache(record, check_mode=False)["cleared"] is False
    assert _teardown_call.cache_to_clear(None) == cc.default_dir()


# --- the probe's view ------------------------------------------------------------------------

def test_report_walks_each_directory_once_and_is_bounded(safe_root):
    fill(safe_root)
    rows = cc.report(cc.plan(safe_root, {}).to_record())["caches"]
    by = {r["variable"]: r for r in rows}
    assert by["SGLANG_CACHE_DIR"]["bytes"] == 1000 and by["SGLANG_CACHE_DIR"]["files"] == 1
    assert by["TORCHINDUCTOR_CACHE_DIR"]["exists"] and by["TORCHINDUCTOR_CACHE_DIR"]["bytes"] == 1000
    assert by["CUDA_CACHE_PATH"]["exists"] is False and by["TRITON_CACHE_DIR"]["files"] == 0
    assert all(r["set_by"] == "collection" for r in rows)
    for i in range(5):
        open(os.path.join(safe_root, "triton", "k%d" % i), "w").close()
    small = cc.measure(safe_root, limit=3)
    assert small["truncated"] is True and small["files"] <= 3
    out = cc.for_records([{"name": "a", "compile_cache": cc.plan(safe_root, {}).to_record()}, {"name": "b"}])
    assert [o["instance"] for o in out] == ["a"] and out[0]["dir"] == safe_root
    assert cc.for_records([])[0]["instance"] is None and cc.for_records([])[0]["dir"] == cc.default_dir()
