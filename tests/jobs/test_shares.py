"""The share controller of `fitwork run --jobs` on real processes: each lever holds two CPU
burners to 3:1 while a mostly sleeping group, planned the largest share, is never throttled."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import psutil
import pytest

from fitwork.jobs.shares import ShareController, choose_lever, targets

BURN = "import os\nos.fork()\nx = 0\nwhile True:\n    x += 1\n"
"""Two processes (a fork) spinning: a group that wants two cores."""
NAP = "import time\nwhile True:\n    time.sleep(0.05)\n    sum(range(2000))\n"
"""A group that sleeps nearly all the time: its planned share it cannot use."""


def test_targets_renormalise_over_the_hungry() -> None:
    got = targets({"a": 2.0, "b": 1.0, "c": 1.0}, {"a": math.inf, "b": math.inf, "c": 0.1},
                  2.0)
    assert got["c"] == pytest.approx(0.05)  # sated: what it wants, no more
    assert got["a"] == pytest.approx(2 * got["b"]) and sum(got.values()) == pytest.approx(1)
    assert targets({"a": 1.0, "b": 1.0}, {"a": 5.0, "b": 5.0}, 2.0) == {"a": 0.5, "b": 0.5}


def _tree(process: subprocess.Popen[bytes]) -> list[psutil.Process]:
    with_children = [psutil.Process(process.pid)]
    return with_children + with_children[0].children(recursive=True)


def _cpu(process: subprocess.Popen[bytes]) -> float:
    total = 0.0
    for p in _tree(process):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


@pytest.mark.parametrize("lever", ["autogroup", "duty"])
def test_a_lever_holds_two_burners_to_their_planned_shares(lever: str) -> None:
    chosen = choose_lever(lever)
    assert chosen is not None
    control = ShareController(chosen)
    planned = {"big": 3.0, "small": 1.0, "idle": 4.0}
    started = {n: subprocess.Popen([sys.executable, "-c", NAP if n == "idle" else BURN],
                                   start_new_session=True) for n in planned}
    readings = []
    try:
        time.sleep(0.3)  # the forks are made
        for n, p in started.items():
            control.add(n, p.pid)
        began = time.monotonic()
        while time.monotonic() - began < 5.5:
            now = time.monotonic() - began
            cpu = {n: _cpu(p) for n, p in started.items()}
            control.step(now, cpu, {n: [q.pid for q in _tree(p)] for n, p in started.items()},
                         planned)
            readings.append((now, cpu))
            time.sleep(0.5)
    finally:
        control.close()
        for p in started.values():
            for q in _tree(p):
                q.kill()
            p.wait()
    (t0, first), (t1, last) = next(r for r in readings if r[0] >= 2.5), readings[-1]
    used = {n: (last[n] - first[n]) / (t1 - t0) for n in planned}
    assert used["big"] / (used["big"] + used["small"]) == pytest.approx(0.75, rel=0.10), used
    assert control.weights["idle"] == 1.0 and control.corrections["idle"] <= 1
    assert control.corrections["small"] >= 1  # it was moved, not born at its share
