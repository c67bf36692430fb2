"""Hand-written inline SVG charts (Gantt rows, grouped bars, lines): strings in, no scripts.

Every chart is one ``<svg>`` element sized in CSS pixels, with ``<title>`` children as
tooltips, so a report that embeds them needs nothing from the network to be viewed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
IDLE = "#e6e6e6"
AXIS = "#555555"
GRID = "#dddddd"
FONT = 'font-family="system-ui, sans-serif" font-size="11"'
LEFT, RIGHT, TOP, BOTTOM = 170, 24, 28, 34
CHAR_PX = 6.5  # the widest a character of FONT takes, on average, in a legend


def colour(index: int) -> str:
    """The ``index``-th colour of the palette, cycling."""
    return PALETTE[index % len(PALETTE)]


def nice_ticks(high: float, count: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``high``, about ``count`` of them."""
    if high <= 0 or not math.isfinite(high):
        return [0.0, 1.0]
    raw = high / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(high / step - 1e-9) + 1)]


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, content: str, anchor: str = "start", extra: str = "") -> str:
    return (f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" {FONT}{extra}>'
            f"{escape(content)}</text>")


def _figure(value: float) -> str:
    """A value as a table would show it: 1,234 / 105.7 / 47.0 / 0.123."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.3g}"


def _open(width: int, height: int, label: str) -> str:
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{escape(label)}">')


def _tick_label(value: float, percent: bool) -> str:
    return f"{value:.0%}" if percent else f"{value:g}"


def _x_axis(ticks: Sequence[float], scale: float, top: float, bottom: float, caption: str,
            percent: bool = False) -> list[str]:
    parts = []
    for tick in ticks:
        x = LEFT + tick * scale
        parts.append(f'<line x1="{_num(x)}" y1="{_num(top)}" x2="{_num(x)}" '
                     f'y2="{_num(bottom)}" stroke="{GRID}"/>')
        parts.append(_text(x, bottom + 13, _tick_label(tick, percent), "middle"))
    parts.append(_text(LEFT + (ticks[-1] * scale) / 2, bottom + 28, caption, "middle"))
    return parts


@dataclass(frozen=True)
class GanttRow:
    """One worker: its lifetime (idle unless busy), its busy intervals, its group's colour."""

    label: str
    group: str
    alive: tuple[float, float]
    busy: Sequence[tuple[float, float]]
    colour: str
    tooltip: str = ""


def gantt(rows: Sequence[GanttRow], x_max: float, *, width: int = 1100, label: str = "",
          row_height: int = 14) -> str:
    """Horizontal bars per row on a time axis 0..``x_max`` seconds: grey idle, colour busy."""
    ticks = nice_ticks(x_max)
    scale = (width - LEFT - RIGHT) / ticks[-1]
    keys = [("idle (alive, not busy)", IDLE, "solid")]
    keys += list({row.group: (f"busy: {row.group}", row.colour, "solid")
                  for row in rows}.values())
    height = (TOP + len(rows) * (row_height + 4) + BOTTOM + 24
              + legend_height([k[0] for k in keys], width))
    parts = [_open(width, height, label or "worker timeline")]
    parts.append(_text(LEFT, 16, label, extra=' font-weight="bold"'))
    bottom = TOP + len(rows) * (row_height + 4)
    parts += _x_axis(ticks, scale, TOP - 4, bottom, "seconds from the start of the run")
    for i, row in enumerate(rows):
        y = TOP + i * (row_height + 4)
        parts.append(_text(LEFT - 6, y + row_height - 3, row.label, "end"))
        start, end = row.alive
        parts.append(f'<rect class="idle" x="{_num(LEFT + start * scale)}" y="{y}" '
                     f'width="{_num(max(0.5, (end - start) * scale))}" height="{row_height}" '
                     f'fill="{IDLE}"><title>{escape(row.tooltip)}</title></rect>')
        for s, e in row.busy:
            parts.append(f'<rect class="busy" x="{_num(LEFT + s * scale)}" y="{y}" '
                         f'width="{max(0.4, (e - s) * scale):.2f}" height="{row_height}" '
                         f'fill="{row.colour}"/>')
    parts += _legend(keys, bottom + 52, width)
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class BarSeries:
    """One series of a grouped bar chart: a value per category (missing ones are skipped)."""

    name: str
    values: dict[str, float]
    colour: str
    hatched: bool = False


