"""The demo's results for the terminal: monolithic and fitted side by side, then the checks."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fitwork.demo.config import ACCURACY_THRESHOLD
from fitwork.demo.run import DemoResult, Side


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def _replicas(side: Side) -> str:
    return ", ".join(f"{name} x{count}" for name, count in side.replicas.items())


def comparison(result: DemoResult) -> Table:
    """One row per figure, one column per way of running the work."""
    mono, fitted = result.monolithic, result.fitted
    table = Table(title=f"OCR of {result.pages} pages, store latency "
                        f"{result.config.latency_ms:g} ms per request", title_justify="left")
    table.add_column("figure", justify="left")
    table.add_column("monolithic", justify="right")
    table.add_column("fitted", justify="right")
    table.add_row("units x replicas", _replicas(mono), _replicas(fitted))
    table.add_row("items/s realized", f"{mono.record.throughput:,.2f}",
                  f"{fitted.record.throughput:,.2f}")
    table.add_row("items/s predicted by the plan", f"{mono.predicted:,.2f}",
                  f"{fitted.predicted:,.2f}")
    table.add_row("realized / predicted", f"{mono.realized_share:.2f}",
                  f"{fitted.realized_share:.2f}")
    table.add_row("wall seconds", f"{mono.record.wall_s:,.1f}", f"{fitted.record.wall_s:,.1f}")
    classes = list(dict.fromkeys(c.device_class for s in (mono, fitted)
                                 for c in s.figures.classes))
    for name in classes:
        cells = []
        for side in (mono, fitted):
            row = next((c for c in side.figures.classes if c.device_class == name), None)
            cells.append("-" if row is None else
                         f"{row.utilization:.1%} of {row.allocated:g} allocated")
        table.add_row(f"fleet utilization, {name}", *cells)
    table.add_row(f"cores busy, of the host's {result.host_cores:g}",
                  _pct(mono.host_cpu_share), _pct(fitted.host_cpu_share))
    for name in classes:
        cells = []
        for side in (mono, fitted):
            row = next((c for c in side.figures.classes if c.device_class == name), None)
            cells.append(_pct(row.mfu if row else None))
        if any(c != "-" for c in cells):
            table.add_row(f"MFU, {name} (FP32 peak)", *cells)
    if mono.gpu is not None or fitted.gpu is not None:
        table.add_row("GPU busy (NVML utilization rate)",
                      _pct(mono.gpu.mean_busy if mono.gpu else None),
                      _pct(fitted.gpu.mean_busy if fitted.gpu else None))
    bound = fitted.figures.capacity_bound
    table.add_row(f"server capacity ({bound:,.2f} items/s bound)" if bound else
                  "server capacity", _pct(mono.figures.capacity_utilization),
                  _pct(fitted.figures.capacity_utilization))
    table.add_row("cost per million items", _money(mono.cost_per_million),
                  _money(fitted.cost_per_million))
    table.add_row("lines exact (pages exact)",
                  f"{mono.score.line_accuracy:.1%} ({mono.score.document_accuracy:.1%})",
                  f"{fitted.score.line_accuracy:.1%} ({fitted.score.document_accuracy:.1%})")
    return table


def notes(result: DemoResult) -> Group:
    """Where the figures come from, the layouts considered, the checks, the files."""
    fitted = result.fitted
    lines = [
        Text(f"price: {fitted.price_basis}, ${fitted.price_per_hour or 0:,.4f}/h for both runs"),
        Text(f"FLOPs per page: detect {result.flops.detect or 0:.3g}, recognise "
             f"{result.flops.recognise or 0:.3g}; {result.flops_note}"),
        Text("models on: " + (f"{result.gpu_class} (CUDAExecutionProvider)" if result.gpu_class
                              else "CPU cores, one onnxruntime thread per process")),
    ]
    for candidate in result.candidates:
        chosen = " (chosen)" if candidate.layout == result.layout else ""
        predicted = (f"predicts {candidate.predicted:,.2f} items/s, "
                     if candidate.predicted is not None else "")
        lines.append(Text(f"layout {candidate.layout}{chosen}: {' -> '.join(candidate.units)}; "
                          f"{predicted}{candidate.note}"))
    same = "yes" if result.same_text else f"NO ({len(result.mismatched)} pages differ)"
    lines.append(Text(f"same text both ways on every page: {same}; lines exact required: "
                      f"{ACCURACY_THRESHOLD:.0%}"))
    for failure in result.failures:
        lines.append(Text(f"check failed: {failure}", style="red"))
    if result.files:
        folder = result.config.out
        lines.append(Text(f"wrote {', '.join(p.name for p in result.files.values())} "
                          f"to {folder}"))
    lines.append(Text(f"demo took {result.wall_s:,.1f} s", style="dim"))
    return Group(*lines)


def render(result: DemoResult) -> Group:
    """The comparison table and its notes."""
    return Group(comparison(result), notes(result))
