"""The demo's results for the terminal: every layout at each latency, the verdicts, the checks."""

from __future__ import annotations

from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text

from fitwork_demo.config import ACCURACY_THRESHOLD
from fitwork_demo.files import diagnosis, verdicts
from fitwork_demo.layouts import IO_CONCURRENCY
from fitwork_demo.run import Contender, DemoResult, Sweep, monolith_replicas
from fitwork_demo.verdict import Verdict

MIB = 2**20


def _mib(value: int | None) -> str:
    return "-" if not value else f"{value / MIB:,.0f} MiB"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _aim(met: bool | None) -> str:
    return "n/a" if met is None else "met" if met else "MISSED"


def _style(met: bool | None) -> str:
    return "green" if met else "red" if met is False else ""


def _marks(sweep: Sweep, contender: Contender) -> str:
    if contender is sweep.best_monolith:
        return " (best monolith)"
    if contender is sweep.best_hand:
        return " (best hand)"
    return ""


def sweep_table(result: DemoResult, sweep: Sweep) -> Table:
    """One row per layout: its rates over its trials, cores busy, memory, prediction."""
    repeats = result.config.repeats
    table = Table(title=f"Store latency {sweep.latency_ms:g} ms: {result.pages} pages per "
                        f"trial, {repeats} trial{'s' if repeats > 1 else ''} per layout, in "
                        "alternating order",
                  title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("layout", "left"), ("config", "left"), ("items/s median", "right"), ("trials", "right"),
        ("whole run", "right"), ("cores busy", "right"), ("others", "right"),
        ("peak RSS", "right"), ("peak PSS", "right"), ("predicted", "right"))
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for c in sweep.contenders:
        trials = " ".join(f"{t.rate:.2f}" + ("*" if t.capped else "") for t in c.trials)
        style = "bold" if c.layout.family in ("fitted", "adapted") or _marks(sweep, c) else None
        table.add_row(c.layout.title + _marks(sweep, c), c.layout.config, _rate(c.rate),
                      trials, _rate(c.items_per_s), f"{c.cores_busy:.2f}",
                      f"{c.others_cores:.2f}", _mib(c.peak_rss), _mib(c.peak_pss),
                      _rate(c.layout.predicted), style=style)
    return table


def verdict(sweep: Sweep) -> list[Text]:
    """The verdicts at one latency (the lines ``summary.json`` and the HTML report give),
    memory against the aim, and the plan against what ran."""
    fitted, mono, hand = sweep.fitted, sweep.best_monolith, sweep.best_hand
    aims = sweep.aims()
    first, *rest = verdicts(sweep)
    lines = [Text(f"{sweep.latency_ms:g} ms: {first.text}", style=_tone(first))]
    lines += [Text(f"  {v.text}", style=_tone(v)) for v in rest]
    if hand is not None and sweep.plan_in_hand_grid is hand:
        lines.append(Text(f"  {hand.layout.title} has the plan's own replicas and batch: "
                          "only noise tells it from fitted (plan only)", style="dim"))
    lines.append(Text(
        f"  best monolith: {mono.layout.config}; peak worker memory, fitted vs best "
        f"monolith: PSS {_mib(fitted.peak_pss)} vs "
        f"{_mib(mono.peak_pss)} (aim no more: {_aim(aims['memory'])}), RSS "
        f"{_mib(fitted.peak_rss)} vs {_mib(mono.peak_rss)} ({_aim(aims['memory_rss'])})",
        style=_style(aims["memory"] and aims["memory_rss"])))
    plan, share = sweep.plan, fitted.realized_share
    base, adapted = sweep.baseline, sweep.adapted
    startup, first = plan.run_overhead()
    pages = max((t.record.items_completed for t in fitted.trials), default=0)
    lines.append(Text(
        f"  plan: {fitted.layout.config}, at {plan.core_ceiling:.0%} of the host's cores; "
        f"predicted {plan.fitted.throughput:.2f} items/s "
        f"fitted, {plan.monolithic.throughput:.2f} monolithic (x{monolith_replicas(plan)}), "
        f"steady; for a run of {pages} pages {fitted.layout.predicted_run or 0:.2f} "
        f"fitted (its replicas building their units {startup:.2f} s, the first page through "
        f"{first:.2f} s); realized (whole run) / predicted for the run (medians): fitted "
        f"{share or 0:.2f}"
        + (f", fitted + adapt {adapted.realized_share or 0:.2f}" if adapted else "")
        + (f", monolith x{monolith_replicas(plan)} {base.realized_share or 0:.2f}"
           if base is not None else "")))
    return lines


