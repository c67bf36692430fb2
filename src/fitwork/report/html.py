"""One self-contained HTML report of run records: the verdict first, then the figures behind it.

``render_report`` returns a single page with inline CSS and inline SVG (no scripts, nothing
fetched when it is viewed).  Its sections carry stable ids::

    headline     one line: the compared run's items/s vs the baseline's, the ratio, its
                 basis (measured, same host?, same input?), latency when worse, the plan's
                 prediction; plainly marked when the compared (fitted) run loses
    correctness  items in / completed / outputs / failures per run; whether outputs match
    setup        the host each run had and the workload: pipeline, units, replicas, items
    summary      one row per run: status, items, wall seconds, items/s, latency, ratios
    throughput   measured source items/s over time per run (and the plan's prediction);
                 latency p50 / p95 per run beside it
    utilization  fleet utilization, cores busy of the host, MFU, server capacity; predicted
                 beside realized when a plan is given
    timeline     every worker's busy intervals per unit and run (grey where alive and idle)
    replicas     live replicas per unit over time, with each re-fit marked
    devices      accelerator utilization and memory over time, from device samples
    processes    memory, open files and shared memory of the run's processes over time
    queues       items waiting in front of each unit over time, per run
    cost         cost per million items per run, with the price's basis
    llm          (given an `LLMSection`) LLM serving plans beside their replays: planned and
                 replayed goodput, share within the SLOs, $/h and $/Mtok, TTFT and TPOT p90;
                 the TTFT and TPOT CDFs against the SLO; per plan the busy share of each
                 pool over time, its utilization figures, and where the replay departs

The run labelled ``monolithic`` (else the first) is the baseline; the others, those
labelled ``fitted`` first, are compared with it.  The arithmetic is in
`fitwork.report.figures` and `fitwork.telemetry.cost`; the sections are drawn by
`fitwork.report.verdict` (headline, correctness), `runs` (setup, summary), `charts` (the
sections over time), `utilization` (utilization, cost) and `llm_section`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING

from fitwork.errors import InputError
from fitwork.fit.plan import Plan
from fitwork.hardware.catalog import Catalog, catalog
from fitwork.report.charts import (
    devices_section,
    processes_section,
    queues_section,
    replicas_section,
    throughput_section,
    timeline_section,
)
from fitwork.report.llm_section import LLM_SECTION, llm_section
from fitwork.report.runs import setup_section, summary_section
from fitwork.report.svg import colour
from fitwork.report.utilization import cost_section, utilization_section
from fitwork.report.verdict import (
    Headline,
    Tone,
    correctness,
    correctness_section,
    default_labels,
    headline,
    headline_section,
    layout_label,
)
from fitwork.telemetry.cost import cost_per_million, run_price
from fitwork.telemetry.record import RunRecord
from fitwork.telemetry.utilization import RunFigures, run_figures

if TYPE_CHECKING:
    from fitwork.llm.section import LLMSection

__all__ = ["LLM_SECTION", "SECTIONS", "Headline", "Tone", "correctness", "cost_per_million",
           "default_labels", "headline", "layout_label", "llm_section", "render_report",
           "run_price"]

SECTIONS = ("headline", "correctness", "setup", "summary", "throughput", "utilization",
            "timeline", "replicas", "devices", "processes", "queues", "cost")

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1180px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ccc; }
h3 { font-size: 14px; margin: 14px 0 4px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
p.basis { color: #555; font-size: 12px; margin: 4px 0 12px; }
p.verdict { font-size: 16px; margin: 8px 0; padding: 8px 12px;
            border-left: 6px solid #9a9a9a; background: #f6f6f6; }
p.verdict.win { border-color: #59a14f; background: #eef6ec; }
p.verdict.lose { border-color: #e15759; background: #fcebeb; }
p.verdict.doubt, p.verdict.mixed { border-color: #edc948; background: #fdf7e3; }
p.verdict strong { font-size: 17px; } span.details { color: #333; }
p.check { font-size: 14px; margin: 4px 0; padding: 6px 12px; border-left: 6px solid #59a14f;
          background: #f6f6f6; }
p.check.warn { border-color: #e15759; background: #fcebeb; }
p.check.unknown { border-color: #edc948; }
p.note { font-size: 13px; margin: 4px 0 8px; }
svg { display: block; margin: 6px 0; }
"""


