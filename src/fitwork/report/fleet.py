"""One HTML page of a fleet run (`fitwork report --fleet`): many pipelines side by side.

``render_fleet_report`` returns a self-contained page (inline CSS and SVG, no scripts, nothing
fetched) of a `FleetRecord`, with sections carrying stable ids::

    headline   one line: each pipeline's realized share of the cores used against its
               planned share in the main epoch (`fleet_figures.main_epoch`), a miss said so
    pipelines  per pipeline: team, status, exit code, runtime, CPU-s, planned vs realized
               share, its own run record (linked)
    shares     cores each pipeline used over time (solid) and the plan gave it (dashed), the
               re-fit decisions marked, numbered and with their reasons; per-epoch shares
    decisions  every re-fit: when, why, cores and predicted items/s per running pipeline
    utilization  per epoch: cores allocated / owned, busy / owned realized vs predicted and
               busy / allocated; never shown over 100% (a figure above is said as a finding)
    cost       cost per team from the plan's prices, beside the CPU seconds each team used
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from fitwork.jobs.record import FleetRecord
from fitwork.report.fleet_figures import (
    TOLERANCE,
    main_epoch,
    run_seconds,
    share_checks,
)
from fitwork.report.fleet_sections import (
    cost_section,
    decisions_section,
    shares_section,
    span,
    utilization_section,
)
from fitwork.report.html import _page
from fitwork.report.parts import basis_note, html_section, html_table, pct
from fitwork.report.verdict import Headline, Tone, headline_section

__all__ = ["FLEET_SECTIONS", "fleet_headline", "render_fleet_report", "write_fleet_report"]

FLEET_SECTIONS = ("headline", "pipelines", "shares", "decisions", "utilization", "cost")
SHORT_S = 3.0  # a main epoch shorter than this gives noisy shares, and the verdict says so


def fleet_headline(record: FleetRecord) -> Headline:
    """The page's verdict: each pipeline's share in the main epoch against the plan's, a
    miss (outside ±10%) said as a MISS; failed and rejected pipelines named after it."""
    troubles = [f"{o.name} {o.status.upper()}"
                + (f" (exit {o.exit_code})" if o.exit_code not in (None, 0) else "")
                + (f" ({o.reason})" if o.status == "rejected" and o.reason else "")
                for o in record.jobs if o.status != "succeeded"]
    epoch = main_epoch(record)
    if epoch is None:
        why = ("the run was not planned" if not record.planned
               else "no stretch between decisions had two samples and a plan")
        return Headline(f"NO SHARES TO CHECK: {why}, so no pipeline's realized share can be "
                        "set against a planned one", troubles, "doubt")
    order = {o.name: i for i, o in enumerate(record.jobs)}
    checks = sorted(share_checks(epoch), key=lambda c: order.get(c.name, len(order)))
    parts = [f"{c.name} {c.realized:.0%} vs {c.planned:.0%} planned ({c.ratio:.2f}\u00d7"
             + ("" if c.on_plan else f", MISSED: {100 * abs(c.realized - c.planned):.0f} points "
                f"{'over' if c.realized > c.planned else 'under'}") + ")" for c in checks]
    missed = [c.name for c in checks if not c.on_plan]
    basis = (f"shares of the cores the fleet used, {span(epoch)} with {len(epoch.running)} "
             f"running")
    if missed:
        lead = (f"SHARE MISSED for {', '.join(missed)} (outside \u00b1{TOLERANCE:.0%} of "
                f"planned): ")
        tone: Tone = "lose"
    else:
        lead = f"Every pipeline within \u00b1{TOLERANCE:.0%} of its planned share: "
        tone = "win"
    details = [*troubles]
    if epoch.end_s - epoch.start_s < SHORT_S:
        details.append(f"a short stretch ({epoch.end_s - epoch.start_s:.1f} s): the shares "
                       "rest on few samples")
        tone = "doubt" if tone == "win" else tone
    if troubles and tone == "win":
        tone = "mixed"
    return Headline(lead + "; ".join(parts) + f" ({basis})", details, tone)


def _href(path: str, base: Path | None) -> str:
    """A link to a run record, relative to the page's folder where both are known."""
    target = Path(path)
    if base is not None and target.is_absolute():
        return Path(os.path.relpath(target, base.resolve())).as_posix()
    return target.as_posix()


def pipelines_section(record: FleetRecord, base: Path | None) -> str:
    """One row per pipeline, then links to each pipeline's own run record."""
    epoch = main_epoch(record)
    checks = {c.name: c for c in share_checks(epoch)} if epoch is not None else {}
    rows = []
    for o in record.jobs:
        check = checks.get(o.name)
        runtime = (f"{o.ended_s - o.started_s:.1f}" if o.started_s is not None
                   and o.ended_s is not None else "-")
        rows.append([o.name, o.team, o.status, "-" if o.exit_code is None else str(o.exit_code),
                     runtime, f"{o.cpu_s:,.1f}", pct(check.planned if check else None),
                     pct(check.realized if check else None),
                     "-" if check is None else f"{check.ratio:.2f}\u00d7"
                     + ("" if check.on_plan else " MISSED"),
                     Path(o.record).name if o.record else "-", o.reason or ""])
    links = [f'<a href="{escape(_href(o.record, base))}">{escape(o.name)}</a>'
             + ("" if Path(o.record).exists() else " (not found here)")
             for o in record.jobs if o.record]
    parts = [html_table(["pipeline", "team", "status", "exit code", "runtime s", "CPU s",
                         "planned share", "realized share", "realized / planned",
                         "own run record", "why"], rows, left=(0, 1, 2, 9, 10))]
    if links:
        parts.append(f'<p class="note">Each pipeline\'s own run record (open with '
                     f'<code>fitwork report RECORD</code>): {", ".join(links)}</p>')
    parts.append(basis_note(
        "Shares are of the cores the running pipelines used together in the main epoch"
        + (f" ({span(epoch)})" if epoch is not None else "")
        + f"; a realized share within \u00b1{TOLERANCE:.0%} of the planned one (relative) "
        "is on plan. CPU s: each pipeline's processes, as the coordinator read them."))
    return html_section("pipelines", "Pipelines", *parts)


def render_fleet_report(record: FleetRecord, *, base: Path | None = None,
                        title: str | None = None) -> str:
    """The page of ``record``; links to each pipeline's run record are relative to
    ``base`` (the folder the page is written to) when given."""
    names = [o.name for o in record.jobs]
    title = title or (f"fitwork fleet report: {len(names)} pipelines on {record.host_cores} "
                      f"cores ({', '.join(names)})")
    x_max = run_seconds(record) or 1.0
    body = [f"<h1>{escape(title)}</h1>",
            headline_section([], [], None, fleet_headline(record)),
            pipelines_section(record, base),
            shares_section(record, x_max),
            decisions_section(record),
            utilization_section(record),
            cost_section(record)]
    return _page(title, body)



def write_fleet_report(fleet_path: Path, output_path: Path) -> tuple[Headline, int]:
    """Render the fleet record at ``fleet_path`` to ``output_path``: its verdict and the
    number of pipelines on the page (`fitwork report --fleet`)."""
    record = FleetRecord.load(fleet_path)
    page = render_fleet_report(record, base=output_path.parent)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    output_path.write_text(page, encoding="utf-8")
    return fleet_headline(record), len(record.jobs)