def _tone(v: Verdict) -> str:
    if v.aim is not None:
        return _style(v.aim_met)
    return {"win": "green", "loss": "red"}.get(v.outcome, "yellow")


def why(sweep: Sweep) -> list[Text]:
    """What the numbers say about where the fitted side stands (see `diagnosis`)."""
    found = diagnosis(sweep)
    lines = []
    bound = found["host_bound_items_per_s"]
    if bound:
        lines.append(Text(
            f"  the profile measured {found['profile_cpu_s_per_page']:.3f} CPU s per page "
            f"(each unit alone, at the plan's batch sizes), so the host's cores cap any "
            f"layout like it near {bound:.1f} "
            f"items/s; cores busy: best monolith {found['best_monolith_cores_busy']:.2f}, "
            f"fitted {found['fitted_cores_busy']:.2f}, the rest of the host "
            f"{found['others_cores_busy']:.2f} on average; CPU s per page in the runs: best "
            f"monolith {found['best_monolith_cpu_s_per_page']:.3f}, fitted "
            f"{found['fitted_cpu_s_per_page']:.3f}", style="dim"))
    parts = []
    for u in found["units"]:
        planned, measured = u["planned_rate_per_replica"], u["measured_rate_per_replica"]
        if planned and measured and u["unit"] not in ("fetch", "store"):
            parts.append(f"{u['unit']} {planned:.1f} planned vs {measured:.1f} measured")
    refits = found["refits"]
    lines.append(Text(
        "  items/s per busy replica: " + (", ".join(parts) or "-")
        + f"; live re-fits: {len(refits)}"
        + ("" if not refits else " (" + "; ".join(
            f"{r['before']} -> {r['after']}" for r in refits[:3]) + ")"), style="dim"))
    return lines


def notes(result: DemoResult) -> Group:
    """How the figures were made, the checks, the files."""
    lines = [
        Text("items/s: pages over the time from the first page a worker started to the last "
             "page out (the processes' startup left out), median of the trials (* a trial "
             f"capped at {result.config.cap_s:g} s); whole run: the run record's pages over "
             "wall seconds; others: cores the rest of the host used meanwhile; memory: peak "
             "summed RSS and PSS of the run's worker processes. fetch and store keep "
             f"{IO_CONCURRENCY} requests in flight per replica.", style="dim"),
        Text(f"host: {result.host_cores:g} cores, models on "
             + (f"{result.gpu_class} (CUDAExecutionProvider)" if result.gpu_class else
                "CPU cores, one onnxruntime thread per process")
             + f"; load average {result.load_average[0]:.2f} at the start, "
               f"{result.load_average[1]:.2f} at the end (other work on the host moves "
               "every figure)", style="dim"),
        Text(f"FLOPs per page: detect {result.flops.detect or 0:.3g}, recognise "
             f"{result.flops.recognise or 0:.3g}; {result.flops_note}", style="dim"),
    ]
    same = "yes" if result.same_text else f"NO ({len(result.mismatched)} pages differ)"
    lines.append(Text(f"same text in every trial on every page: {same}; lines exact required: "
                      f"{ACCURACY_THRESHOLD:.0%}"))
    for failure in result.failures:
        lines.append(Text(f"check failed: {failure}", style="red"))
    if result.files:
        lines.append(Text(f"wrote {len(result.trials)} run records, plans, profiles, "
                          f"reports, texts.jsonl and summary.json to {result.config.out}"))
    lines.append(Text(f"demo took {result.wall_s:,.1f} s", style="dim"))
    return Group(*lines)


def render(result: DemoResult) -> Group:
    """Each latency's table and verdict, then the notes."""
    parts: list[Table | Text | Group] = []
    for sweep in result.sweeps:
        parts.append(sweep_table(result, sweep))
        parts.extend(verdict(sweep))
        parts.extend(why(sweep))
        parts.append(Text(""))
    parts.append(notes(result))
    return Group(*parts)
