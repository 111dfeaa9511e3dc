"""restart_fleet.yml warms the next host's weights while the current host restarts (behind the
real sglang-router 0.3.2, emulated workers on this machine, each with its own small checkpoint
written here): the next host's shards, evicted with posix_fadvise(DONTNEED) on the test's own
files only, are resident before that host's teardown (its own restart reads nothing), and the
prewarm's memory floor holds for the background prewarm too. Both tests roll one fleet of three,
brought up once for the file (the fleet a roll leaves serving is where the next one starts)."""
from __future__ import annotations

import os
import re
import shutil
from typing import Dict, Iterator, List

import pytest

from helpers import pagecache as pc
from helpers.fleet import MODEL_DIR, Fleet, routed

SHARD = 16 * pc.MIB


def flat(out: str) -> str:
    """The play's output on one line (the YAML callback wraps long summary lines)."""
    return " ".join(out.split())


def prewarm_line(out: str, host: str) -> str:
    """The summary's 'prewarm: ...' item of `host`."""
    text = flat(out)
    m = re.search(r"%s \(http://[^)]+\): restarted' .*?'prewarm: (.*?)'" % re.escape(host), text)
    assert m, text[-4000:]
    return m.group(1)


def checkpoint(directory: str) -> List[str]:
    """3 shards and their index, with the demo model's config.json (what the emulator reads).
    No tokenizer file: the router would try to load it."""
    files = pc.write_checkpoint(directory, shards=3, shard_size=SHARD)
    tokenizer = os.path.join(directory, "tokenizer_config.json")
    os.unlink(tokenizer)
    shutil.copyfile(os.path.join(MODEL_DIR, "config.json"), os.path.join(directory, "config.json"))
    return [p for p in files if p != tokenizer]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, object]]:
    """Three workers, each with its own checkpoint, up (restart_serving.yml, all at once) behind
    a router that has all three; stopped after the file's last test."""
    scratch = pc.scratch_dir("fleet-prewarm")
    f = Fleet(str(tmp_path_factory.mktemp("fleet-prewarm") / "fleet"), size=3)
    models = {h: os.path.join(scratch, h) for h in f.hosts}
    try:
        files = {h: checkpoint(models[h]) for h in f.hosts}
        f.extra_host_vars = {h: {"sglang_model_path": models[h]} for h in f.hosts}
        f.inventory = f.write_inventory()
        with routed(f):
            yield {"fleet": f, "models": models, "files": files}
    finally:
        pc.remove(scratch)


@pytest.fixture
def fleet(served) -> Dict[str, object]:
    """The shared fleet, every worker in the router and healthy."""
    served["fleet"].assert_serving()
    return served


def test_the_next_host_is_warm_before_its_teardown(fleet) -> None:
    f: Fleet = fleet["fleet"]
    files: Dict[str, List[str]] = fleet["files"]
    before = f.pids()
    for h in f.hosts:
        pc.evict(files[h])  # only the test's own files
    assert all(pc.total_resident(files[h]) == 0 for h in f.hosts)

    roll = f.play("restart_fleet.yml", {"sglang_force": True})
    out = roll.stdout + roll.stderr
    with open(os.path.join(f.workdir, "roll.out"), "w") as fh:
        fh.write(out)
    assert roll.returncode == 0, out[-5000:]
    assert all(f.pids()[h] != before[h] for h in f.hosts)

    # w1: nobody warmed it; its own restart read its cold shards before the teardown and
    # started the prewarm of w2 in the background
    w1 = prewarm_line(out, "w1")
    assert "warmed ahead" not in w1, w1
    assert re.search(r"before the teardown: resident \d\.\d%, read [1-9][\d.]* MiB", w1), w1
    assert "next host w2: started in the background" in w1, w1
    # w2 and w3: warmed by the host before them (waited for before they left the router), so
    # their own restart found (nearly) everything resident right before the teardown
    for host, by, nxt in (("w2", "w1", "w3"), ("w3", "w2", None)):
        line = prewarm_line(out, host)
        ahead = re.search(r"warmed ahead by " + by + r": resident ([\d.]+)% -> ([\d.]+)%, read ([\d.]+) MiB", line)
        assert ahead, line
        assert float(ahead.group(1)) < 50 and float(ahead.group(2)) == 100.0, line
        assert float(ahead.group(3)) >= 3 * SHARD / pc.MIB, line
        # Found warm before its own teardown: nearly all of it, or, where the kernel paged out
        # cold memory between the two (DAMON pageout on this VM; 71% seen under a loaded run),
        # the module read the rest back in before the teardown - never a cold teardown unsaid.
        own = re.search(r"before the teardown: resident ([\d.]+)%(?:, read ([\d.]+) MiB|, nothing read)", line)
        assert own, line
        assert float(own.group(1)) >= 90 or float(own.group(2) or 0) > 0, line
        assert ("next host %s: started in the background" % nxt in line) if nxt else ("next host" not in line), line
    # and they stay warm: the page cache still holds (nearly) every host's checkpoint after the
    # roll (the kernel may drop a few percent under memory pressure from other work). Where the
    # kernel pages out cold memory on its own (a DAMON pageout scheme: this VM's after ~60 s),
    # an early host's checkpoint, untouched since its restart, may leave meanwhile; the last
    # host's, read by its server moments ago, must still be there.
    reclaim = pc.proactive_reclaim_age()
    kept = f.hosts if reclaim is None else f.hosts[-1:]
    assert all(pc.total_resident(files[h]) >= 0.9 * sum(os.path.getsize(p) for p in files[h]) for h in kept), reclaim


def test_the_memory_floor_holds_and_a_variable_turns_it_off(fleet) -> None:
    f: Fleet = fleet["fleet"]
    files: Dict[str, List[str]] = fleet["files"]
    for h in ("w1", "w2"):  # two are enough here: the rolls take w1 and w2 (w3 serves on)
        pc.evict(files[h])

    # a floor no host can keep (99% of RAM available): the background prewarm of w2 reads
    # nothing and says why; the roll goes on (a prewarm is never a reason to stop it)
    floor = f.play("restart_fleet.yml", {"sglang_force": True, "sglang_hosts": "w1:w2",
                                         "sglang_restart_prewarm_min_available": "99%"})
    out = floor.stdout + floor.stderr
    assert floor.returncode == 0, out[-5000:]
    assert "next host w2: started in the background" in prewarm_line(out, "w1")
    w2 = prewarm_line(out, "w2")
    # (the module stops before the first block, or fails when not even one block fits)
    assert re.search(r"warmed ahead by w1: (not done \(memory_floor|resident 0\.0% -> 0\.0%, read 0\.0 MiB "
                     r"\(stopped: memory_floor\))", w2), w2
    assert re.search(r"before the teardown: (not done \(memory_floor\)|resident 0\.0%, nothing read "
                     r"\(stopped: memory_floor\))", w2), w2
    assert pc.total_resident([p for p in files["w2"] if p.endswith(".safetensors")]) == 0

    # off: no background prewarm is started; w2's own restart still warms its shards
    off = f.play("restart_fleet.yml", {"sglang_force": True, "sglang_hosts": "w1:w2", "sglang_prewarm_next": False})
    out = off.stdout + off.stderr
    assert off.returncode == 0, out[-5000:]
    assert "next host" not in prewarm_line(out, "w1")
    w2 = prewarm_line(out, "w2")
    assert "warmed ahead" not in w2, w2
    assert re.search(r"before the teardown: resident \d\.\d%, read [1-9][\d.]* MiB", w2), w2
