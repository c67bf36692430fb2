"""The report's verdict: each run's label, the headline comparing the runs, and whether
they did the same work (the ``headline`` and ``correctness`` sections)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Literal

from fitwork.fit.monolithic import FUSED
from fitwork.fit.plan import Plan
from fitwork.report.figures import (
    baseline_index,
    comparable,
    compared,
    comparison_basis,
    outputs_match,
    speedup,
)
from fitwork.report.parts import ms_text, rate_text, times_text
from fitwork.telemetry.record import RunRecord

Tone = Literal["win", "lose", "mixed", "even", "doubt"]
ORDER: tuple[Tone, ...] = ("lose", "doubt", "mixed", "win")  # the tone of several comparisons


def _fused(record: RunRecord) -> bool:
    """Whether the run ran its stages fused into one unit (a plan's fusion, or the
    monolithic baseline `Pipeline.fused` makes)."""
    if (record.placement or {}).get("fusion"):
        return True
    return len(record.units) == 1 and (FUSED in (record.pipeline, record.units[0].name)
                                       or record.units[0].name.endswith("_fused"))


def _side_of(record: RunRecord, plan: Plan) -> str | None:
    """The plan side a record ran (``fitted``, ``monolithic``), where its replicas tell."""
    if not _fused(record):
        names = {u.name for u in record.units}
        return "fitted" if names and names <= set(plan.units) else None
    replicas = record.units[0].replicas if record.units else 0
    fitted = sum(p.replicas for p in plan.fitted.result.replicas) if plan.fused else None
    mono = sum(p.replicas for p in plan.monolithic.result.replicas)
    if replicas == fitted and replicas != mono:
        return "fitted"
    if replicas == mono and replicas != fitted:
        return "monolithic"
    return None


def layout_label(record: RunRecord, plan: Plan | None = None) -> str:
    """The layout a run ran, in words: ``fitted`` or ``monolithic`` (a plan's side, where
    ``plan`` and the replicas tell), ``planned``, ``monolithic`` (fused, not planned) or
    ``split``; then what ran: the fused unit's replicas, or each unit's."""
    planned = (record.placement or {}).get("source") == "plan"
    fused = _fused(record)
    side = _side_of(record, plan) if plan is not None and planned else None
    if side is not None:
        kind = f"{side} (plan{', fused' if fused else ''})"
    elif planned:
        kind = "planned, fused" if fused else "planned"
    else:
        kind = "monolithic" if fused else "split"
    if fused:
        count = record.units[0].replicas if record.units else 0
        what = f"{count} replica{'s' if count != 1 else ''}"
    else:
        what = ", ".join(f"{u.name} x{u.replicas}" for u in record.units)
        what = f"{record.pipeline}: {what}" if what else record.pipeline
    return f"{kind} [{what}]"


def default_labels(records: Sequence[RunRecord], plan: Plan | None = None) -> list[str]:
    """Each record's layout (`layout_label`), with its engine where the runs' engines
    differ and its run id where two labels would be the same."""
    labels = [layout_label(r, plan) for r in records]
    if len({r.engine for r in records}) > 1:
        labels = [f"{label} on {r.engine}" for label, r in zip(labels, records, strict=True)]
    return [f"{label} ({r.run_id})" if labels.count(label) > 1 else label
            for label, r in zip(labels, records, strict=True)]


def _prediction(plan: Plan) -> str:
    predicted = speedup(plan.fitted.throughput, plan.monolithic.throughput)
    low, high = plan.fitted.throughput_range
    spread = f" (range {low:,.1f}-{high:,.1f})" if (low, high) != (
        plan.fitted.throughput, plan.fitted.throughput) else ""
    return (f"plan predicted {times_text(predicted)}: fitted {rate_text(plan.fitted.throughput)}"
            f"{spread} vs monolithic {rate_text(plan.monolithic.throughput)}")


@dataclass(frozen=True)
class Headline:
    """The report's verdict: the comparison itself, the clauses that qualify it, its tone."""

    lead: str
    details: list[str]
    tone: Tone

    @property
    def text(self) -> str:
        """The verdict as one line."""
        return "; ".join([self.lead, *self.details])


