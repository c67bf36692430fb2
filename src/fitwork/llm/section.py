"""What the report's ``llm`` section shows: LLM serving plans beside their replays (built by
`fitwork.llm.report`, drawn by `fitwork.report.llm_section`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LLMPool:
    """One pool of an LLM serving plan as replayed (``name`` e.g. ``decode A100-80GB TP2
    x26``): its busy share per time bin, and over the replay its fleet utilization
    (``busy``), MFU (``compute``), server capacity and HBM bandwidth over peak."""

    name: str
    busy_over_time: Sequence[float]
    busy: float
    compute: float
    capacity: float
    bandwidth: float


@dataclass(frozen=True)
class LLMRun:
    """One LLM serving plan beside its replay: GPUs and $/h, goodput (requests/s within
    both SLOs), the share of requests within both, $/Mtok, TTFT and TPOT p90 (seconds;
    ``None`` where not predicted), every request's TTFT and TPOT as replayed, the pools over
    time bins of ``bin_s`` seconds, ``notes`` on where the replay departs from the plan and
    the pools whose timings are ``transferred`` rather than measured."""

    label: str
    gpus: int
    cost_per_hour: float
    goodput_planned: float
    goodput_replayed: float
    attained: float
    cost_per_million_planned: float | None
    cost_per_million_replayed: float | None
    ttft_p90_planned: float | None
    ttft_p90_replayed: float | None
    tpot_p90_planned: float | None
    tpot_p90_replayed: float | None
    ttft_values: Sequence[float]
    tpot_values: Sequence[float]
    pools: Sequence[LLMPool]
    bin_s: float
    duration_s: float
    notes: Sequence[str] = ()
    transferred: Sequence[str] = ()


@dataclass(frozen=True)
class LLMSection:
    """What the ``llm`` section shows: ``model`` served on ``trace`` under the SLOs (p90
    seconds), one `LLMRun` per plan (`fitwork.llm.report.llm_report_section` builds it)."""

    model: str
    trace: str
    ttft_slo: float
    tpot_slo: float
    runs: Sequence[LLMRun] = field(default_factory=tuple)
