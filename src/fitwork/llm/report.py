"""The report's LLM section from plans and their replays (drawn by `fitwork.report.llm_section`)."""

from __future__ import annotations

from collections.abc import Sequence

from fitwork.llm.plan import LLMPlan
from fitwork.llm.section import LLMPool, LLMRun, LLMSection
from fitwork.llm.sim import SimResult, compare
from fitwork.report.html import render_report
from fitwork.report.llm_section import llm_section as render_section


def _run(plan: LLMPlan, sim: SimResult) -> LLMRun:
    tokens = sim.goodput * (plan.mean_prompt + plan.mean_output)
    return LLMRun(
        label=plan.label, gpus=sum(p.gpus for p in plan.pools),
        cost_per_hour=plan.cost_per_hour, goodput_planned=plan.goodput,
        goodput_replayed=sim.goodput, attained=sim.attained,
        cost_per_million_planned=plan.cost_per_million_tokens,
        cost_per_million_replayed=plan.cost_per_hour / (tokens * 3600) * 1e6
        if tokens > 0 else None,
        ttft_p90_planned=plan.ttft_p90, ttft_p90_replayed=sim.ttft.get("p90"),
        tpot_p90_planned=plan.tpot_p90, tpot_p90_replayed=sim.tpot.get("p90"),
        ttft_values=sim.ttft_values, tpot_values=sim.tpot_values,
        pools=[LLMPool(name=f"{p.phase} {p.device_class} TP{p.tp} x{p.replicas}",
                       busy_over_time=p.busy_over_time, busy=p.busy, compute=p.compute,
                       capacity=p.capacity, bandwidth=p.bandwidth) for p in sim.pools],
        bin_s=sim.bin_s, duration_s=sim.duration_s, notes=compare(plan, sim),
        transferred=plan.transferred)


def llm_report_section(plans: Sequence[LLMPlan], sims: Sequence[SimResult]) -> LLMSection:
    """What the report's ``llm`` section shows: each plan beside its replay (``sims`` in the
    same order, run with ``keep_values=True`` for the CDFs)."""
    if len(plans) != len(sims) or not plans:
        raise ValueError("give one replay per plan, at least one")
    slo = plans[0].slo
    return LLMSection(model=plans[0].model, trace=sims[0].trace, ttft_slo=slo["ttft_p90"],
                      tpot_slo=slo["tpot_p90"],
                      runs=tuple(_run(p, s) for p, s in zip(plans, sims, strict=True)))


def llm_section(plans: Sequence[LLMPlan], sims: Sequence[SimResult]) -> str:
    """One ``<section id="llm">``, as `fitwork report --llm` puts it in the run report."""
    return render_section(llm_report_section(plans, sims))


def render_llm_report(plans: Sequence[LLMPlan], sims: Sequence[SimResult],
                      title: str = "fitwork LLM report") -> str:
    """A whole HTML page holding only the LLM section, in the report's style."""
    return render_report([], llm=llm_report_section(plans, sims), title=title)
