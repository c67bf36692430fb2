"""The HTML report's LLM section: TTFT/TPOT CDFs against the SLO, busy per pool, cost table."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np

from fitwork.llm.plan import LLMPlan
from fitwork.llm.sim import SimResult, compare
from fitwork.report.svg import LineSeries, Marker, colour, line_chart

POINTS = 200


def _cdf(values: Sequence[float]) -> list[tuple[float, float]]:
    """Up to ``POINTS`` points of the empirical CDF (x: value, y: share at or below)."""
    if not values:
        return []
    shares = np.linspace(0.0, 1.0, POINTS)
    xs = np.quantile(np.asarray(values), shares)
    return [(float(x), float(s)) for x, s in zip(xs, shares, strict=True)]


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.3f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _cost_rows(plans: Sequence[LLMPlan], sims: Sequence[SimResult]) -> list[list[str]]:
    rows = []
    for plan, sim in zip(plans, sims, strict=True):
        tokens = sim.goodput * (plan.mean_prompt + plan.mean_output)
        replayed = plan.cost_per_hour / (tokens * 3600) * 1e6 if tokens > 0 else None
        gpus = sum(p.gpus for p in plan.pools)
        rows.append([plan.label, f"{gpus}", f"${plan.cost_per_hour:,.2f}",
                     f"{plan.goodput:.3f}", f"{sim.goodput:.3f}", f"{sim.attained:.1%}",
                     _money(plan.cost_per_million_tokens), _money(replayed),
                     f"{(plan.ttft_p90 or 0):.3f} / {sim.ttft.get('p90', 0):.3f}",
                     f"{(plan.tpot_p90 or 0) * 1e3:.1f} / {sim.tpot.get('p90', 0) * 1e3:.1f}"])
    return rows


def llm_section(plans: Sequence[LLMPlan], sims: Sequence[SimResult]) -> str:
    """One ``<section id="llm">``: each plan beside its replay (``sims`` in the same order,
    run with ``keep_values=True`` for the CDFs)."""
    if len(plans) != len(sims) or not plans:
        raise ValueError("give one replay per plan, at least one")
    slo = plans[0].slo
    parts = [f"<p>{escape(plans[0].model)} on trace {escape(sims[0].trace)}; SLO TTFT p90 "
             f"{slo['ttft_p90']:g} s, TPOT p90 {slo['tpot_p90'] * 1e3:g} ms. Goodput: "
             "requests/s served within both SLOs; $/Mtok over prompt + output tokens.</p>"]
    for plan in plans:
        if plan.transferred:
            parts.append(f"<p>{escape(plan.label)}: not measured, transferred: "
                         f"{escape('; '.join(plan.transferred))}</p>")
    parts.append(_table(["plan", "GPUs", "$/h", "goodput plan", "goodput replay",
                         "within SLO", "$/Mtok plan", "$/Mtok replay",
                         "TTFT p90 plan / replay (s)", "TPOT p90 plan / replay (ms)"],
                        _cost_rows(plans, sims)))
    for key, name, scale, unit in (("ttft", "TTFT", 1.0, "s"), ("tpot", "TPOT", 1e3, "ms")):
        series = []
        top = slo[f"{key}_p90"] * scale * 1.5
        for i, sim in enumerate(sims):
            values = sim.ttft_values if key == "ttft" else sim.tpot_values
            points = [(x * scale, y) for x, y in _cdf(values)]
            if points:
                top = max(top, min(points[-1][0], 4 * slo[f"{key}_p90"] * scale))
                series.append(LineSeries(plans[i].label, [(min(x, top), y)
                                                          for x, y in points], colour(i)))
        target = slo[f"{key}_p90"] * scale
        parts.append(line_chart(series, top, label=f"{name} CDF against the SLO",
                                x_caption=f"{name} ({unit})", y_caption="share of requests",
                                y_max=1.0, markers=[Marker(target, f"SLO {target:g} {unit}")]))
    for plan, sim in zip(plans, sims, strict=True):
        lines = []
        for i, pool in enumerate(sim.pools):
            points = [((k + 0.5) * sim.bin_s, v) for k, v in enumerate(pool.busy_over_time)]
            lines.append(LineSeries(f"{pool.phase} {pool.device_class} TP{pool.tp} "
                                    f"x{pool.replicas}", points, colour(i)))
        span = max(sim.duration_s, sim.bin_s)
        parts.append(line_chart(lines, span, label=f"{plan.label}: busy share per pool",
                                x_caption="time (s)", y_caption="busy share", y_max=1.0))
        rows = [[f"{p.phase} {p.device_class} TP{p.tp} x{p.replicas}", f"{p.busy:.0%}",
                 f"{p.compute:.0%}", f"{p.capacity:.0%}", f"{p.bandwidth:.0%}"]
                for p in sim.pools]
        parts.append(_table([f"{plan.label}: pool", "busy (fleet utilization)", "MFU",
                             "server capacity", "HBM bandwidth of peak"], rows))
        parts.append("<pre>" + escape("\n".join(compare(plan, sim))) + "</pre>")
    return ('<section id="llm"><h2>LLM serving: plan and replay</h2>' + "".join(parts)
            + "</section>")


def render_llm_report(plans: Sequence[LLMPlan], sims: Sequence[SimResult],
                      title: str = "fitwork LLM report") -> str:
    """A whole HTML page holding `llm_section`, in the report's style."""
    from fitwork.report.html import STYLE

    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1>{llm_section(plans, sims)}</body></html>\n")
