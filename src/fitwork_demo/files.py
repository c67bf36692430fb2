"""What the demo writes: every trial's record, each latency's plan, profile and report, the
texts and ``summary.json`` (the figures as plain JSON values, which the bench reads too)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Literal

from fitwork import Headline, Plan, RunFigures, run_figures
from fitwork_demo.config import ACCURACY_THRESHOLD, AIM_HAND, AIM_MONOLITH, PRECISION
from fitwork_demo.gpu import mean_busy
from fitwork_demo.layouts import MONOLITHIC, THREADED, flops_per_item
from fitwork_demo.run import Contender, DemoResult, Sweep, monolith_replicas, plan_config
from fitwork_demo.verdict import Verdict


def _figures(result: DemoResult, sweep: Sweep, contender: Contender) -> RunFigures:
    pipeline = contender.layout.pipeline
    record = contender.median_trial.record
    names = {u.name for u in record.units}
    classes = ({name: result.gpu_class for name in names
                if name in ("detect", "recognise", MONOLITHIC, THREADED, "monolithic")}
               if result.gpu_class else None)
    per_item = {k: v for k, v in flops_per_item(pipeline, result.flops).items() if k in names}
    if "monolithic" in names and result.flops.page:
        per_item["monolithic"] = result.flops.page
    return run_figures(record, sweep.plan, flops_per_item=per_item, classes=classes,
                       precision=PRECISION)


def diagnosis(sweep: Sweep) -> dict[str, Any]:
    """What the fitted side's run says against its plan: rates per unit, CPU per page."""
    fitted = sweep.fitted
    record = fitted.median_trial.record
    planned = {g.unit: g.rate for g in sweep.plan.placement().groups if g.rate}
    batch = {g.unit: g.batch_size for g in sweep.plan.placement().groups}
    units = []
    for u in record.units:
        per_replica = u.items_in / u.busy_s if u.busy_s > 0 else None
        units.append({"unit": u.name, "replicas": u.replicas, "batch_size": batch.get(u.name),
                      "planned_rate_per_replica": planned.get(u.name),
                      "measured_rate_per_replica": per_replica,
                      "busy_fraction": u.busy_fraction,
                      "cpu_s_per_item": u.cpu_s / u.items_in if u.items_in else None})
    ceiling = sweep.profile_cpu_per_page
    return {
        "profile_cpu_s_per_page": ceiling,
        "host_bound_items_per_s": (max(n.cores for n in sweep.plan.fleet.node_types) / ceiling
                                   if ceiling > 0 else None),
        "fitted_cpu_s_per_page": fitted.cpu_per_page,
        "best_monolith_cpu_s_per_page": sweep.best_monolith.cpu_per_page,
        "fitted_cores_busy": fitted.cores_busy,
        "best_monolith_cores_busy": sweep.best_monolith.cores_busy,
        "others_cores_busy": statistics.fmean(c.others_cores for c in sweep.contenders),
        "core_ceiling": sweep.plan.core_ceiling,
        "units": units,
        "refits": [r.model_dump() for c in (fitted, sweep.adapted) if c is not None
                   for t in c.trials for r in t.record.refits],
    }


def _contender(c: Contender) -> dict[str, Any]:
    return {
        "key": c.layout.key, "family": c.layout.family, "title": c.layout.title,
        "config": c.layout.config, "processes": c.layout.processes, "note": c.layout.note,
        "rate_items_per_s": c.rate,
        "trials_rate_items_per_s": list(c.rates),
        "adapt": c.layout.adapt,
        "whole_run_items_per_s": c.items_per_s,
        "trials_whole_run_items_per_s": [t.items_per_s for t in c.trials],
        "pages_per_trial": [t.record.items_completed for t in c.trials],
        "capped": [t.capped for t in c.trials],
        "predicted_items_per_s": c.layout.predicted,
        "predicted_run_items_per_s": c.layout.predicted_run, "realized_share": c.realized_share,
        "peak_rss": c.peak_rss, "peak_pss": c.peak_pss, "cores_busy": c.cores_busy,
        "others_cores_busy": c.others_cores,
        "driver_cores_busy": statistics.fmean(t.driver_cores for t in c.trials)
        if c.trials else None,
        "cpu_s_per_page": c.cpu_per_page,
        "latency_p50_s": statistics.fmean(
            t.record.latency_p50_s or 0.0 for t in c.trials) if c.trials else None,
        "refits": sum(len(t.record.refits) for t in c.trials),
        "gpu_mean_busy": mean_busy([s for t in c.trials for s in t.record.device_samples]),
    }


