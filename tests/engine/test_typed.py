"""Typed books: segments and returns check themselves as they are built; progress figures
are typed per unit."""

from __future__ import annotations

import pytest

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine.segment import Return, Segment, fresh, split, typed
from fitwork.errors import EngineError
from fitwork.telemetry.record import Progress, UnitProgress


@unit
def plus_one(x: int) -> int:
    return x + 1


@unit(kind="filter")
def odd(x: int) -> bool:
    return x % 2 == 1


def test_a_segment_whose_books_disagree_is_refused_in_one_line() -> None:
    with pytest.raises(EngineError, match=r"malformed segment of frame 4 \(attempt 0\): "
                                          r"2 offsets for 3 items; an engine built it wrong"):
        Segment(4, 0, range(2), None, None, [1, 2, 3])
    with pytest.raises(EngineError, match="3 offsets, 2 paths for 3 items"):
        Segment(4, 1, [0, 1, 2], [(0,), (1,)], None, [1, 2, 3])
    with pytest.raises(EngineError, match="3 offsets, 1 exponents for 3 items"):
        Segment(4, 1, [0, 1, 2], None, [1], [1, 2, 3])
    with pytest.raises(EngineError, match=r"frame -1 \(attempt 0\)"):
        Segment(-1, 0, range(1), None, None, [1])
    with pytest.raises(EngineError, match=r"of frame 2 \(attempt -1\)"):
        Segment(2, -1, range(1), None, None, [1])
    with pytest.raises(EngineError, match="malformed return of frame 3: 2 offsets, 1 exponents"):
        Return(3, [0, 1], [2])


def test_segments_cut_and_kept_keep_their_books_in_step() -> None:
    whole = Segment(7, 2, [0, 1, 1, 3], [(0,), (0,), (1,), ()], [1, 2, 2, 0], list("abcd"))
    head, rest = whole.head(3)
    assert (head.offsets, head.paths, head.exps, head.values) == (
        [0, 1, 1], [(0,), (0,), (1,)], [1, 2, 2], ["a", "b", "c"])
    assert (rest.frame, rest.attempt, rest.offsets, rest.values) == (7, 2, [3], ["d"])
    kept = whole.keep([1, 3])
    assert (kept.offsets, kept.paths, kept.exps, kept.values) == (
        [1, 3], [(0,), ()], [2, 0], ["b", "d"])
    assert [s.values for s in split(fresh(1, list(range(5))), 2)] == [[0, 1], [2, 3], [4]]
    assert fresh(1, [9]).head(4)[1].values == []
    assert typed([tuple(whole)]) == [whole]  # rebuilt from a pipe's plain tuple as it was


def test_progress_figures_are_typed_per_unit() -> None:
    snapshots: list[Progress] = []
    with fitwork.run(Pipeline(plus_one, odd, name="typed"), range(200), engine="sim",
                     progress=snapshots.append, progress_interval=0.01) as result:
        assert len(result.outputs()) == 100
    last = snapshots[-1]
    assert set(last.units) == {"plus_one", "odd"}
    assert all(type(u) is UnitProgress for s in snapshots for u in s.units.values())
    first, second = last.units["plus_one"], last.units["odd"]
    assert (first.items_in, first.items_out, second.items_in, second.items_out) == (
        200, 200, 200, 100)
    assert max(s.units["plus_one"].replicas for s in snapshots) == 1  # 0 once stopped
    assert first.busy_s > 0 and isinstance(first.items_in, int)
    assert last.completed == 200 and last.rate > 0