def bar_chart(categories: Sequence[str], series: Sequence[BarSeries], *, width: int = 1100,
              label: str = "", caption: str = "", percent: bool = True,
              bar_height: int = 14, unit: str = "") -> str:
    """Horizontal bars, one group per category, one bar per series that has a value.

    Values are shares shown as percentages, or with ``percent=False`` numbers shown to
    three significant figures followed by ``unit``.
    """
    top = max([1.0 if percent else 0.0]
              + [v for s in series for v in s.values.values() if math.isfinite(v)])
    ticks = nice_ticks(top, 6 if not percent else max(2, math.ceil(top / 0.2) + 1))
    scale = (width - LEFT - RIGHT - 50) / ticks[-1]
    groups = [[s for s in series if c in s.values] for c in categories]
    rows = sum(len(g) for g in groups) + len(categories)
    bottom = TOP + rows * (bar_height + 3)
    legend_y = bottom + 52
    height = legend_y + 10 + legend_height([s.name for s in series], width)
    parts = [_open(width, height, label or "bar chart"),
             '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/>'
             '<line x1="0" y1="0" x2="0" y2="6" stroke="#888888" stroke-width="3"/>'
             "</pattern></defs>",
             _text(LEFT, 16, label, extra=' font-weight="bold"')]
    parts += _x_axis(ticks, scale, TOP - 4, bottom, caption, percent)
    y = float(TOP)
    for category, group in zip(categories, groups, strict=True):
        parts.append(_text(LEFT - 6, y + bar_height - 3, category, "end",
                           ' font-weight="bold"'))
        y += bar_height + 3
        for s in group:
            value = s.values[category]
            fill = "url(#hatch)" if s.hatched else s.colour
            stroke = f' stroke="{s.colour}" stroke-width="1.5"' if s.hatched else ""
            text = f"{value:.1%}" if percent else _figure(value) + unit
            parts.append(f'<rect class="bar" x="{LEFT}" y="{_num(y)}" '
                         f'width="{_num(max(0.5, value * scale))}" height="{bar_height}" '
                         f'fill="{fill}"{stroke}><title>{escape(s.name)}: {escape(text)}'
                         "</title></rect>")
            parts.append(_text(LEFT - 6, y + bar_height - 3, s.name, "end"))
            parts.append(_text(LEFT + value * scale + 4, y + bar_height - 3, text))
            y += bar_height + 3
    parts += _legend([(s.name, s.colour, "hatched" if s.hatched else "solid")
                      for s in series], legend_y, width)
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class LineSeries:
    """One line of a line chart: ``(x, y)`` points in order, optionally dashed.

    ``nudge`` shifts the line up by that many pixels, so lines at one value stay apart.
    """

    name: str
    points: Sequence[tuple[float, float]]
    colour: str
    dashed: bool = False
    step: bool = False
    nudge: float = 0.0


@dataclass(frozen=True)
class Marker:
    """A moment marked on a line chart's time axis: a dashed vertical line and a label."""

    x: float
    label: str
    tooltip: str = ""


MARKER = "#b22222"


