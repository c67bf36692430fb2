"""The pieces every section of the HTML report is built from: tables, sections, captions,
numbers in words, and the colours of a plan's predicted sides."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from fitwork.report.svg import colour

if TYPE_CHECKING:
    from fitwork.fit.plan import Plan, PlanSide

CHART_WIDTH = 1100
GIB = 2**30
MIB = 2**20


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def html_table(head: Sequence[str], rows: Sequence[Sequence[str]],
               left: Sequence[int] = (0,)) -> str:
    """A table; columns in ``left`` are text (left-aligned), the rest numbers."""
    def cell(tag: str, index: int, content: str) -> str:
        align = ' class="l"' if index in left else ""
        return f"<{tag}{align}>{escape(content)}</{tag}>"

    cells = "".join(cell("th", i, h) for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def html_section(name: str, title: str, *parts: str) -> str:
    return f'<section id="{name}"><h2>{escape(title)}</h2>{"".join(parts)}</section>'


def basis_note(text: str) -> str:
    return f'<p class="basis">{escape(text)}</p>'


def ms_text(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.1f} ms"


def times_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}\u00d7"


def rate_text(value: float) -> str:
    return f"{value:,.1f} items/s"


def side_colour(side: PlanSide, labels: Sequence[str], fallback: str) -> str:
    return colour(labels.index(side.label)) if side.label in labels else fallback


def predicted_sides(plan: Plan | None) -> list[tuple[PlanSide, str]]:
    if plan is None:
        return []
    return [(plan.monolithic, "#9a9a9a"), (plan.fitted, "#444444")]
