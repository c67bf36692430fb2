"""A unit's bounds on the calls of all its replicas together, as the engines enforce them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import fitwork
from fitwork import Pipeline, unit

Item = tuple[str, int]  # (the log file every replica appends to, a number)


def _log(path: str, event: str) -> None:
    with open(path, "a") as log:
        log.write(f"{event} {time.time():.6f}\n")


@unit(io=8, max_concurrency=3)
def bounded_call(item: Item) -> int:
    _log(item[0], "start")
    time.sleep(0.03)
    _log(item[0], "end")
    return item[1]


@unit(rate_limit=100.0)
def paced_call(item: Item) -> int:
    _log(item[0], "start")
    return item[1]


def events(path: Path) -> list[tuple[str, float]]:
    return [(kind, float(t)) for kind, t in
            (line.split() for line in path.read_text().splitlines())]


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_max_concurrency_holds_across_replicas(engine: str, tmp_path: Path,
                                               request: pytest.FixtureRequest) -> None:
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    log = str(tmp_path / "calls.log")
    with fitwork.run(Pipeline(bounded_call), [(log, i) for i in range(60)], engine=engine,
                     workers={"bounded_call": 3}) as result:
        assert sorted(result) == list(range(60))
    in_flight = peak = 0
    for kind, _ in sorted(events(tmp_path / "calls.log"), key=lambda e: (e[1], e[0] == "start")):
        in_flight += 1 if kind == "start" else -1
        peak = max(peak, in_flight)
    # 3 replicas x 8 threads could run 24 calls at once; the unit said 3
    assert 2 <= peak <= 3, peak


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_rate_limit_spaces_the_calls_of_every_replica(engine: str, tmp_path: Path,
                                                      request: pytest.FixtureRequest) -> None:
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    log = str(tmp_path / "calls.log")
    with fitwork.run(Pipeline(paced_call), [(log, i) for i in range(50)], engine=engine,
                     workers={"paced_call": 2}) as result:
        assert sorted(result) == list(range(50))
    starts = sorted(t for _, t in events(tmp_path / "calls.log"))
    rate = (len(starts) - 1) / (starts[-1] - starts[0])
    assert rate <= 100 * 1.05, rate