def line_chart(series: Sequence[LineSeries], x_max: float, *, width: int = 1100,
               height: int = 240, label: str = "", x_caption: str = "",
               y_caption: str = "", y_max: float | None = None,
               markers: Sequence[Marker] = ()) -> str:
    """Lines on axes from 0: x to ``x_max``, y to ``y_max`` (else the largest value).

    ``step`` series hold each value until the next point; ``markers`` are vertical lines.
    """
    y_top = y_max if y_max is not None else max(
        [0.0] + [y for s in series for _, y in s.points if math.isfinite(y)])
    x_ticks, y_ticks = nice_ticks(x_max), nice_ticks(y_top or 1.0, 5)
    x_scale = (width - LEFT - RIGHT) / x_ticks[-1]
    bottom = height - BOTTOM - 24 - legend_height([s.name for s in series], width)
    y_scale = (bottom - TOP) / y_ticks[-1]
    parts = [_open(width, height, label or "line chart"),
             _text(LEFT, 16, label, extra=' font-weight="bold"')]
    parts += _x_axis(x_ticks, x_scale, TOP - 4, bottom, x_caption)
    for tick in y_ticks:
        y = bottom - tick * y_scale
        parts.append(f'<line x1="{LEFT}" y1="{_num(y)}" x2="{width - RIGHT}" y2="{_num(y)}" '
                     f'stroke="{GRID}"/>')
        parts.append(_text(LEFT - 6, y + 4, f"{tick:g}", "end"))
    parts.append(f'<text x="{LEFT - 44}" y="{_num((TOP + bottom) / 2)}" text-anchor="middle" '
                 f'{FONT} transform="rotate(-90 {LEFT - 44} {_num((TOP + bottom) / 2)})">'
                 f"{escape(y_caption)}</text>")
    for s in series:
        points = list(s.points)
        if s.step:
            points = [p for i, (x, y) in enumerate(points)
                      for p in ([(x, points[i - 1][1])] if i else []) + [(x, y)]]
        coords = " ".join(f"{_num(LEFT + x * x_scale)},{_num(bottom - y * y_scale - s.nudge)}"
                          for x, y in points)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        parts.append(f'<polyline class="line" points="{coords}" fill="none" '
                     f'stroke="{s.colour}" stroke-width="2"{dash}>'
                     f"<title>{escape(s.name)}</title></polyline>")
    for marker in markers:
        x = _num(LEFT + marker.x * x_scale)
        parts.append(f'<g class="marker"><title>{escape(marker.tooltip or marker.label)}'
                     f'</title><line x1="{x}" y1="{TOP - 4}" x2="{x}" y2="{_num(bottom)}" '
                     f'stroke="{MARKER}" stroke-width="1.5" stroke-dasharray="3 3"/>'
                     + _text(LEFT + marker.x * x_scale + 3, TOP + 6, marker.label,
                             extra=f' fill="{MARKER}"') + "</g>")
    parts += _legend([(s.name, s.colour, "dashed" if s.dashed else "solid")
                      for s in series], bottom + 52, width)
    parts.append("</svg>")
    return "".join(parts)


def _legend_columns(names: Sequence[str], width: int) -> int:
    """Swatches per legend row: four, or fewer when the longest name would not fit."""
    longest = max((len(name) for name in names), default=0)
    needed = 24 + CHAR_PX * longest + 16
    return max(1, min(4, int((width - LEFT - RIGHT) // needed)))


def _legend(entries: Sequence[tuple[str, str, str]], y: float, width: int) -> list[str]:
    """Swatches in rows: ``(name, colour, style)`` with style solid, hatched or dashed."""
    parts = ['<g class="legend">']
    columns = _legend_columns([name for name, _, _ in entries], width)
    column = (width - LEFT - RIGHT) / columns
    for i, (name, fill, style) in enumerate(entries):
        x, row = LEFT + (i % columns) * column, y + (i // columns) * 16
        if style == "dashed":
            parts.append(f'<line x1="{_num(x)}" y1="{_num(row - 4)}" x2="{_num(x + 18)}" '
                         f'y2="{_num(row - 4)}" stroke="{fill}" stroke-width="2" '
                         'stroke-dasharray="5 3"/>')
        else:
            paint = (f'fill="url(#hatch)" stroke="{fill}" stroke-width="1.5"'
                     if style == "hatched" else f'fill="{fill}"')
            parts.append(f'<rect x="{_num(x)}" y="{_num(row - 9)}" width="18" height="10" '
                         f"{paint}/>")
        parts.append(_text(x + 24, row, name))
    parts.append("</g>")
    return parts


def legend_height(names: Sequence[str], width: int = 1100) -> int:
    """Pixels a legend of swatches named ``names`` takes in a chart ``width`` wide."""
    return 16 * math.ceil(len(names) / _legend_columns(names, width))
