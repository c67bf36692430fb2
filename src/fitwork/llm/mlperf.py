"""Current serving stacks' Llama-2-70B rates from MLPerf Inference Server results, held out.

fitwork's shipped phase models are fitted on Splitwise's 2023 rows (`SPLITWISE_STACK`).
MLPerf Inference v4.1 (closed division, Apache-2.0; ``mlperf_llama2_70b_server.csv`` in
``fitwork/fit/data/``, see the README there) publishes, per submitted system, what a current
stack served in its Server scenario: Poisson arrivals of OpenOrca prompts under TTFT p99
<= 2 s and TPOT p99 <= 200 ms, with TensorRT-LLM (H100-SXM at TP2, H200 at TP1, per the
submitters' configs) or vLLM (MI300X at TP1), FP8 weights.  Each row gives the output
tokens/s, the samples/s, and mean and p90 TTFT and TPOT of one system.

MLPerf publishes no per-phase timings, so these rows are not phase rows a `PhaseBook` fits
(a prefill and a decode time at a batch and a context): they are serving rates of a named
stack on a class, and `stack_checks` says how well one predicts another it never saw:

- same stack and class: each submitter's systems predicted from the other submitters' (the
  median output tokens/s per GPU), with a p10-p90 range built from those others alone
  (`heldout_range` over their own leave-one-submitter-out residuals);
- across classes, same stack: every row of one class predicted from the median of another
  class times the HBM bandwidth ratio (decode, most of the tokens, is memory-bound).

``decode_batch`` is Little's law on a replica's decoding sequences: output tokens/s per
replica x mean TPOT (NVIDIA's H100 TP2 config caps it at 1024; the rows give 800-850).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from fitwork.fit.heldout import Residual, data_rows, heldout_range
from fitwork.hardware.catalog import Catalog, catalog

SERVER_FILE = "mlperf_llama2_70b_server.csv"
SERVER_SOURCE = ("MLPerf Inference v4.1 closed Llama-2-70B Server results "
                 "(mlcommons/inference_results_v4.1 @ a2f5d66, Apache-2.0)")


@dataclass(frozen=True)
class ServerResult:
    """One system's MLPerf Llama-2-70B Server result (times in seconds)."""

    submitter: str
    system: str
    device_class: str
    devices: int
    tp: int
    framework: str
    software: str
    samples_per_s: float
    tokens_per_s: float
    ttft_mean: float
    tpot_mean: float
    path: str

    @property
    def stack(self) -> str:
        """The serving stack, as a plan would name it."""
        return f"{self.framework} (MLPerf v4.1, FP8)"

    @property
    def per_gpu(self) -> float:
        """Output tokens/s per GPU at the Server scenario's SLOs."""
        return self.tokens_per_s / self.devices

    @property
    def output_tokens(self) -> float:
        """Mean output tokens per request."""
        return self.tokens_per_s / self.samples_per_s

    @property
    def decode_batch(self) -> float:
        """Mean sequences decoding in one replica (Little's law)."""
        return self.tokens_per_s / (self.devices / self.tp) * self.tpot_mean


def server_results() -> list[ServerResult]:
    """The shipped MLPerf Server rows."""
    return [ServerResult(r["submitter"], r["system"], r["device_class"], int(r["devices"]),
                         int(r["tp"]), r["framework"], r["software"], float(r["samples_per_s"]),
                         float(r["tokens_per_s"]), float(r["ttft_mean_ms"]) / 1e3,
                         float(r["tpot_mean_ms"]) / 1e3, r["path"])
            for r in data_rows(SERVER_FILE)]


@dataclass(frozen=True)
class StackCheck:
    """How one stack's rate on a class is predicted from rows that leave it out."""

    stack: str
    target: str
    source: str
    n: int
    groups: int
    median_error: float
    worst_error: float
    inside: int | None
    tokens_per_gpu: float

    @property
    def share(self) -> float | None:
        """Held-out rows inside their range (None: no range could be built)."""
        return None if self.inside is None else self.inside / self.n


def _residuals(train: Sequence[ServerResult], test: Sequence[ServerResult],
               factor: float = 1.0) -> list[Residual]:
    predicted = statistics.median(r.per_gpu for r in train) * factor
    return [Residual("mlperf", train[0].device_class, r.device_class, "memory", r.submitter,
                     predicted, r.per_gpu) for r in test]


def _leave_submitter_out(rows: Sequence[ServerResult]) -> list[Residual]:
    out = []
    for held in sorted({r.submitter for r in rows}):
        train = [r for r in rows if r.submitter != held]
        if train:
            out.extend(_residuals(train, [r for r in rows if r.submitter == held]))
    return out


def _within(stack: str, rows: Sequence[ServerResult]) -> StackCheck:
    """Each submitter's rows from the others', ranged by the others' own held-out spread."""
    n = inside = 0
    errors: list[float] = []
    for held in sorted({r.submitter for r in rows}):
        train = [r for r in rows if r.submitter != held]
        test = [r for r in rows if r.submitter == held]
        found = _residuals(train, test)
        errors.extend(x.error for x in found)
        inner = _leave_submitter_out(train)
        if len({x.group for x in inner}) >= 2:
            low, high = heldout_range(inner)
            n, inside = n + len(found), inside + sum(low <= x.ratio <= high for x in found)
    return StackCheck(stack, rows[0].device_class, "other submitters, same class", len(errors),
                      len({r.submitter for r in rows}), statistics.median(errors), max(errors),
                      inside if n == len(errors) else None,
                      statistics.median(r.per_gpu for r in rows))


def _across(stack: str, source: Sequence[ServerResult], target: Sequence[ServerResult],
            known: Catalog) -> StackCheck:
    """Every row of ``target``'s class from ``source``'s class by the HBM bandwidth ratio."""
    a, b = known.get(source[0].device_class), known.get(target[0].device_class)
    factor = (b.memory_bandwidth or 1.0) / (a.memory_bandwidth or 1.0)
    errors = [x.error for x in _residuals(source, target, factor)]
    return StackCheck(stack, b.name, f"{a.name} x bandwidth {factor:.2f}", len(errors),
                      len({r.submitter for r in target}), statistics.median(errors),
                      max(errors), None, statistics.median(r.per_gpu for r in target))


def stack_checks(rows: Sequence[ServerResult] | None = None,
                 known: Catalog | None = None) -> list[StackCheck]:
    """Per stack and class: held-out error within the class (with range coverage where
    three submitters or more allow one), then from each other class of the stack."""
    rows = server_results() if rows is None else list(rows)
    known = known or catalog()
    groups: dict[tuple[str, str], list[ServerResult]] = defaultdict(list)
    for r in rows:
        groups[r.stack, r.device_class].append(r)
    out = []
    for (stack, name), group in sorted(groups.items()):
        if len({r.submitter for r in group}) >= 2:
            out.append(_within(stack, group))
        for (other_stack, other), source in sorted(groups.items()):
            if other_stack == stack and other != name:
                out.append(_across(stack, source, group, known))
    return out
