"""Code and model identity, in-process: what counts as a change of the code a server imports and
of the model it loaded (a patched, added or removed file; a replaced weight shard), what does
not (byte-compiled caches, an unchanged tree), and the words the plan says about it."""
from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _file_identity as fid
from ansible_collections.llmops.sglang.plugins.module_utils._host import _model_identity as mi
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _code_identity as ci


def _package(base) -> str:
    """A small sglang package in a venv's site-packages."""
    pkg = base / "venv" / "lib" / "python3.11" / "site-packages" / "sglang"
    (pkg / "srt" / "models").mkdir(parents=True)
    for rel in ("__init__.py", "launch_server.py", "srt/__init__.py", "srt/models/deepseek_v2.py",
                "srt/models/llama.py"):
        (pkg / rel).write_text("# %s\n" % rel)
    return str(pkg)


def _bump(path: str, seconds: int = 7) -> None:
    """Move a file's mtime, as a copy from elsewhere would (mtime only: same size)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 10 ** 9))


def test_listing_is_path_size_mtime_without_caches(tmp_path):
    pkg = _package(tmp_path)
    os.makedirs(os.path.join(pkg, "srt", "__pycache__"))
    open(os.path.join(pkg, "srt", "__pycache__", "x.cpython-311.pyc"), "w").close()
    open(os.path.join(pkg, "stray.pyc"), "w").close()
    os.symlink(os.path.join(pkg, "srt", "models", "llama.py"), os.path.join(pkg, "alias.py"))
    listing = fid.walk(pkg)
    assert sorted(listing) == ["__init__.py", "alias.py", "launch_server.py", "srt/__init__.py",
                               "srt/models/deepseek_v2.py", "srt/models/llama.py"]
    st = os.stat(os.path.join(pkg, "srt", "models", "llama.py"))
    assert listing["alias.py"] == listing["srt/models/llama.py"] == (st.st_size, st.st_mtime_ns)
    assert fid.decode(fid.encode(listing)) == listing
    assert fid.decode("not a listing") is None
    assert fid.walk(str(tmp_path / "absent")) == {}


def test_an_unchanged_tree_is_the_same_and_a_pyc_rewrite_is_no_change(tmp_path):
    pkg = _package(tmp_path)
    kept = ci.build(pkg, {}).record()
    os.makedirs(os.path.join(pkg, "__pycache__"))
    open(os.path.join(pkg, "__pycache__", "launch_server.cpython-311.pyc"), "w").close()
    assert ci.compare(kept, ci.build(pkg, {})) == {"state": "same"}


def test_a_patched_file_and_an_added_file_are_named(tmp_path):
    pkg = _package(tmp_path)
    kept = ci.build(pkg, {}).record()
    with open(os.path.join(pkg, "srt", "models", "deepseek_v2.py"), "a") as fh:
        fh.write("DUMP_HIDDEN_STATES = True\n")
    one = ci.compare(kept, ci.build(pkg, {}))
    assert one["state"] == "changed" and one["summary"] == "srt/models/deepseek_v2.py"
    assert one["files"] == {"modified": ["srt/models/deepseek_v2.py"], "added": [], "removed": []}
    with open(os.path.join(pkg, "srt", "hs_dump.py"), "w") as fh:
        fh.write("# new\n")
    two = ci.compare(kept, ci.build(pkg, {}))
    assert two["summary"] == "srt/models/deepseek_v2.py (+1 file)"
    assert two["files"]["added"] == ["srt/hs_dump.py"] and two["count"] == 2
    os.unlink(os.path.join(pkg, "srt", "models", "llama.py"))
    three = ci.compare(kept, ci.build(pkg, {}))
    assert three["summary"] == "srt/models/deepseek_v2.py (+2 files)"
    assert three["files"]["removed"] == ["srt/models/llama.py"]


def test_same_size_new_mtime_is_a_change(tmp_path):
    pkg = _package(tmp_path)
    kept = ci.build(pkg, {}).record()
    _bump(os.path.join(pkg, "srt", "models", "llama.py"))
    assert ci.compare(kept, ci.build(pkg, {}))["files"]["modified"] == ["srt/models/llama.py"]


def test_a_pythonpath_entry_with_sglang_is_what_the_server_imports(tmp_path):
    installed = _package(tmp_path)
    src = tmp_path / "src"
    patched = _package(src)
    site = os.path.dirname(patched)
    package, how = ci.package_dir(installed, {"PYTHONPATH": "%s:%s" % (tmp_path / "nothing", site)})
    assert (package, how) == (os.path.realpath(patched), "pythonpath")
    assert ci.package_dir(installed, {"PYTHONPATH": ""}) == (os.path.realpath(installed), "interpreter")
    assert ci.build(installed, {"PYTHONPATH": site}).package == os.path.realpath(patched)


def test_operator_named_paths_count_and_a_newly_named_one_is_no_change_by_itself(tmp_path):
    pkg = _package(tmp_path)
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "sitecustomize.py").write_text("# patch\n")
    kept = ci.build(pkg, {}, extra_paths=[str(patches)]).record()
    assert [r["kind"] for r in kept["roots"]] == ["package", "extra"]
    (patches / "sitecustomize.py").write_text("# patch, longer now\n")
    seen = ci.compare(kept, ci.build(pkg, {}, extra_paths=[str(patches)]))
    assert seen["summary"] == str(patches / "sitecustomize.py")
    # named only now: the server's launch knew nothing of it, so it alone is no change
    fresh = ci.build(pkg, {}).record()
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    assert ci.compare(fresh, ci.build(pkg, {}, extra_paths=[str(other)])) == {"state": "same"}


def _git(cwd, *argv: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", "-C", str(cwd)] + list(argv), check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def test_a_source_checkout_has_its_head_and_modified_files(tmp_path):
    repo = tmp_path / "sglang-src"
    pkg = repo / "python" / "sglang"
    (pkg / "srt" / "models").mkdir(parents=True)
    for rel in ("__init__.py", "launch_server.py", "srt/models/deepseek_v2.py"):
        (pkg / rel).write_text("# %s\n" % rel)
    (repo / "README.md").write_text("readme\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    with open(str(pkg / "srt" / "models" / "deepseek_v2.py"), "a") as fh:
        fh.write("# patched\n")
    (repo / "README.md").write_text("outside the package: not asked about\n")
    found = ci.build(str(pkg), {"PYTHONPATH": str(repo / "python")})
    assert found.source == "checkout" and found.package == os.path.realpath(str(pkg))
    assert found.git["root"] == str(repo) and found.git["head"] == head and found.git["branch"] == "main"
    assert found.git["modified"] == ["python/sglang/srt/models/deepseek_v2.py"], found.git
    kept = found.record()
    _git(repo, "commit", "-q", "-am", "two")
    (pkg / "new.py").write_text("# new\n")
    seen = ci.compare(kept, ci.build(str(pkg), {"PYTHONPATH": str(repo / "python")}))
    assert seen["summary"] == "new.py" and seen["git"] == "git HEAD %s -> %s" % (
        head[:12], _git(repo, "rev-parse", "HEAD")[:12])


def test_git_head_is_read_by_hand_from_packed_refs(tmp_path):
    gdir = tmp_path / ".git"
    gdir.mkdir()
    (gdir / "HEAD").write_text("ref: refs/heads/dev\n")
    (gdir / "packed-refs").write_text("# pack-refs with: peeled\n%s refs/heads/dev\n" % ("ab" * 20))
    assert ci.head(str(gdir)) == ("ab" * 20, "dev")
    (gdir / "HEAD").write_text("cd" * 20 + "\n")
    assert ci.head(str(gdir)) == ("cd" * 20, None)


def test_an_installed_package_inside_a_git_tree_is_no_checkout(tmp_path):
    pkg = _package(tmp_path)
    _git(tmp_path, "init", "-q")
    assert ci.build(pkg, {}).source == "installed" and ci.build(pkg, {}).git is None


def test_an_old_or_damaged_record_is_unknown(tmp_path):
    pkg = _package(tmp_path)
    now = ci.build(pkg, {})
    assert ci.compare(None, now)["state"] == "unknown"
    kept = now.record()
    kept["digest"] = "other"
    kept["roots"][0]["digest"] = "other"
    kept["roots"][0]["listing"] = "garbage"
    assert ci.compare(kept, now) == {"state": "unknown", "why": "the launch record's code listing cannot be read"}


def _model(base, shards: int = 4) -> str:
    path = base / "model"
    path.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json",
                 "README.md"):
        (path / name).write_text("{}\n")
    for i in range(1, shards + 1):
        (path / ("model-%05d-of-%05d.safetensors" % (i, shards))).write_bytes(b"\0" * 64)
    return str(path)


def test_model_identity_is_config_tokenizer_index_and_weights(tmp_path):
    path = _model(tmp_path)
    found = mi.build(path)
    assert "README.md" not in found["files"] and len(found["files"]) == 8
    assert mi.summary(found) == {"path": path, "files": 8, "weights": 4, "weight_bytes": 256}
    assert mi.build("org/model") is None


def test_a_replaced_weight_shard_is_named(tmp_path):
    path = _model(tmp_path)
    kept = mi.build(path)
    assert mi.compare(kept, mi.build(path)) == {"state": "same"}
    shard = os.path.join(path, "model-00003-of-00004.safetensors")
    tmp = shard + ".new"
    with open(tmp, "wb") as fh:
        fh.write(b"\1" * 64)  # a new checkpoint's shard: same size
    os.utime(tmp, ns=(1, os.stat(shard).st_mtime_ns + 10 ** 9))
    os.rename(tmp, shard)
    seen = mi.compare(kept, mi.build(path))
    assert seen["state"] == "changed" and seen["weights"] and seen["summary"] == "model-00003-of-00004.safetensors"
    (tmp_path / "model" / "config.json").write_text('{"changed": true}\n')
    both = mi.compare(kept, mi.build(path))
    assert both["summary"] == "model-00003-of-00004.safetensors (+1 file)"


def test_a_model_symlink_pointed_elsewhere_is_a_change(tmp_path):
    a = _model(tmp_path)
    b = str(tmp_path / "model-b")
    os.rename(a, b)
    os.mkdir(a)
    link = str(tmp_path / "current")
    os.symlink(b, link)
    kept = mi.build(link)
    os.unlink(link)
    os.symlink(a, link)
    (tmp_path / "model" / "config.json").write_text("{}\n")
    seen = mi.compare(kept, mi.build(link))
    assert seen["state"] == "changed" and seen["summary"].startswith("the model directory resolves to %s" % a)


@pytest.mark.parametrize("paths,text", [
    (["a"], "a"), (["a", "b"], "a (+1 file)"), (["a", "b", "c"], "a (+2 files)")])
def test_describe(paths, text):
    assert fid.describe(paths) == text


def test_the_probe_says_a_live_server_was_patched_after_start(tmp_path):
    from ansible_collections.llmops.sglang.plugins.module_utils._probe import _patched

    pkg = _package(tmp_path)
    model = _model(tmp_path)
    kept = {"launch_id": "L1", "pid": 4242, "code_identity": ci.build(pkg, {}).record(),
            "model_identity": mi.build(model)}
    row = {"launch_id": "L1", "name": "serving", "pid": 4242, "alive": True}
    assert _patched.mark([row], [kept]) == [] and row["patched_after_start"] is False
    with open(os.path.join(pkg, "srt", "models", "deepseek_v2.py"), "a") as fh:
        fh.write("# patched\n")
    _bump(os.path.join(model, "model-00003-of-00004.safetensors"))
    lines = _patched.mark([row], [kept])
    said = row["patched_after_start"]
    assert said["code"] == "sglang code changed since pid 4242 started: srt/models/deepseek_v2.py"
    assert said["model"] == "model weights changed: model-00003-of-00004.safetensors"
    assert lines == ["instance serving (pid 4242) was patched after start: %s; %s; the running server still runs "
                     "what it loaded then - restart it to load what is on disk" % (said["code"], said["model"])]
    # a launch from before identities were kept: unknown; a dead server: not judged
    old = {"launch_id": "L2", "pid": 5151}
    rows = [{"launch_id": "L2", "pid": 5151, "alive": True}, {"launch_id": "L1", "pid": 4242, "alive": False}]
    assert _patched.mark(rows, [old, kept]) == []
    assert rows[0]["patched_after_start"] is None and "patched_after_start" not in rows[1]
