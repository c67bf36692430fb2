"""The LLM planner's results: pools, per-class figures, replay checks, plans and plan sets."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Objective = Literal["max_goodput", "min_cost"]
Mode = Literal["split", "colocated"]


class Pool(BaseModel):
    """Replicas of one phase on one device class of one node type."""

    phase: str
    device_class: str
    node_type: str
    tp: int
    replicas: int
    max_batch: int
    rate_per_replica: float
    load: float
    source: str
    limit: str
    network: float | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas


class ClassFigures(BaseModel):
    """One device class in a plan at the trace's mean rate: GPUs held and fitwork's three
    utilization figures (`fitwork.telemetry.utilization`): ``busy`` (fleet utilization:
    busy GPU-seconds over GPU-seconds held), ``compute`` (MFU: FLOPs the work needs over
    peak FLOP/s x GPUs), ``capacity`` (server capacity: requests/s carried over the most
    its replicas sustain within the SLOs); with ``bandwidth`` (HBM bytes over peak
    bandwidth, what bounds decode) and ``memory`` (weights and KV cache held)."""

    device_class: str
    gpus: int
    busy: float
    compute: float
    capacity: float
    bandwidth: float
    memory: float


class ReplayCheck(BaseModel):
    """A plan replayed at the rate it promises (`fitwork.llm.verify`): the share of requests
    within both SLOs, the p90s, and the rounds of re-provisioning it took (``holds``: at least
    ``target`` of the requests within both SLOs)."""

    rate: float
    requests: int
    window: str
    attained: float
    ttft_attained: float
    tpot_attained: float
    ttft_p90: float | None
    tpot_p90: float | None
    goodput: float
    target: float
    holds: bool
    rounds: int
    seconds: float
    history: list[str] = []


class LLMPlan(BaseModel):
    """A fitted serving plan and its predicted figures.

    ``capacity`` is the requests/s the pools carry within the SLOs at a steady (Poisson)
    rate; ``goodput`` is the mean rate of the trace they serve within the SLOs, capacity /
    ``burst`` (the trace's 99th-percentile one-minute rate over its mean,
    `Trace.burstiness`, at ``trace_rate``: scaling the trace's rate compresses its time, so
    the same windows hold the same requests).  Cost per million tokens is at ``goodput``,
    prompt and output tokens counted.
    """

    model: str
    trace: str
    mode: Mode
    label: str
    objective: Objective
    slo: dict[str, float]
    feasible: bool
    goodput: float
    tokens_per_s: float
    cost_per_hour: float
    cost_per_million_tokens: float | None
    pools: list[Pool]
    utilization: list[ClassFigures]
    ttft_p90: float | None
    tpot_p90: float | None
    bottleneck: str
    transferred: list[str]
    solver: dict[str, float | str]
    mean_prompt: float
    mean_output: float
    burst: float = 1.0
    capacity: float = 0.0
    trace_rate: float = 0.0
    stack: str = ""
    derate: dict[str, float] = {}
    replay: ReplayCheck | None = None


class PlanSet(BaseModel):
    """The phase-split plan beside the colocated baselines (each class, then the best mix)."""

    split: LLMPlan
    colocated: list[LLMPlan]

    def best_colocated(self) -> LLMPlan:
        """The colocated baseline with the most goodput (ties: the cheaper per token)."""
        return max(self.colocated, key=lambda p: (p.goodput, -(p.cost_per_million_tokens or 0)))
