"""module_utils/_drain: load parsing for every sglang version, the bounded wait, settle time,
the timeout policy - with scripted server answers and a fake clock (no sleeping)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._fleet import _drain
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._core._http import Response

METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0"} 2.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="1"} 1.0
sglang:num_queue_reqs{model_name="m",engine_type="unified"} 3.0
sglang:token_usage{model_name="m"} 0.5
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Server:
    """Answers /get_load with a scripted running count per reading (the last one repeats)."""

    def __init__(self, running: List[int], paths: Optional[Dict[str, Response]] = None) -> None:
        self.running = list(running)
        self.paths = paths
        self.seen: List[str] = []

    def __call__(self, path: str) -> Response:
        self.seen.append(path)
        if self.paths is not None:
            return self.paths.get(path, Response(404, {"detail": "Not Found"}))
        n = self.running.pop(0) if len(self.running) > 1 else self.running[0]
        return Response(200, [{"dp_rank": 0, "num_reqs": n, "num_waiting_reqs": 0, "num_tokens": 0}])


def run(server: Server, **kw: Any) -> Dict[str, Any]:
    clock = Clock()
    kw.setdefault("poll_interval", 1.0)
    kw.setdefault("settle", 2.0)
    kw.setdefault("timeout", 60.0)
    return _drain.drain(server, _drain.Options(**kw), clock=clock, sleep=clock.sleep)


# -- parsing --------------------------------------------------------------------------------------
def test_get_load_of_056_counts_waiting_inside_num_reqs() -> None:
    body = [{"rid": None, "dp_rank": 0, "num_reqs": 5, "num_waiting_reqs": 2, "num_tokens": 9},
            {"rid": None, "dp_rank": 1, "num_reqs": 1, "num_waiting_reqs": 0, "num_tokens": 1}]
    load = _drain.parse_get_load(body)
    assert (load.running, load.waiting, load.idle) == (4, 2, False)


def test_get_load_with_running_and_queue_names() -> None:
    load = _drain.parse_get_load({"num_running_reqs": 0, "num_queue_reqs": 1})
    assert (load.running, load.waiting) == (0, 1)


def test_v1_loads_of_0523() -> None:
    body = {"version": "0.5.23", "loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0},
                                           {"dp_rank": 1, "num_running_reqs": 3, "num_waiting_reqs": 1}]}
    load = _drain.parse_v1_loads(body)
    assert (load.running, load.waiting, load.source) == (3, 1, "v1_loads")


def test_metrics_gauges_sum_over_label_sets() -> None:
    load = _drain.parse_metrics(METRICS)
    assert (load.running, load.waiting) == (3, 3)


@pytest.mark.parametrize("body", [None, [], {}, [{"dp_rank": 0}], "text", [{"num_reqs": "x"}]])
def test_unknown_shapes_are_no_load(body: Any) -> None:
    assert _drain.parse_get_load(body) is None


# -- sources ----------------------------------------------------------------------------------------
def test_falls_back_to_v1_loads_then_metrics_and_keeps_the_one_that_answered() -> None:
    zeroed = METRICS.replace("2.0", "0.0").replace("1.0", "0.0").replace("3.0", "0.0")
    server = Server([0], paths={"/metrics": Response(200, zeroed)})
    res = run(server)
    assert res["drained"] and res["source"] == "metrics"
    assert server.seen[:3] == ["/get_load", "/v1/loads", "/metrics"]
    assert set(server.seen[3:]) == {"/metrics"}


def test_no_source_is_a_clear_failure() -> None:
    with pytest.raises(SglangError) as err:
        run(Server([0], paths={}))
    assert err.value.details["reason"] == "no_load_source" and "--enable-metrics" in err.value.msg


def test_unauthorized() -> None:
    with pytest.raises(SglangError) as err:
        run(Server([0], paths={"/get_load": Response(401, {"error": "Unauthorized"})}))
    assert err.value.details["reason"] == "unauthorized"


def test_a_server_that_does_not_answer_has_nothing_to_drain() -> None:
    res = run(Server([0], paths={"/get_load": Response(None, None, "connection refused")}))
    assert res["drained"] and res["reason"] == "unreachable"


# -- the wait -------------------------------------------------------------------------------------
def test_waits_until_idle_for_the_settle_time() -> None:
    server = Server([3, 2, 1, 0, 0, 0, 0])
    res = run(server)
    assert res["drained"] and res["reason"] == "drained" and res["peak"] == 3
    assert [s["running"] for s in res["samples"]] == [3, 2, 1, 0]
    assert res["elapsed"] == pytest.approx(5.0)  # 3 busy readings, then 2 s of idleness


def test_a_request_arriving_during_the_settle_time_restarts_it() -> None:
    res = run(Server([0, 1, 0, 0, 0]))
    assert res["drained"] and [s["running"] for s in res["samples"]] == [0, 1, 0]
    assert res["elapsed"] == pytest.approx(4.0)


def test_timeout_fails_and_says_nothing_was_stopped() -> None:
    with pytest.raises(SglangError) as err:
        run(Server([2]), timeout=10)
    assert err.value.details["reason"] == "timeout"
    assert "Nothing was stopped" in err.value.msg and err.value.details["load"]["running"] == 2


def test_timeout_can_proceed() -> None:
    res = run(Server([2]), timeout=10, on_timeout="proceed")
    assert not res["drained"] and res["reason"] == "timeout" and res["elapsed"] == pytest.approx(10.0)


def test_idle_at_the_deadline_counts_as_drained() -> None:
    res = run(Server([1, 1, 0]), timeout=2, settle=5)
    assert res["drained"] and res["reason"] == "drained"


def test_check_mode_reads_once() -> None:
    server = Server([4])
    res = run(server, check_mode=True)
    assert not res["drained"] and res["reason"] == "check_mode" and len(server.seen) == 1


@pytest.mark.parametrize("bad", [dict(poll_interval=0), dict(sources=["nope"]), dict(sources=[]),
                                 dict(on_timeout="maybe"), dict(timeout=-1)])
def test_invalid_options(bad: Dict[str, Any]) -> None:
    with pytest.raises(SglangError) as err:
        run(Server([0]), **bad)
    assert err.value.details["reason"] == "invalid_argument"
