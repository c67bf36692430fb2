"""The report's sections over time: ``throughput`` (and latency), ``timeline``,
``replicas``, ``devices``, ``processes`` and ``queues``."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from fitwork.fit.plan import Plan
from fitwork.report.figures import (
    Refit,
    baseline_index,
    compared,
    completion_rates,
    device_figures,
    device_key,
    refits,
    replica_steps,
    speedup,
)
from fitwork.report.parts import (
    CHART_WIDTH,
    GIB,
    MIB,
    basis_note,
    html_section,
    html_table,
    ms_text,
    pct,
    predicted_sides,
    rate_text,
    side_colour,
    times_text,
)
from fitwork.report.svg import (
    BarSeries,
    GanttRow,
    LineSeries,
    Marker,
    bar_chart,
    colour,
    gantt,
    legend_height,
    line_chart,
)
from fitwork.telemetry.figures import merge_intervals, share
from fitwork.telemetry.record import DeviceSample, RunRecord

THROUGHPUT_BUCKETS = 30
OFF_SCALE = 3.0  # a prediction above this many times the highest measured rate is not drawn


def throughput_section(records: Sequence[RunRecord], labels: Sequence[str], plan: Plan | None,
                       x_max: float) -> str:
    width = x_max / THROUGHPUT_BUCKETS
    series, notes = [], []
    for i, (label, record) in enumerate(zip(labels, records, strict=True)):
        done = record.completions
        if not done.times_s:
            notes.append(f"{label}: the record has no measured completions, so no curve.")
            continue
        points = [p for start, end, rate in completion_rates(done.times_s, done.completed,
                                                              width, record.wall_s)
                  for p in ((start, rate), (end, rate))]
        series.append(LineSeries(f"{label} ({record.throughput:,.1f} items/s overall)",
                                 points, colour(i)))
    peak = max([0.0] + [y for s in series for _, y in s.points])
    off_scale = []
    for side, grey in predicted_sides(plan):
        if peak and side.throughput > OFF_SCALE * peak:
            off_scale.append(f"{side.label} {rate_text(side.throughput)}")
            continue
        series.append(LineSeries(f"predicted: plan {side.label} ({side.throughput:,.1f})",
                                 [(0.0, side.throughput), (x_max, side.throughput)],
                                 side_colour(side, labels, grey), dashed=True))
    chart = line_chart(series, x_max, width=CHART_WIDTH,
                       height=260 + legend_height([s.name for s in series], CHART_WIDTH),
                       label="Throughput over time (measured completions)",
                       x_caption="seconds from the start", y_caption="source items/s")
    parts = [chart, basis_note(
        f"Source items settled per second in {width:.3g} s buckets, counted from each run's "
        "measured completions (the moments its feed frames settled).")]
    if off_scale:
        notes.append(f"The plan predicts {' and '.join(off_scale)}: more than {OFF_SCALE:g}"
                     f"\u00d7 the highest measured rate ({peak:,.1f} items/s), so the "
                     "prediction is left off this chart rather than flatten the measured "
                     "curves.")
    parts += [f'<p class="note">{escape(note)}</p>' for note in notes]
    latency = [BarSeries(label, {name: value * 1000 for name, value in
                                 (("p50", r.latency_p50_s), ("p95", r.latency_p95_s))
                                 if value is not None}, colour(i))
               for i, (label, r) in enumerate(zip(labels, records, strict=True))]
    latency = [s for s in latency if s.values]
    if latency:
        parts.append(bar_chart(["p50", "p95"], latency, width=CHART_WIDTH, percent=False,
                               unit=" ms", label="Item latency per run",
                               caption="milliseconds from an item's feed to its settling"))
        parts.append(f'<p class="note">{escape(_latency_line(records, labels))}</p>')
    else:
        parts.append(basis_note("No latency figures in these records."))
    return html_section("throughput", "Throughput and latency", *parts)


def _latency_line(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    base = baseline_index(labels)
    b, b_label = records[base], labels[base]
    lines = []
    for index in compared(labels):
        c = records[index]
        times = speedup(c.latency_p95_s, b.latency_p95_s)
        if times is None:
            continue
        verdict = (f"{times:.2f}\u00d7 WORSE" if times > 1 else
                   f"{1 / times:.2f}\u00d7 better" if 0 < times < 1 else "the same")
        lines.append(f"p95 latency: {labels[index]} {ms_text(c.latency_p95_s)} vs {b_label} "
                     f"{ms_text(b.latency_p95_s)}, {verdict} for {labels[index]} (p50 ratio "
                     f"{times_text(speedup(c.latency_p50_s, b.latency_p50_s))})")
    return "; ".join(lines) or "One run: no latency ratio."


def replicas_section(records: Sequence[RunRecord], labels: Sequence[str], colours: dict[str, str],
                     x_max: float) -> str:
    parts, table = [], []
    for label, record in zip(labels, records, strict=True):
        found = refits(record)
        series = [LineSeries(unit, replica_steps(record.replicas.times_s, counts,
                                                 record.wall_s),
                             colours.get(unit, "#777777"), step=True, nudge=2.5 * i)
                  for i, (unit, counts) in enumerate(
                      (u, c) for u, c in record.replicas.counts.items() if c)]
        if not series:
            parts.append(basis_note(f"{label}: no replica series in the record."))
            continue
        markers = [Marker(f.t_s, f"re-fit {n}", _refit_text(f))
                   for n, f in enumerate(found, start=1)]
        peak = max(y for s in series for _, y in s.points)
        parts.append(line_chart(series, x_max, width=CHART_WIDTH,
                                height=184 + legend_height([s.name for s in series],
                                                           CHART_WIDTH),
                                label=f"{label}: live replicas per unit"
                                + (f", {len(found)} re-fits" if found else ""),
                                x_caption="seconds from the start", y_caption="replicas",
                                y_max=peak + 1, markers=markers))
        table += [[label, f"{n}", f"{f.t_s:.2f}", f.reason,
                   ", ".join(f"{u} {a}->{b}" for u, (a, b) in f.changes().items()) or "none",
                   "-" if f.predicted_before is None else f"{f.predicted_before:,.1f}",
                   "-" if f.predicted_after is None else f"{f.predicted_after:,.1f}"]
                  for n, f in enumerate(found, start=1)]
    if table:
        parts.append(html_table(["run", "re-fit", "at s", "reason", "replicas changed",
                                 "predicted items/s before", "after"], table, left=(0, 3, 4)))
        parts.append(basis_note("Dashed red lines mark re-fits (hover for the reason and the "
                                "prediction). Lines at one count are drawn a few pixels apart."))
    else:
        parts.append(basis_note("No re-fits recorded: each unit kept the replicas it was placed "
                                "with, apart from restarts. Lines at one count are drawn a few "
                                "pixels apart."))
    return html_section("replicas", "Replicas per unit over time", *parts)


def _refit_text(refit: Refit) -> str:
    changes = ", ".join(f"{u} {a} -> {b}" for u, (a, b) in refit.changes().items())
    predicted = ""
    if refit.predicted_before is not None or refit.predicted_after is not None:
        predicted = (f"; predicted {refit.predicted_before or 0:,.1f} -> "
                     f"{refit.predicted_after or 0:,.1f} items/s")
    return f"re-fit at {refit.t_s:.2f} s: {refit.reason}; {changes or 'no change'}{predicted}"


def _device_name(sample: DeviceSample) -> str:
    where = f"{sample.node} " if sample.node else ""
    return f"{where}GPU {sample.device} ({sample.name})"


def devices_section(records: Sequence[RunRecord], labels: Sequence[str], x_max: float) -> str:
    if not any(r.device_samples for r in records):
        return html_section("devices", "Accelerators (device samples)", basis_note(
            "No device samples in these records: no GPU was sampled (none visible, or NVML "
            "not installed: pip install 'fitwork[nvml]')."))
    parts, rows = [], []
    for label, record in zip(labels, records, strict=True):
        if not record.device_samples:
            parts.append(basis_note(f"{label}: no device samples."))
            continue
        devices: dict[tuple[str, int], list[DeviceSample]] = {}
        for sample in sorted(record.device_samples, key=lambda s: s.t_s):
            devices.setdefault(device_key(sample), []).append(sample)
        ordered = sorted(devices.items())
        busy = [LineSeries(_device_name(s[0]), [(x.t_s, x.utilization * 100) for x in s],
                           colour(i)) for i, (_, s) in enumerate(ordered)]
        memory = [LineSeries(f"{_device_name(s[0])} used", [(x.t_s, x.memory_used / GIB)
                                                              for x in s], colour(i))
                  for i, (_, s) in enumerate(ordered)]
        total = max(x.memory_total for x in record.device_samples) / GIB
        height = 204 + legend_height([s.name for s in memory], CHART_WIDTH)
        parts.append(line_chart(busy, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: GPU utilization", y_max=100.0,
                                x_caption="seconds from the start",
                                y_caption="% of time a kernel ran"))
        parts.append(line_chart(memory, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: GPU memory used (of {total:,.1f} GiB)",
                                y_max=total or None, x_caption="seconds from the start",
                                y_caption="GiB"))
        rows += [[label, f"{'' if d.node is None else d.node + ' '}GPU {d.device}", d.name,
                  f"{d.samples:,}", pct(d.mean_utilization),
                  f"{d.peak_memory / GIB:,.2f} of {d.memory_total / GIB:,.1f} GiB",
                  "-" if d.mean_power_w is None else f"{d.mean_power_w:,.0f} W"]
                 for d in device_figures(record.device_samples)]
    parts.append(html_table(["run", "device", "name", "samples", "mean utilization",
                             "peak memory", "mean power"], rows, left=(0, 1, 2)))
    parts.append(basis_note("Read through NVML while the run went on: utilization is the share "
                            "of each sample period in which a kernel ran; memory is what the "
                            "device held, from every process."))
    return html_section("devices", "Accelerators (device samples)", *parts)


def processes_section(records: Sequence[RunRecord], labels: Sequence[str], x_max: float) -> str:
    """Memory, open files and shared memory of each run's processes over time."""
    if not any(r.process_samples for r in records):
        return html_section("processes", "Processes over time", basis_note(
            "No process samples in these records (written before fitwork sampled them)."))
    parts = []
    for label, record in zip(labels, records, strict=True):
        samples = sorted(record.process_samples, key=lambda s: s.t_s)
        if not samples:
            parts.append(basis_note(f"{label}: no process samples."))
            continue
        memory = [
            LineSeries("driver RSS", [(s.t_s, s.driver_rss / MIB) for s in samples], colour(0)),
            LineSeries("largest worker RSS", [(s.t_s, s.worker_rss_max / MIB)
                                              for s in samples], colour(1)),
            LineSeries("/dev/shm", [(s.t_s, s.shm_bytes / MIB) for s in samples], colour(2))]
        handles = [
            LineSeries("driver open files", [(s.t_s, s.driver_fds) for s in samples],
                       colour(0)),
            LineSeries("workers' open files", [(s.t_s, s.worker_fds) for s in samples],
                       colour(1)),
            LineSeries("workers", [(s.t_s, s.workers) for s in samples], colour(3))]
        height = 204 + legend_height([s.name for s in memory], CHART_WIDTH)
        parts.append(line_chart(memory, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: memory", x_caption="seconds from the start",
                                y_caption="MiB"))
        parts.append(line_chart(handles, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: open files and workers",
                                x_caption="seconds from the start", y_caption="count"))
    parts.append(basis_note(
        "Sampled by the driver every half second or so (a long run keeps at most 1,000 "
        "samples, thinning older ones). A worker's RSS includes what it shares with the "
        "driver it was forked from; the memory watchdog judges a worker by its own memory. "
        "The last sample is taken after the run let its workers and shared memory go."))
    return html_section("processes", "Processes over time", *parts)


