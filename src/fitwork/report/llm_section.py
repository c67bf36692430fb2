"""The report's ``llm`` section drawn from its model (`fitwork.llm.section.LLMSection`):
the cost table, the TTFT and TPOT CDFs against the SLO, each plan's pools over time."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

import numpy as np

from fitwork.errors import InputError
from fitwork.report.parts import basis_note, html_section, html_table
from fitwork.report.svg import LineSeries, Marker, colour, legend_height, line_chart

if TYPE_CHECKING:
    from fitwork.llm.section import LLMRun, LLMSection

LLM_SECTION = "llm"
"""The id of the LLM serving section, after `SECTIONS` when the report is given one."""
CDF_POINTS = 200


def _cdf(values: Sequence[float]) -> list[tuple[float, float]]:
    """Up to ``CDF_POINTS`` points of the empirical CDF (x: value, y: share at or below)."""
    if not len(values):
        return []
    shares = np.linspace(0.0, 1.0, CDF_POINTS)
    xs = np.quantile(np.asarray(values, dtype=float), shares)
    return [(float(x), float(y)) for x, y in zip(xs, shares, strict=True)]


def _llm_money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.3f}"


def _pair(planned: float | None, replayed: float | None, scale: float, digits: int) -> str:
    def one(v: float | None) -> str:
        return "-" if v is None else f"{v * scale:.{digits}f}"

    return f"{one(planned)} / {one(replayed)}"


def _llm_cdf(section: LLMSection, key: str, name: str, scale: float, unit: str) -> str:
    slo = (section.ttft_slo if key == "ttft" else section.tpot_slo) * scale
    top = slo * 1.5
    series = []
    for i, run in enumerate(section.runs):
        points = [(x * scale, y) for x, y in
                  _cdf(run.ttft_values if key == "ttft" else run.tpot_values)]
        if points:
            top = max(top, min(points[-1][0], 4 * slo))
            series.append((run.label, points, colour(i)))
    lines = [LineSeries(label, [(min(x, top), y) for x, y in points], c)
             for label, points, c in series]
    return line_chart(lines, top, label=f"{name} CDF against the SLO",
                      height=240 + legend_height([s.name for s in lines]),
                      x_caption=f"{name} ({unit}), longer drawn at {top:.3g} {unit}",
                      y_caption="share of requests", y_max=1.0,
                      markers=[Marker(slo, f"SLO {slo:g} {unit}",
                                      f"{name} p90 target {slo:g} {unit}")])


def _llm_pools(run: LLMRun) -> str:
    lines = [LineSeries(pool.name, [((k + 0.5) * run.bin_s, min(1.0, max(0.0, v)))
                                    for k, v in enumerate(pool.busy_over_time)], colour(i))
             for i, pool in enumerate(run.pools)]
    chart = line_chart(lines, max(run.duration_s, run.bin_s),
                       label=f"{run.label}: busy share per pool",
                       height=240 + legend_height([s.name for s in lines]),
                       x_caption=f"time (s), bins of {run.bin_s:.3g} s",
                       y_caption="busy share", y_max=1.0)
    table = html_table([f"{run.label}: pool", "busy (fleet utilization)", "MFU",
                        "server capacity", "HBM bandwidth of peak"],
                       [[p.name, *(f"{min(1.0, max(0.0, v)):.0%}" for v in
                                   (p.busy, p.compute, p.capacity, p.bandwidth))]
                        for p in run.pools])
    notes = "<pre>" + escape("\n".join(run.notes)) + "</pre>" if run.notes else ""
    return f"<h3>{escape(run.label)}</h3>" + chart + table + notes


def llm_section(section: LLMSection) -> str:
    """The ``llm`` section: the cost table, the TTFT and TPOT CDFs against the SLO, and per
    plan the busy share of each pool over time with its utilization figures."""
    if not section.runs:
        raise InputError("an LLM section needs at least one plan and its replay")
    parts = [f'<p class="note">{escape(section.model)} on trace {escape(section.trace)}; '
             f"SLO TTFT p90 {section.ttft_slo:g} s, TPOT p90 {section.tpot_slo * 1e3:g} ms. "
             "Goodput: requests/s served within both SLOs; $/Mtok over prompt + output "
             "tokens.</p>"]
    parts += [basis_note(f"{run.label}: not measured, transferred: {'; '.join(run.transferred)}")
              for run in section.runs if run.transferred]
    rows = [[run.label, f"{run.gpus}", f"${run.cost_per_hour:,.2f}",
             f"{run.goodput_planned:.3f}", f"{run.goodput_replayed:.3f}",
             f"{run.attained:.1%}", _llm_money(run.cost_per_million_planned),
             _llm_money(run.cost_per_million_replayed),
             _pair(run.ttft_p90_planned, run.ttft_p90_replayed, 1.0, 3),
             _pair(run.tpot_p90_planned, run.tpot_p90_replayed, 1e3, 1)]
            for run in section.runs]
    parts.append(html_table(["plan", "GPUs", "$/h", "goodput plan", "goodput replay",
                             "within SLO", "$/Mtok plan", "$/Mtok replay",
                             "TTFT p90 plan / replay (s)", "TPOT p90 plan / replay (ms)"], rows))
    parts.append(_llm_cdf(section, "ttft", "TTFT", 1.0, "s"))
    parts.append(_llm_cdf(section, "tpot", "TPOT", 1e3, "ms"))
    parts += [_llm_pools(run) for run in section.runs]
    return html_section(LLM_SECTION, "LLM serving: plan and replay", *parts)