def headline(records: Sequence[RunRecord], labels: Sequence[str],
             plan: Plan | None = None) -> Headline:
    """The report's verdict in one line, and its tone: ``win``, ``lose``, ``even``,
    ``mixed`` (more items/s but worse p95 latency), or ``doubt`` when the runs are not
    comparable at face value (see `comparable`).

    Each compared run against the baseline: items/s both, the ratio, and what it rests on;
    the compared run's p95 latency when it is worse; the plan's predicted ratio when given.
    """
    base = baseline_index(labels)
    b, b_label = records[base], labels[base]
    prediction = [_prediction(plan)] if plan is not None else []
    if len(records) == 1:
        if _empty(b):
            return Headline(f"{b_label}: {_empty_text(b)}; nothing measured to compare",
                            prediction, "doubt")
        return Headline(f"{b_label}: {rate_text(b.throughput)} ({b.items_completed:,} items in "
                        f"{b.wall_s:.2f} s; measured, one run, nothing to compare with)",
                        prediction, "even")
    leads: list[str] = []
    details: list[str] = []
    tones: list[Tone] = []
    for index in compared(labels):
        c, c_label = records[index], labels[index]
        if _empty(b) or _empty(c):
            empty = [f"{label}: {_empty_text(r)}" for label, r in ((c_label, c), (b_label, b))
                     if _empty(r)]
            leads.append("NO COMPARISON: " + "; ".join(empty))
            tones.append("doubt")
            continue
        times = speedup(c.throughput, b.throughput)
        basis = ", ".join(comparison_basis(b, c))
        lead = (f"{c_label} {rate_text(c.throughput)} vs {b_label} {rate_text(b.throughput)}: "
                f"{times_text(times)} ({basis})")
        if times is not None and 0 < times < 1:
            lead = f"{c_label} LOSES to {b_label}, {1 / times:.2f}\u00d7 slower: " + lead
            tones.append("lose")
        elif not comparable(b, c):
            lead = f"NOT LIKE FOR LIKE: {lead}"
            tones.append("doubt")
        else:
            tones.append("win" if times is not None and times > 1 else "even")
        leads.append(lead)
        worse = speedup(c.latency_p95_s, b.latency_p95_s)
        if worse is not None and worse > 1:
            if tones[-1] == "win":
                tones[-1] = "mixed"
            details.append(f"{c_label}'s p95 latency is {worse:.2f}\u00d7 worse "
                           f"({ms_text(c.latency_p95_s)} vs {ms_text(b.latency_p95_s)})")
    tone: Tone = next((t for t in ORDER if t in tones), "even")
    return Headline("; ".join(leads), details + prediction, tone)


def _empty(record: RunRecord) -> bool:
    """A run that settled no item or measured no time: nothing to take a rate from."""
    return record.items_completed <= 0 or record.wall_s <= 0 or record.throughput <= 0


def _empty_text(record: RunRecord) -> str:
    """What an empty or stopped run did, in words."""
    status = "run " + record.status.upper() if record.status != "completed" else "run ended"
    why = f" ({record.error})" if record.error else ""
    return (f"{status}{why} with {record.items_completed:,} of {record.items_in:,} items "
            f"completed in {record.wall_s:.2f} s, so no rate to compare")


def headline_section(records: Sequence[RunRecord], labels: Sequence[str], plan: Plan | None,
                     given: Headline | None = None) -> str:
    verdict = given or headline(records, labels, plan)
    details = "".join(f"; {escape(d)}" for d in verdict.details)
    return (f'<section id="headline"><p class="verdict {verdict.tone}">'
            f"<strong>{escape(verdict.lead)}</strong>"
            f'<span class="details">{details}</span></p></section>')


def correctness(records: Sequence[RunRecord], labels: Sequence[str]) -> tuple[str, str]:
    """What each run did with its items and whether the outputs match, in one line; and
    its tone: ``ok``, ``warn`` (a run failed items, stopped early or outputs differ) or
    ``unknown`` (outputs not checked)."""
    runs, trouble = [], False
    for label, r in zip(labels, records, strict=True):
        text = (f"{label} {r.items_in:,} in, {r.items_completed:,} completed, {r.outputs:,} "
                f"outputs, {r.failures:,} failures")
        if r.status != "completed":
            text += f" (run {r.status.upper()}" + (f": {r.error}" if r.error else "") + ")"
        trouble |= r.status != "completed" or r.failures > 0 or r.items_completed < r.items_in
        runs.append(text)
    check = outputs_match([r.output_digest for r in records])
    if check == "same":
        digest = records[0].output_digest or ""
        outputs = f"same outputs (digest {digest[:12]}{'...' if len(digest) > 12 else ''})"
    elif check == "different":
        outputs = "DIFFERENT OUTPUTS: " + ", ".join(
            f"{label} {(r.output_digest or 'none')[:12]}" for label, r in
            zip(labels, records, strict=True))
        trouble = True
    else:
        missing = [label for label, r in zip(labels, records, strict=True)
                   if not r.output_digest]
        outputs = ("outputs not checked (" + ("one run" if len(records) < 2 else
                   "no output digest recorded for " + ", ".join(missing)) + ")")
    tone = "warn" if trouble else "ok" if check == "same" else "unknown"
    return "Correctness: " + "; ".join(runs) + "; " + outputs, tone


def correctness_section(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    text, tone = correctness(records, labels)
    mark = "\u26a0 " if tone == "warn" else ""
    return (f'<section id="correctness"><p class="check {tone}">{escape(mark + text)}</p>'
            "</section>")
