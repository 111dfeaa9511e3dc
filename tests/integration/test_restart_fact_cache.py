"""A persistent fact cache (fact_caching = jsonfile, as many fleets run) keeps the restart's
`ansible_facts.sglang_restart_failed` from an earlier run. The roll must stop only on a failure
of THIS run: before, a host that failed last time stopped the next run's roll at its first
batch ("failed in an earlier batch ... not touched"), before that host was even tried again.

h1 and h2, one host per batch (serial 1). Run 1: h2's model path does not exist, its plan
refuses (h1 restarted). Run 2, h2 fixed: h1 is converged and h2 restarts."""
from __future__ import annotations

import os
import re
from typing import Dict, Iterator

import pytest

from helpers import play_runs


@pytest.fixture
def hosts(tmp_path) -> Iterator[Dict[str, dict]]:
    hv = {h: play_runs.host_vars(str(tmp_path), h) for h in ("h1", "h2")}
    yield hv
    inv = play_runs.write_inventory(str(tmp_path / "teardown-inventory.yml"), hv)
    down = play_runs.teardown(inv)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def _heads(out: str, hv: dict, host: str):
    return re.findall(r"%s on %s: (.*)" % (re.escape(hv["sglang_name"]), host), out)


def test_a_failure_left_in_the_fact_cache_by_an_earlier_run_does_not_stop_the_roll(tmp_path, hosts):
    cache = ["env", "ANSIBLE_CACHE_PLUGIN=jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION=%s" % (tmp_path / "facts")]
    broken = dict(hosts["h2"], sglang_model_path=str(tmp_path / "no-such-model"))
    inv = play_runs.write_inventory(str(tmp_path / "inventory-1.yml"), {"h1": hosts["h1"], "h2": broken})
    first = play_runs.play(inv, "restart_extraction.yml", "-e", "sglang_serial=1", wrap=cache)
    out = first.stdout + first.stderr
    assert first.returncode != 0 and _heads(out, hosts["h2"], "h2"), out[-4000:]
    assert _heads(out, hosts["h2"], "h2")[-1].startswith("FAILED, nothing was stopped"), out[-4000:]
    # what the next run finds (the file's name and shape are the cache plugin's: 2.19 wraps it)
    cached = [os.path.join(tmp_path / "facts", f) for f in os.listdir(tmp_path / "facts") if f.endswith("h2")]
    assert cached and re.search(r'sglang_restart_failed\\?": true', open(cached[0]).read())

    inv = play_runs.write_inventory(str(tmp_path / "inventory-2.yml"), hosts)
    second = play_runs.play(inv, "restart_extraction.yml", "-e", "sglang_serial=1", wrap=cache)
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-5000:]
    assert "not touched" not in out, out[-5000:]
    assert _heads(out, hosts["h1"], "h1")[-1].startswith("serving (unchanged"), out[-5000:]
    assert _heads(out, hosts["h2"], "h2")[-1].startswith("serving NEW config"), out[-5000:]
    assert os.path.exists(os.path.join(hosts["h2"]["sglang_state_dir"], "%s.json" % hosts["h2"]["sglang_name"]))
