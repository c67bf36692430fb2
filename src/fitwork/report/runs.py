"""The report's ``setup`` and ``summary`` sections: the host and workload of each run, and
one row of figures per run against the baseline."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from fitwork.report.figures import baseline_index, compare_hosts, host_cores, speedup
from fitwork.report.parts import GIB, basis_note, html_section, html_table, ms_text, times_text
from fitwork.telemetry.record import RunRecord


def _memory(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value / GIB:,.1f} GiB" if value >= 2**20 else f"{value:g}"
    return "-" if value is None else str(value)


def _gpus(value: Any) -> str:
    """GPUs as a host lists them (names, or dicts with a name and memory), counted."""
    if not value:
        return "none"
    if not isinstance(value, list):
        return str(value)
    counts: dict[str, int] = {}
    for gpu in value:
        if isinstance(gpu, Mapping):
            name = str(gpu.get("name") or gpu.get("device_class") or "GPU")
            if gpu.get("memory") or gpu.get("memory_total"):
                name += f" ({_memory(gpu.get('memory') or gpu.get('memory_total'))})"
        else:
            name = str(gpu)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())


def _cpu(host: Mapping[str, Any]) -> str:
    model, kind = host.get("cpu_model"), host.get("cpu_class")
    if model and kind:
        return f"{model} ({kind})"
    return str(model or kind or "-")


def _replicas_text(record: RunRecord, unit: str, planned: int) -> str:
    counts = record.replicas.counts.get(unit) or []
    low, high = (min(counts), max(counts)) if counts else (planned, planned)
    return f"{planned}" if low == high == planned else f"{planned} ({low}-{high} over the run)"


def setup_section(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    hosts = []
    for label, r in zip(labels, records, strict=True):
        started = datetime.datetime.fromtimestamp(r.started_at, datetime.UTC)
        h = r.host or {}
        cores = host_cores(r.host)
        hosts.append([label, str(h.get("name") or "not recorded"),
                      "-" if cores is None else f"{cores:g}", _memory(h.get("memory")),
                      _cpu(h), _gpus(h.get("gpus")) if h else "-", r.engine,
                      started.strftime("%Y-%m-%d %H:%M:%S UTC")])
    same = compare_hosts([r.host for r in records]) if len(records) > 1 else ""
    units = []
    for label, r in zip(labels, records, strict=True):
        placed = str((r.placement or {}).get("source") or "-")
        for u in r.units:
            units.append([label, u.name, u.kind, _replicas_text(r, u.name, u.replicas),
                          "-" if u.batch_size is None else f"{u.batch_size:,}",
                          f"{u.resources.get('cpu', 0.0):g}", f"{u.resources.get('gpu', 0.0):g}",
                          f"{u.items_in:,}", f"{u.items_out:,}", placed])
    items = ", ".join(f"{label} {r.items_in:,}" for label, r in zip(labels, records,
                                                                       strict=True))
    pipelines = ", ".join(dict.fromkeys(r.pipeline for r in records))
    return html_section(
        "setup", "Host and workload",
        "<h3>Host</h3>",
        html_table(["run", "host", "cores", "memory", "CPU", "GPUs", "engine", "started"], hosts,
                   left=(0, 1, 4, 5, 6, 7)),
        basis_note(f"Runs compared: {same}." if same else "As the run record describes its host."),
        "<h3>Workload</h3>",
        f'<p class="note">Pipeline {escape(pipelines)}; source items: {escape(items)}.</p>',
        html_table(["run", "unit", "kind", "replicas", "batch size", "cores each", "GPU share each",
                    "items in", "items out", "placement"], units, left=(0, 1, 2, 9)),
        basis_note("Replicas as placed at the start; a range where re-fits changed them."))


def summary_section(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    base = records[baseline_index(labels)]
    rows = []
    for label, r in zip(labels, records, strict=True):
        is_base = r is base
        rows.append([label, r.status, f"{r.items_completed:,}", f"{r.outputs:,}",
                     f"{r.wall_s:.2f}", f"{r.throughput:,.1f}",
                     "baseline" if is_base else times_text(speedup(r.throughput, base.throughput)),
                     ms_text(r.latency_p50_s), ms_text(r.latency_p95_s),
                     "baseline" if is_base else
                     times_text(speedup(r.latency_p95_s, base.latency_p95_s)),
                     f"{r.failures} ({r.poisoned} poison)"])
    return html_section("summary", "Runs", html_table(
        ["run", "status", "items", "outputs", "wall s", "items/s", "items/s vs baseline",
         "latency p50", "latency p95", "p95 vs baseline", "failures"], rows, left=(0, 1)),
        basis_note("Ratios are each run's figure over the baseline's: above 1 is more items/s, "
                   "or for latency, slower items."))