def timeline_section(records: Sequence[RunRecord], labels: Sequence[str], colours: dict[str, str],
                     x_max: float) -> str:
    seconds_per_px = x_max / CHART_WIDTH
    charts = []
    for label, record in zip(labels, records, strict=True):
        order = {u.name: i for i, u in enumerate(record.units)}
        rows = []
        for w in sorted(record.workers, key=lambda w: (order.get(w.unit, 0), w.worker_id)):
            end = w.ended_s if w.ended_s is not None else record.wall_s
            busy = merge_intervals(w.busy_intervals, gap=seconds_per_px / 2)
            busy_share = share(w.busy_s, end - w.started_s)
            rows.append(GanttRow(
                label=f"{w.unit} #{w.worker_id}", group=w.unit, alive=(w.started_s, end),
                busy=busy, colour=colours[w.unit],
                tooltip=f"{w.unit} worker {w.worker_id} (pid {w.pid}"
                        + (f" on {w.node}" if w.node else "") + f"): busy {w.busy_s:.2f} s "
                        f"of {end - w.started_s:.2f} s alive ({busy_share:.0%}), "
                        f"{w.items_in:,} items in"))
        charts.append(gantt(rows, x_max, width=CHART_WIDTH,
                            label=f"{label}: {record.pipeline}, {record.wall_s:.2f} s"))
    return html_section("timeline", "Worker timeline (busy vs idle)", *charts, basis_note(
        "Each row is one worker process, from its start to its end; coloured where it was "
        "busy on an item or batch, grey where it was alive and waiting. All runs share one "
        "time scale."))


def queues_section(records: Sequence[RunRecord], labels: Sequence[str], colours: dict[str, str],
                   x_max: float) -> str:
    parts = []
    for label, record in zip(labels, records, strict=True):
        times = record.queue.times_s
        if not times:
            parts.append(basis_note(f"{label}: no queue depth samples in the record."))
            continue
        series = [LineSeries(name, list(zip(times, depths, strict=False)), colours.get(
            name, "#777777"), step=True) for name, depths in record.queue.depths.items()]
        parts.append(line_chart(series, x_max, width=CHART_WIDTH, height=240,
                                label=f"{label}: items waiting in front of each unit",
                                x_caption="seconds from the start", y_caption="items"))
    return html_section("queues", "Queue depth over time", *parts, basis_note(
        "Sampled by the driver while the run went on; a queue that stays full sits in front "
        "of the bottleneck."))
