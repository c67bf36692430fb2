"""Fusion and kinds as pure decisions: measured pieces in, joins and resources out."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fitwork.decomposition.fuse import HOP_S, POOLED, Piece, combine, plan_fusion
from fitwork.decomposition.kinds import choose
from fitwork.profiling.record import UnitProfile


def piece(kind: str, wall_ms: float, out_bytes: float = 100, hinted: bool = False,
          cpu_ms: float | None = None) -> Piece:
    return Piece(kind=kind, hinted=hinted, wall_s=wall_ms / 1e3,
                 cpu_s=(wall_ms if cpu_ms is None else cpu_ms) / 1e3, bytes_out=out_bytes)


def test_neighbours_of_one_pooled_kind_join_however_little_they_move() -> None:
    fused, decisions = plan_fusion([piece("cpu", 5, out_bytes=10), piece("cpu", 8)])
    assert len(fused) == 1 and fused[0].wall_s == pytest.approx(0.013)
    assert decisions[0].rule == "kind" and "share one pool" in decisions[0].reason


def test_different_kinds_stay_apart_unless_moving_costs_more_than_the_smaller() -> None:
    fetch, decode = piece("io", 20, out_bytes=50_000, cpu_ms=0.5), piece("cpu", 2)
    assert plan_fusion([fetch, decode])[1] == []
    tiny_decode = piece("cpu", 0.2)
    huge = piece("io", 20, out_bytes=2_000_000, cpu_ms=0.5)
    fused, decisions = plan_fusion([huge, tiny_decode])
    assert decisions[0].rule == "transfer" and fused[0].kind == "io"
    assert decisions[0].transfer_s == pytest.approx(HOP_S + 2e-3)
    assert "more than the 0.200 ms the second takes" in decisions[0].reason


def test_accelerator_neighbours_join_only_when_the_move_costs_more() -> None:
    apart = [piece("gpu", 5, out_bytes=1_000), piece("gpu", 6)]
    assert plan_fusion(apart)[1] == []
    heavy = [piece("gpu", 5, out_bytes=50_000_000), piece("gpu", 6)]
    assert plan_fusion(heavy)[1][0].rule == "transfer"


def test_hinted_pieces_of_different_kinds_never_join() -> None:
    pieces = [piece("gpu", 0.01, out_bytes=10**9, hinted=True), piece("cpu", 0.01, hinted=True)]
    assert plan_fusion(pieces)[1] == []


def test_a_trivial_piece_joins_a_neighbour_of_any_kind_but_a_hint_stays() -> None:
    pieces = [piece("io", 20, out_bytes=10, cpu_ms=0.2), piece("cpu", 0.03),
              piece("gpu", 4, hinted=True)]
    fused, decisions = plan_fusion(pieces)
    assert [d.rule for d in decisions] == ["trivial"]
    assert [p.kind for p in fused] == ["io", "gpu"]
    assert fused[-1].hinted


def test_combine_keeps_the_hinted_or_the_longer_kind() -> None:
    assert combine(piece("cpu", 9), piece("io", 1)).kind == "cpu"
    assert combine(piece("cpu", 9), piece("gpu", 1, hinted=True)).kind == "gpu"
    joined = combine(piece("io", 3, out_bytes=7, cpu_ms=1), piece("io", 4, out_bytes=9, cpu_ms=2))
    assert (joined.wall_s, joined.cpu_s, joined.bytes_out) == pytest.approx((0.007, 0.003, 9))


pieces = st.lists(st.builds(
    piece, kind=st.sampled_from(["cpu", "io", "gpu"]), wall_ms=st.floats(0.001, 50),
    out_bytes=st.floats(0, 1e7), hinted=st.booleans()), min_size=1, max_size=8)


@given(pieces)
def test_fusion_invariants(given_pieces: list[Piece]) -> None:
    fused, decisions = plan_fusion(given_pieces)
    assert len(fused) + len(decisions) == len(given_pieces)
    assert sum(p.wall_s for p in fused) == pytest.approx(sum(p.wall_s for p in given_pieces))
    assert fused[-1].bytes_out == given_pieces[-1].bytes_out
    for a, b in itertools.pairwise(fused):
        assert not (a.kind == b.kind and a.kind in POOLED), "pooled neighbours left apart"
    hinted_kinds = {p.kind for p in given_pieces if p.hinted}
    assert {p.kind for p in fused if p.hinted} <= hinted_kinds


def profile(wall: float, cpu: float, accel: float | None = None) -> UnitProfile:
    return UnitProfile(name="u", kind="map", resources={"cpu": 1.0}, device_class="cpu-x86",
                       samples=4, wall_s=wall, cpu_s=cpu, accel_s=accel, bytes_in=10,
                       bytes_out=10, output_ratio=1.0, peak_rss=0)


def test_kinds_come_from_the_hint_else_the_measurement() -> None:
    assert choose(None, profile(0.02, 0.001))[:2] == ("io", "measured")
    io = choose(None, profile(0.02, 0.001))[2]
    assert io.io == 8 and io.resources.cpu == pytest.approx(0.4)
    assert choose(None, profile(0.01, 0.0098))[0] == "cpu"
    gpu = choose(None, profile(0.01, 0.002, accel=0.008))
    assert gpu[0] == "gpu" and gpu[2].resources.gpu == 1
    assert choose("gpu", profile(0.02, 0.001))[:2] == ("gpu", "hint")
    assert choose(None, None)[:2] == (None, "default")
    assert choose(None, profile(0.0004, 0.0001))[0] == "cpu", "a short wait is not I/O"
