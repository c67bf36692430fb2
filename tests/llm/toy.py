"""A toy model with exactly linear phase timings, and hand-made plans, for the LLM tests."""

from __future__ import annotations

from fitwork.fit.calibration import ModelShape
from fitwork.llm.phases import PhaseBook, PhaseRow
from fitwork.llm.plan import LLMPlan, Pool

CLASS = "A100-80GB"
# prefill_ms = 50 + 100 * (b p / 1000); decode_ms = 20 + 1 * b + C2 * (b ctx / 1000)
SHAPES = {
    "toy": ModelShape(params=1e9, layers=1, kv_heads=1, head_dim=64),
    # 78 GB of weights on an 80 GiB GPU: KV room for 3,013 tokens of 2.6 MB each.
    "toy-big": ModelShape(params=39e9, layers=80, kv_heads=64, head_dim=128),
}


def rows(model: str, c2: float = 0.0) -> list[PhaseRow]:
    out = []
    for p, b, ctx in [(250, 1, 300), (500, 1, 600), (1000, 1, 1200), (2000, 1, 2500),
                      (500, 2, 700), (500, 4, 900), (500, 8, 1500)]:
        out.append(PhaseRow(model, CLASS, 1, p, b, float(ctx), 0,
                            (50 + 100 * b * p / 1000) / 1e3,
                            (20 + b + c2 * b * ctx / 1000) / 1e3))
    return out


def book(c2: float = 0.0) -> PhaseBook:
    return PhaseBook(rows("toy", c2) + rows("toy-big", c2), shapes=SHAPES)


SPEEDUP = {1: 1.0, 2: 2.0, 4: 4.4, 8: 6.0}
"""How much faster than TP1 each TP degree runs both phases in `tp_book`: per GPU, TP4 is
the fastest (1.1x TP1), TP8 the slowest (0.75x)."""


def tp_book(speedup: dict[int, float] | None = None) -> PhaseBook:
    """The toy model measured at TP 1, 2, 4 and 8: `rows` divided by ``speedup[tp]``."""
    out = []
    for tp, s in (speedup or SPEEDUP).items():
        out += [PhaseRow(r.model, r.device_class, tp, r.prompt, r.batch, r.context, r.output,
                         (r.prefill_s or 0.0) / s, (r.decode_s or 0.0) / s)
                for r in rows("toy")]
    return PhaseBook(out, shapes=SHAPES)


def plan(pools: list[tuple[str, int, int]], *, model: str = "toy", mode: str = "split",
         ttft: float = 1.0, tpot: float = 1.0, network: float | None = None) -> LLMPlan:
    """A plan of (phase, replicas, max batch) pools of the toy class at TP1."""
    return LLMPlan(
        model=model, trace="toy", mode=mode, label=f"toy {mode}", objective="max_goodput",
        slo={"ttft_p90": ttft, "tpot_p90": tpot}, feasible=True, goodput=1.0,
        tokens_per_s=1.0, cost_per_hour=1.0, cost_per_million_tokens=1.0,
        pools=[Pool(phase=ph, device_class=CLASS, node_type="n", tp=1, replicas=n,
                    max_batch=b, rate_per_replica=1.0, load=1.0, source="measured",
                    limit="", network=network) for ph, n, b in pools],
        utilization=[], ttft_p90=None, tpot_p90=None, bottleneck="", transferred=[],
        solver={}, mean_prompt=1.0, mean_output=1.0)
