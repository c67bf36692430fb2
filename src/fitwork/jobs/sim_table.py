"""The fleet simulation's side-by-side table (one column per policy), as plain text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Row = tuple[str, Callable[[dict[str, Any]], str]]


def _hours(seconds: float) -> str:
    """Seconds as hours, 1 decimal (as seconds under 6 minutes)."""
    return f"{seconds:.1f} s" if seconds < 360 else f"{seconds / 3600:.1f} h"


def _class(cls: str, figure: str) -> Callable[[dict[str, Any]], str]:
    """Reads one class's figure (busy_over_allocated, allocated_over_owned) from a result."""
    def read(result: dict[str, Any]) -> str:
        return f"{result['utilization'][cls][figure]:.1%}"
    return read


def _rows(classes: Sequence[str]) -> list[Row]:
    """The table's rows: label and how to read the figure from one result."""
    rows: list[Row] = [
        ("pipelines completed", lambda r: f"{r['completed']}/{r['pipelines']}"),
        ("avg completion", lambda r: _hours(r["avg_completion_s"])),
        ("p99 completion", lambda r: _hours(r["p99_completion_s"])),
        ("makespan", lambda r: _hours(r["makespan_s"])),
        ("GPU utilization (busy/owned)", lambda r: f"{r['gpu_utilization']:.1%}"),
        ("GPUs busy/allocated", lambda r: f"{r.get('gpu_busy_over_allocated', 0):.1%}"),
        ("GPUs allocated/owned", lambda r: f"{r.get('gpu_allocated', 0):.1%}"),
    ]
    for cls in classes:
        rows += [(f"  {cls} busy/allocated", _class(cls, "busy_over_allocated")),
                 (f"  {cls} allocated/owned", _class(cls, "allocated_over_owned"))]
    rows += [
        ("Jain's fairness (time-avg)", lambda r: f"{r['jain']:.3f}"),
        ("normalized throughput p50", lambda r: f"{r['normalized_throughput']['p50']:.3g}"),
        ("re-fits", lambda r: str(r["refits"].get("count", 0))),
        ("re-fit mean / max", lambda r: f"{r['refits'].get('mean_s', 0) * 1e3:.0f} / "
                                        f"{r['refits'].get('max_s', 0) * 1e3:.0f} ms"),
        ("largest re-fit (running, vars, rows)",
         lambda r: "{running}, {variables}, {rows}".format(**r["refits"]["largest"])
         if r["refits"].get("largest") else "-"),
        ("largest gap", lambda r: f"{r['refits'].get('max_gap', 0):.1e}"),
    ]
    return rows


def render(results: Sequence[dict[str, Any]]) -> str:
    """One column per result (policy), one row per figure."""
    classes = list(results[0]["utilization"]) if results else []
    rows = _rows(classes)
    head = ["", *[r["policy"] for r in results]]
    body = [[label, *[read(r) for r in results]] for label, read in rows]
    widths = [max(len(str(line[i])) for line in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                       for i, c in enumerate(line)) for line in [head, *body]]
    return "\n".join(lines)
