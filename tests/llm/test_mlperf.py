"""MLPerf Server rows of current serving stacks, and their error on systems held out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fitwork.hardware.catalog import catalog
from fitwork.llm.mlperf import ServerResult, server_results, stack_checks


def _row(submitter: str, per_gpu: float, device_class: str = "H100-SXM") -> ServerResult:
    return ServerResult(submitter, f"{submitter}-box", device_class, 8, 2, "TensorRT-LLM",
                        "TensorRT 10.2.0", 10.0, per_gpu * 8, 0.3, 0.15, "closed/x/summary.txt")


def test_shipped_rows_name_their_stack_and_hold_together() -> None:
    rows = server_results()
    assert len(rows) == 24
    assert {r.device_class for r in rows} == {"H100-SXM", "H200", "MI300X"}
    assert {r.stack for r in rows} == {"TensorRT-LLM (MLPerf v4.1, FP8)",
                                       "vLLM (MLPerf v4.1, FP8)"}
    for r in rows:
        assert r.path.startswith("closed/") and r.path.endswith("mlperf_log_summary.txt")
        # MLPerf's closed division accepts 265-324 output tokens per sample on average.
        assert 265 <= r.output_tokens <= 324
        assert r.tpot_mean < 0.2 and r.ttft_mean < 2.0  # means within the p99 limits
        if r.device_class == "H100-SXM":  # NVIDIA's TP2 config caps a replica's batch at 1024
            assert r.tp == 2 and 300 < r.decode_batch <= 1024


def test_a_held_out_submitter_is_predicted_without_its_own_rows() -> None:
    rows = [_row("a", 100.0), _row("b", 110.0), _row("c", 120.0), _row("d", 200.0)]
    (check,) = stack_checks(rows)
    # d from the median of a, b, c (110), not of all four (115): error 90/200.
    assert check.worst_error == pytest.approx(90 / 200)
    assert check.n == 4 and check.groups == 4
    assert check.inside is not None and check.inside < 4  # d lies outside its range
    assert check.tokens_per_gpu == pytest.approx(115.0)


def test_another_class_is_carried_by_the_bandwidth_ratio() -> None:
    known = catalog()
    h100 = [_row("a", 100.0), _row("b", 100.0)]
    ratio = known.get("H200").memory_bandwidth / known.get("H100-SXM").memory_bandwidth
    h200 = [replace(_row("c", 100.0 * ratio * 1.1, "H200"), tp=1)]
    across = [c for c in stack_checks([*h100, *h200]) if c.target == "H200"]
    assert len(across) == 1 and across[0].source.startswith("H100-SXM x bandwidth")
    assert across[0].median_error == pytest.approx(0.1 / 1.1)
    assert across[0].inside is None  # one class pair: no held-out spread to range it by


def test_shipped_stacks_held_out_error_and_coverage() -> None:
    checks = {(c.target, c.source.split(" ")[0]): c for c in stack_checks()}
    h100 = checks["H100-SXM", "other"]
    assert h100.n == 14 and h100.groups == 8
    assert h100.median_error < 0.10 and h100.share is not None
    assert 0.6 <= h100.share <= 0.95
    assert checks["H200", "H100-SXM"].median_error < 0.10
    assert checks["MI300X", "other"].share is None  # two submitters: no range