def _unit_colours(records: Sequence[RunRecord]) -> dict[str, str]:
    names: dict[str, str] = {}
    for record in records:
        for u in record.units:
            names.setdefault(u.name, colour(len(names)))
    return names


def _figures(record: RunRecord, plan: Plan | None, classes: Mapping[str, str] | None,
             known: Catalog) -> RunFigures:
    names = {u.name for u in record.units}
    classes = {unit: name for unit, name in (classes or {}).items() if unit in names}
    try:
        return run_figures(record, plan, classes=classes, known=known)
    except InputError:
        return run_figures(record, plan, flops_per_item={}, classes=classes, known=known)


def render_report(records: list[RunRecord], labels: list[str] | None = None,
                  plan: Plan | None = None, figures: list[RunFigures] | None = None, *,
                  price_per_hour: float | None = None,
                  classes: Mapping[str, str] | None = None, title: str | None = None,
                  known: Catalog | None = None, llm: LLMSection | None = None,
                  verdict: Headline | None = None) -> str:
    """The report of ``records`` (e.g. labels ``["monolithic", "fitted"]``) as one HTML page.

    ``verdict`` replaces the headline worked out from the records, for a caller whose
    verdict rests on more runs than the records shown (the demo's median of N trials), so
    that the page states the same verdict as the caller's other outputs.

    ``figures`` default to `run_figures` of each record with ``plan`` and ``classes`` (unit
    -> device class); the cost uses ``price_per_hour`` when given, else the plan's nodes,
    else the catalog price of the devices each run allocated.  ``llm`` adds the LLM serving
    section after the others; with it, ``records`` may be empty (a page of that section).
    """
    if not records and llm is not None:
        title = title or f"fitwork report: LLM serving, {llm.model} on {llm.trace}"
        return _page(title, [f"<h1>{escape(title)}</h1>", llm_section(llm)])
    if not records:
        raise InputError("a report needs at least one run record (or an LLM section)")
    labels = labels or default_labels(records, plan)
    if len(labels) != len(records):
        raise InputError(f"{len(labels)} labels for {len(records)} run records; give one "
                         "label per record")
    known = known or catalog()
    stray = sorted(set(classes or {}) - {u.name for r in records for u in r.units})
    if stray:
        raise InputError(f"device classes given for units {', '.join(stray)}, which no run "
                         "record has")
    figures = figures or [_figures(r, plan, classes, known) for r in records]
    if len(figures) != len(records):
        raise InputError(f"{len(figures)} sets of figures for {len(records)} run records")
    colours = _unit_colours(records)
    x_max = max(r.wall_s for r in records) or 1.0
    title = title or "fitwork report: " + ", ".join(dict.fromkeys(r.pipeline for r in records))
    body = [
        f"<h1>{escape(title)}</h1>",
        headline_section(records, labels, plan, verdict),
        correctness_section(records, labels),
        setup_section(records, labels),
        summary_section(records, labels),
        throughput_section(records, labels, plan, x_max),
        utilization_section(records, labels, figures, plan, known),
        timeline_section(records, labels, colours, x_max),
        replicas_section(records, labels, colours, x_max),
        devices_section(records, labels, x_max),
        processes_section(records, labels, x_max),
        queues_section(records, labels, colours, x_max),
        cost_section(records, labels, figures, plan, price_per_hour, known),
    ]
    if llm is not None:
        body.append(llm_section(llm))
    return _page(title, body)


def _page(title: str, body: Sequence[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
