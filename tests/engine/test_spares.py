"""Spare workers on the local engine: once a unit lost a worker, the next death is a
hand-over to a worker forked and built ahead, not a start; a spare never used is in the
record, its building CPU counted in its unit's."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine.options import LocalOptions

BUILD_S = 0.6
KILLERS = (60, 180, 300)


@unit(cpu=0.5, name="slow_build")
class SlowBuild:
    """A unit that takes ``BUILD_S`` to build (a model's load) and kills its worker the
    first time it meets a killer row."""

    def __init__(self) -> None:
        time.sleep(BUILD_S)

    def __call__(self, row: dict[str, Any]) -> int:
        n = int(row["n"])
        if n in KILLERS:
            try:
                os.close(os.open(os.path.join(row["marks"], str(n)),
                                 os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.004)
        return n


def death_to_work(record: Any) -> list[float]:
    """Seconds from each death to its replacement's first call, in order of the deaths."""
    live = sorted((w for w in record.workers if w.worker_id >= 0), key=lambda w: w.started_s)
    gaps = []
    for dead in live:
        if dead.exit_code in (None, 0) or dead.ended_s is None:
            continue
        after = [w for w in live if w.started_s >= dead.ended_s and w.busy_intervals]
        gaps.append(after[0].busy_intervals[0][0] - dead.ended_s)
    return gaps


@pytest.mark.parametrize("spares", [LocalOptions().spares, 2, 0])
def test_a_death_after_the_first_is_a_hand_over(spares: int, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    rows = [{"n": n, "marks": str(marks)} for n in range(400)]
    with fitwork.run(Pipeline(SlowBuild), rows, engine="local", workers={"slow_build": 1},
                     spares=spares) as result:
        outputs = list(result)
    assert Counter(outputs) == Counter(range(400))  # exactly once
    record = result.record
    assert record.worker_restarts == len(KILLERS)
    gaps = death_to_work(record)
    assert len(gaps) == len(KILLERS)
    assert gaps[0] >= BUILD_S  # the first death: no spare yet, a start
    if spares:
        assert all(gap < BUILD_S / 2 for gap in gaps[1:]), gaps  # a hand-over
        let_go = [w for w in record.workers if w.worker_id < 0]
        assert len(let_go) == spares and {w.unit for w in let_go} == {"slow_build"}
        assert let_go[0].exit_cause == "a spare, let go unused"
        built = sum(w.build_cpu_s for w in record.workers if w.unit == "slow_build")
        assert record.units[0].build_cpu_s == pytest.approx(built)
    else:
        assert all(gap >= BUILD_S for gap in gaps), gaps
        assert all(w.worker_id >= 0 for w in record.workers)
