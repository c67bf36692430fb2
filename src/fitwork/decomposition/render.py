"""Plain-text rendering of a decomposition: each unit's lines, data in and out, kind, cost."""

from __future__ import annotations

import textwrap

from fitwork.decomposition.report import Decomposition, UnitReport
from fitwork.hardware.units import human_bytes


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _span(lines: tuple[int, int]) -> str:
    return f"line {lines[0]}" if lines[0] == lines[1] else f"lines {lines[0]}-{lines[1]}"


def _unit(index: int, u: UnitReport) -> list[str]:
    kind = f"{u.kind} ({u.kind_source})" if u.kind else "kind not known (no sample, no hint)"
    demand = ", ".join(f"{k}={v:g}" for k, v in u.resources.items())
    out = [f"[{index}] {u.name}  {_span(u.lines)}  {u.shape}  {kind}  {demand}"]
    if u.cost is not None:
        c = u.cost
        accel = f", accelerator {_ms(c.accel_s)}" if c.accel_s else ""
        share = c.cpu_s / c.wall_s if c.wall_s > 0 else 0.0
        out.append(f"    per item: wall {_ms(c.wall_s)}, cpu {_ms(c.cpu_s)} ({share:.0%} of "
                   f"wall){accel}; in {human_bytes(c.bytes_in)}, out {human_bytes(c.bytes_out)}")
    out.append(f"    receives: {', '.join(u.inputs) or '-'}    passes on: "
               f"{', '.join(u.outputs) or '-'}")
    out += [f"    | {line}" for line in textwrap.dedent(u.source).rstrip().splitlines()]
    return out


def render(decomposition: Decomposition) -> str:
    """The decomposition as text, for a terminal or a log."""
    d = decomposition
    head = f"{d.function} ({d.filename}:{d.lines[0]}): {len(d.units)} unit"
    head += "s" if len(d.units) != 1 else ""
    if d.samples:
        head += f", measured on {d.samples} sample item" + ("s" if d.samples != 1 else "")
    out = [head]
    if d.fallback:
        out.append(f"runs whole: {d.fallback}")
    for index, u in enumerate(d.units, 1):
        out += _unit(index, u)
    if d.merges:
        out.append("merged:")
        for m in d.merges:
            parts = " + ".join(_span(p) for p in m.parts) if len(m.parts) < 4 \
                else f"{_span(m.lines)}, {len(m.parts)} pieces"
            figures = ""
            if m.rule == "kind" and m.bytes is not None and m.transfer_s is not None:
                figures = (f" ({human_bytes(m.bytes)} per item no longer moved, "
                           f"{_ms(m.transfer_s)})")
            out.append(f"  {parts} ({m.rule}): {m.reason}{figures}")
    out += [f"note: {note}" for note in d.notes]
    out.append("result: " + " -> ".join(u.name for u in d.units))
    return "\n".join(out)
