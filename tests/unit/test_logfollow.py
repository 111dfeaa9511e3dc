"""The incremental log follower: offsets, partial lines, rotation, truncation, deletion."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._sglang._logfollow import LogFollower
from helpers.fixtures import COLLECTIONS


def _append(path: str, data: str) -> None:
    with open(path, "a") as fh:
        fh.write(data)


def _kinds(follower: LogFollower) -> list:
    return [e.kind for e in follower.events]


def test_starts_at_offset_and_never_returns_older_lines(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "old run\nThe server is fired up and ready to roll!\n")
    follower = LogFollower(path, offset=os.path.getsize(path))
    assert follower.poll() == []
    _append(path, "new line 1\nnew line 2\n")
    assert follower.poll() == ["new line 1", "new line 2"]
    assert follower.poll() == []


def test_reads_only_new_bytes_each_poll(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "x" * 1000 + "\n")
    follower = LogFollower(path, offset=0)
    follower.poll()
    first = follower.bytes_read
    _append(path, "tail\n")
    assert follower.poll() == ["tail"]
    assert follower.bytes_read == first + len("tail\n")


def test_keeps_partial_lines_until_their_newline(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "Load weight be")
    follower = LogFollower(path)
    assert follower.poll() == []
    _append(path, "gin. avail mem=78.50 GB\nnext")
    assert follower.poll() == ["Load weight begin. avail mem=78.50 GB"]
    assert follower.poll(final=True) == ["next"]


def test_carriage_return_redraws_are_lines(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "shards 1/2\rshards 2/2\r\nKV Cache is allocated\r\n")
    assert LogFollower(path).poll() == ["shards 1/2", "shards 2/2", "KV Cache is allocated"]


def test_rotation_drains_old_file_then_follows_new_from_zero(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "one\n")
    follower = LogFollower(path)
    assert follower.poll() == ["one"]
    # The writer may add a last line to the old file before the rename (and keep writing there).
    _append(path, "two\n")
    os.rename(path, path + ".1")
    _append(path, "three\n")
    assert follower.poll() == ["two", "three"]
    assert "rotated" in _kinds(follower)
    _append(path + ".1", "late write to the old inode\n")
    _append(path, "four\n")
    assert follower.poll() == ["late write to the old inode", "four"]
    follower.close()


def test_truncation_restarts_from_zero_and_is_noted(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "a long first line\nsecond line\n")
    follower = LogFollower(path)
    assert len(follower.poll()) == 2
    with open(path, "w") as fh:  # copytruncate / `> file`
        fh.write("after\n")
    assert follower.poll() == ["after"]
    assert follower.truncated and "truncated" in _kinds(follower)


def test_offset_beyond_size_is_truncation(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "short\n")
    follower = LogFollower(path, offset=10_000)
    assert follower.poll() == ["short"]
    assert follower.truncated


def test_missing_file_then_created(tmp_path):
    path = str(tmp_path / "late.log")
    follower = LogFollower(path)
    assert follower.poll() == [] and not follower.ever_opened
    assert "missing" in _kinds(follower)
    _append(path, "hello\n")
    assert follower.poll() == ["hello"]
    assert follower.ever_opened


def test_deleted_file_is_still_read_through_the_open_descriptor(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "one\n")
    writer = open(path, "a")
    follower = LogFollower(path)
    assert follower.poll() == ["one"]
    os.unlink(path)
    writer.write("still writing\n")
    writer.flush()
    assert follower.poll() == ["still writing"]
    writer.close()
    follower.close()


def test_bounded_read_per_poll(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "".join("line %d\n" % i for i in range(1000)))
    follower = LogFollower(path, max_read=100)
    got = follower.poll()
    assert 0 < len(got) < 1000
    while True:
        more = follower.poll()
        if not more:
            break
        got.extend(more)
    assert got == ["line %d" % i for i in range(1000)]


# --- only regular files, never a blocking open ---------------------------------------------

def _reason(exc_info) -> str:
    return exc_info.value.details.get("reason")


def test_a_directory_at_the_log_path_is_a_bad_log(tmp_path):
    path = tmp_path / "a.log"
    path.mkdir()
    with pytest.raises(SglangError) as exc:
        LogFollower(str(path)).poll()
    assert _reason(exc) == "bad_log" and "regular file" in exc.value.msg


def test_a_character_device_at_the_log_path_is_a_bad_log(tmp_path):
    link = tmp_path / "a.log"
    link.symlink_to("/dev/zero")  # endless bytes: never read as a log
    with pytest.raises(SglangError) as exc:
        LogFollower(str(link)).poll()
    assert _reason(exc) == "bad_log" and "character device" in exc.value.msg


def test_a_fifo_at_the_log_path_is_refused_without_blocking(tmp_path):
    """A FIFO with no writer: a plain open() would block forever. The check runs in a child
    process so that a regression fails the test instead of hanging it."""
    path = str(tmp_path / "a.log")
    os.mkfifo(path)
    code = ("import sys\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._sglang._logfollow import LogFollower\n"
            "from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError\n"
            "try:\n"
            "    LogFollower(sys.argv[1]).poll()\n"
            "except SglangError as exc:\n"
            "    print(exc.details.get('reason'))\n")
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                         timeout=20, env=env, check=False)
    assert out.stdout.strip() == "bad_log", out.stderr


def test_the_history_up_to_the_ready_line_then_only_new_lines(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "start\nready to roll\n" + "old access line\n" * 50_000)
    follower = LogFollower(path)
    head = follower.read_head(1 << 20, lambda line: "ready" in line)
    assert head == ["start", "ready to roll"]
    follower.seek_near_end()
    assert follower.bytes_read <= 64 * 1024  # the old lines after the ready line are never read
    _append(path, "new\n")
    assert follower.poll() == ["new"]


def test_a_tqdm_redraw_is_a_line_before_the_bar_closes(tmp_path):
    """tqdm writes `\\r` + redraw and no newline until the bar is done: each redraw must be seen
    while the bar runs (live progress), not minutes later when the bar closes."""
    path = str(tmp_path / "a.log")
    with open(path, "wb") as fh:
        fh.write(b"\rLoading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]"
                 b"\rLoading safetensors checkpoint shards:   2% Completed | 1/64 [00:00<00:00, 634.35it/s]")
    follower = LogFollower(path)
    assert follower.poll() == ["Loading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]"]
    assert follower.pending_text().endswith("| 1/64 [00:00<00:00, 634.35it/s]")
    with open(path, "ab") as fh:
        fh.write(b"\rLoading safetensors checkpoint shards:   3% Completed | 2/64 [00:00<00:00, 718.90it/s]")
    assert follower.poll() == ["Loading safetensors checkpoint shards:   2% Completed | 1/64 [00:00<00:00, 634.35it/s]"]
    follower.close()


def _resume(follower: LogFollower, holders=()) -> LogFollower:
    state = follower.snapshot()
    follower.close()
    return LogFollower.restore(state, holders)


def test_a_resumed_follower_reads_each_byte_once(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "before the launch\n")
    offset = os.path.getsize(path)
    _append(path, "one\ntw")
    follower = LogFollower(path, offset=offset)
    seen = follower.poll()
    for chunk in ("o\nthree\rfour", "\r\nfive\n", "six\n"):
        follower = _resume(follower)
        _append(path, chunk)
        seen += follower.poll()
    assert seen == ["one", "two", "three", "four", "five", "six"]
    assert follower.bytes_read == os.path.getsize(path) - offset
    follower.close()


def test_a_resumed_follower_before_the_log_exists_honours_the_offset(tmp_path):
    path = str(tmp_path / "a.log")
    follower = _resume(LogFollower(path, offset=0))
    assert follower.poll() == []
    _append(path, "first\n")
    follower = _resume(follower)
    assert follower.poll() == ["first"]
    follower.close()


def test_a_rotation_between_slices_drains_the_old_file_then_follows_the_new(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "one\n")
    follower = LogFollower(path)
    assert follower.poll() == ["one"]
    state = follower.snapshot()
    follower.close()
    _append(path, "two\n")
    os.rename(path, path + ".1")  # logrotate: rename, new file at the path
    _append(path, "three\n")
    follower = LogFollower.restore(state)
    assert follower.poll() == ["two", "three"]
    assert "rotated" in _kinds(follower)
    follower = _resume(follower)
    _append(path + ".1", "four\n")  # the server still writes to the renamed file
    _append(path, "five\n")
    assert sorted(follower.poll()) == ["five", "four"]
    follower.close()


def test_a_deleted_log_is_found_again_through_the_writers_descriptor(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "one\n")
    writer = subprocess.Popen([sys.executable, "-c", "import sys\nf = open(sys.argv[1], 'a')\nprint('open', flush=True)\n"
                               "sys.stdin.readline()\nf.write('two\\n'); f.flush()\nprint('written', flush=True)\n"
                               "sys.stdin.readline()", path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        follower = LogFollower(path)
        assert follower.poll() == ["one"]
        state = follower.snapshot()
        follower.close()
        os.unlink(path)
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "written"
        follower = LogFollower.restore(state, holders=[writer.pid])
        assert follower.is_open
        assert follower.poll() == ["two"]
        follower.close()
    finally:
        writer.stdin.close()
        writer.wait(timeout=10)


def test_a_log_gone_for_good_between_slices_is_noted(tmp_path):
    path = str(tmp_path / "a.log")
    _append(path, "one\n")
    follower = LogFollower(path)
    follower.poll()
    state = follower.snapshot()
    follower.close()
    os.unlink(path)
    follower = LogFollower.restore(state)
    assert not follower.is_open and "missing" in _kinds(follower)
    assert follower.poll() == []