def _brief(c: Contender | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"key": c.layout.key, "title": c.layout.title, "config": c.layout.config,
            "rate_items_per_s": c.rate, "whole_run_items_per_s": c.items_per_s,
            "peak_rss": c.peak_rss, "peak_pss": c.peak_pss}


def _plan_figures(plan: Plan, pages: int) -> dict[str, Any]:
    """One latency's plan: its layout and what it predicts."""
    return {"fused": plan.fused, "config": plan_config(plan),
            "predicted_fitted_items_per_s": plan.fitted.throughput,
            "predicted_monolithic_items_per_s": plan.monolithic.throughput,
            "predicted_fitted_run_items_per_s": plan.run_rate(pages),
            "run_overhead_s": dict(zip(("startup", "first_item"),
                                       plan.run_overhead(), strict=True)),
            "monolithic_replicas": monolith_replicas(plan),
            "core_ceiling": plan.core_ceiling,
            "groups": [g.to_json() for g in plan.placement().groups]}


def _latency(sweep: Sweep, pages: int) -> dict[str, Any]:
    """One latency's figures: its plan, every contender, the best of each kind, verdicts."""
    return {
        "latency_ms": sweep.latency_ms,
        "plan": _plan_figures(sweep.plan, pages),
        "contenders": [_contender(c) for c in sweep.contenders],
        "best_monolith": _brief(sweep.best_monolith),
        "best_hand": _brief(sweep.best_hand),
        "plan_in_hand_grid": (sweep.plan_in_hand_grid.layout.key
                              if sweep.plan_in_hand_grid else None),
        "fitted": _brief(sweep.fitted),
        "adapted": _brief(sweep.adapted),
        "verdict": sweep.verdict.to_json(),
        "adapted_verdict": (sweep.adapted_verdict.to_json()
                            if sweep.adapted_verdict else None),
        "hand_verdict": sweep.hand_verdict.to_json() if sweep.hand_verdict else None,
        "fitted_over_best_monolith": sweep.over_monolith,
        "fitted_over_best_hand": sweep.over_hand,
        "fitted_memory_over_best_monolith": sweep.memory_ratio,
        "fitted_rss_over_best_monolith": sweep.rss_ratio,
        "fitted_realized_over_predicted": sweep.fitted.realized_share,
        "adapted_realized_over_predicted": (sweep.adapted.realized_share
                                            if sweep.adapted else None),
        "baseline_monolith_realized_over_predicted": (
            sweep.baseline.realized_share if sweep.baseline else None),
        "aims_met": sweep.aims(),
        "diagnosis": diagnosis(sweep),
    }


def summary(result: DemoResult) -> dict[str, Any]:
    """The figures as plain JSON values (``summary.json``; the bench reads them)."""
    latencies = [_latency(sweep, result.pages) for sweep in result.sweeps]
    return {
        "pages_per_trial": result.pages, "latencies_ms": list(result.config.latencies_ms),
        "repeats": result.config.repeats, "seed": result.config.seed,
        "host_cores": result.host_cores, "gpu_class": result.gpu_class,
        "load_average": list(result.load_average),
        "flops_per_page": {"detect": result.flops.detect, "recognise": result.flops.recognise},
        "flops_note": result.flops_note,
        "rate": "rate_items_per_s: the median over trials of pages over the time from the "
                "first moment a worker started on a page to the last page out (the "
                "processes' startup left out; layouts are ranked by it and every verdict "
                "states it); whole_run_items_per_s: the median of the run records' "
                "throughput, pages over wall seconds",
        "statistic": "median of N trials, with the slowest and fastest trial as its range; "
                     "a comparison whose ranges overlap is a win or loss only where the "
                     "alternating rounds' paired ratios differ (t-test, p < 0.05), else "
                     "'too noisy to call'",
        "memory": "peak over the run of the summed RSS (psutil) and PSS (smaps_rollup) of "
                  "the run's worker processes (RunResult.worker_pids), sampled every 0.2 s",
        "aims": {"fitted_over_best_monolith": AIM_MONOLITH, "fitted_over_best_hand": AIM_HAND,
                 "fitted_memory_over_best_monolith": 1.0},
        "accuracy_threshold": ACCURACY_THRESHOLD, "same_text": result.same_text,
        "failures": result.failures, "wall_s": result.wall_s,
        "trials": len(result.trials),
        "latencies": latencies,
    }


def verdicts(sweep: Sweep) -> list[Verdict]:
    """Every comparison at one latency, the fitted plan against the best monolith first."""
    return [v for v in (sweep.verdict, sweep.adapted_verdict, sweep.hand_verdict) if v]


