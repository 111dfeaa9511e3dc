"""A persistent fact cache (fact_caching = jsonfile, as many fleets run) keeps the restart's
`ansible_facts.sglang_restart_failed` from an earlier run. The roll must stop only on a failure
of THIS run: before, a host that failed last time stopped the next run's roll at its first
batch ("failed in an earlier batch ... not touched"), before that host was even tried again, and
the report showed last run's outcome for a host this run never reached.

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
    hv = play_runs.localhosts(str(tmp_path), "h1", "h2")
    yield hv
    play_runs.tear_down_hosts(str(tmp_path), hv)


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

    # Run 3: h1 refused, and with it its batch (every host of it failed): the play ends before
    # h2. The report lists h2 as not reached by this run, not with run 2's result from the cache.
    report = tmp_path / "report"
    broken = dict(hosts["h1"], sglang_model_path=str(tmp_path / "no-such-model"))
    inv = play_runs.write_inventory(str(tmp_path / "inventory-3.yml"), {"h1": broken, "h2": hosts["h2"]})
    third = play_runs.play(inv, "restart_extraction.yml", "-e", "sglang_serial=1", "-e",
                           "sglang_report_dir=%s sglang_report_name=r" % report, wrap=cache)
    out = third.stdout + third.stderr
    assert third.returncode != 0 and not _heads(out, hosts["h2"], "h2"), out[-5000:]
    md = (report / "r.md").read_text()
    assert re.search(r"^\| h2 \| - \| no result from this run", md, re.M), md
    assert not re.search(r"^\| h2 \| %s \|" % re.escape(hosts["h2"]["sglang_name"]), md, re.M), md