def headline(sweep: Sweep) -> Headline:
    """The HTML report's verdict: the same lines the console and ``summary.json`` give."""
    first, *rest = verdicts(sweep)
    tones: dict[str, Literal["win", "lose", "doubt"]] = {
        "win": "win", "loss": "lose", "too noisy to call": "doubt"}
    tone = tones[first.outcome]
    return Headline(f"{sweep.latency_ms:g} ms: {first.text}",
                    [v.text for v in rest] + [
                        "the runs below are each layout's median trial (its record: "
                        "whole-run items/s, startup included)"], tone)


def write_texts(result: DemoResult, texts: Path) -> Path:
    """Write ``texts`` (JSON Lines): per page, the known lines and the lines read, agreed by
    every trial, else each trial's (``by_trial``)."""
    trials = result.trials
    with texts.open("w", encoding="utf-8") as handle:
        for document in result.documents:
            read = {f"{t.layout}@{t.latency_ms:g}ms#{t.repeat + 1}": t.outputs[document.id]
                    for t in trials if document.id in t.outputs}
            agreed = (next(iter(read.values()))
                      if read and document.id not in result.mismatched else None)
            handle.write(json.dumps({"id": document.id, "known": list(document.lines),
                                     "read": agreed,
                                     "by_trial": None if agreed is not None else read}) + "\n")
    return texts


def index_page(result: DemoResult) -> str:
    """One page over every latency: each one's verdict lines (the same text the console and
    ``summary.json`` give) and a link to its full report."""
    from html import escape

    parts = [f"<h1>fitwork demo: OCR of {result.pages} pages at "
             f"{len(result.sweeps)} store latencies</h1>"]
    for sweep in result.sweeps:
        tag = f"{sweep.latency_ms:g}ms"
        lines = "".join(f"<li>{escape(v.text)}</li>" for v in verdicts(sweep))
        parts.append(f'<h2>store latency {sweep.latency_ms:g} ms</h2><ul>{lines}</ul>'
                     f'<p><a href="report-{tag}.html">the full report at {tag}</a> (each '
                     "layout's median trial: utilization, memory, cost)</p>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>fitwork demo</title>"
            f"</head><body>{''.join(parts)}</body></html>")


def write_files(result: DemoResult) -> dict[str, Path]:
    """Write every trial's run record, each latency's plan, profile and HTML report, the
    texts and the summary; their paths by name.

    ``records/LATENCYms/LAYOUT.N.record.json`` for trial N of each layout;
    ``plan-LATENCYms.json``, ``profile-LATENCYms.json``; ``report-LATENCYms.html`` (best
    monolith, fitted, fitted + adapt, best hand: each one's median trial, under the demo's
    verdict) and ``report.html``, every latency's verdicts on one page with a link to its
    report (`index_page`);
    ``texts.jsonl`` (known and recognised lines per page); ``summary.json``.
    """
    from fitwork import render_report

    out = result.config.out
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for sweep in result.sweeps:
        tag = f"{sweep.latency_ms:g}ms"
        folder = out / "records" / tag
        folder.mkdir(parents=True, exist_ok=True)
        for contender in sweep.contenders:
            for trial in contender.trials:
                path = folder / f"{contender.layout.key}.{trial.repeat + 1}.record.json"
                trial.record.save(path)
        files[f"records/{tag}"] = folder
        for name, document in (("plan", sweep.plan), ("profile", sweep.profile)):
            path = out / f"{name}-{tag}.json"
            document.save(path)
            files[path.name] = path
        shown = [c for c in (sweep.best_monolith, sweep.fitted, sweep.adapted,
                             sweep.best_hand) if c]
        labels = [f"best monolith ({c.layout.title})" if c.layout.family == "monolith" else
                  f"best hand ({c.layout.title})" if c.layout.family == "hand" else
                  c.layout.title for c in shown]
        page = render_report(
            [c.median_trial.record for c in shown], labels, sweep.plan,
            [_figures(result, sweep, c) for c in shown], verdict=headline(sweep),
            title=f"fitwork demo: OCR of {result.pages} pages, store latency "
                  f"{sweep.latency_ms:g} ms: best monolith vs fitted (plan only) vs fitted + "
                  "adapt vs best hand layout (each one's median trial below; the verdict is "
                  f"the median of {result.config.repeats} trials)")
        path = out / f"report-{tag}.html"
        path.write_text(page, encoding="utf-8")
        files[path.name] = path
    files["report.html"] = out / "report.html"
    files["report.html"].write_text(index_page(result), encoding="utf-8")
    texts = write_texts(result, out / "texts.jsonl")
    files[texts.name] = texts
    path = out / "summary.json"
    path.write_text(json.dumps(summary(result), indent=1))
    files[path.name] = path
    return files


__all__ = ["diagnosis", "headline", "summary", "verdicts", "write_files", "write_texts"]
