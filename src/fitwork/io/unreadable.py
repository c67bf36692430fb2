"""`Unreadable`: a line or row a tolerant reader could not read, standing in for its item."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fitwork.failure import Failure

READ_UNIT = "read"
"""The unit a dead letter of unreadable input names (the sharded runs' reader unit too)."""
TEXT_LIMIT = 1000
"""How much of a bad line's text its dead letter keeps."""


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A line or row of the input that could not be read, yielded in its place by
    ``read_items(..., bad_input="dead-letter")``; `fitwork.run` dead-letters it at once.

    ``error`` is the one-line error the default mode would have stopped with; ``file``
    the input file; ``line`` (1-based) and ``byte`` (the offset the line starts at) place
    a JSON Lines line or a CSV row, ``row_group`` and ``rows`` (1-based, inclusive) a
    Parquet row group; ``text`` is the start of the bad line, where there is one.
    """

    error: str
    file: str
    line: int | None = None
    byte: int | None = None
    row_group: int | None = None
    rows: tuple[int, int] | None = None
    text: str | None = None

    def where(self) -> dict[str, Any]:
        """The file and position, as a dead letter's ``input`` holds them."""
        place: dict[str, Any] = {"file": self.file}
        if self.line is not None:
            place["line"] = self.line
        if self.byte is not None:
            place["byte"] = self.byte
        if self.row_group is not None:
            place["row_group"] = self.row_group
        if self.rows is not None:
            place["rows"] = list(self.rows)
        if self.text is not None:
            place["text"] = self.text[:TEXT_LIMIT]
        return place

    def failure(self, item: int, run_id: str) -> Failure:
        """The dead letter of this line, as source item ``item`` of run ``run_id``."""
        return Failure(unit=READ_UNIT, error=f"InputError: {self.error}", input=self.where(),
                       item=item, run_id=run_id)


def holds_unreadable(items: list[Any], start: int) -> bool:
    """Whether ``items[start:]`` holds an `Unreadable` (a C-speed scan)."""
    return Unreadable in map(type, itertools.islice(items, start, None))


class PushedBack:
    """An iterator with items put back in front of it (what a feed cut short did not use)."""

    def __init__(self, source: Iterator[Any]) -> None:
        self.source = source
        self.back: list[Any] = []  # reversed: the next item is last

    def __iter__(self) -> PushedBack:
        return self

    def __next__(self) -> Any:
        if self.back:
            return self.back.pop()
        return next(self.source)


def feed_alone(items: list[Any], start: int, source: Iterator[Any]
               ) -> tuple[list[Any], Iterator[Any]]:
    """The items to feed now, where ``items[start:]`` holds an `Unreadable`: those before
    the first one, or that one alone if it comes first; the rest go back in front of
    ``source`` (wrapped in a `PushedBack` once).  Returns them and the source to use."""
    cut = next(k for k in range(start, len(items)) if type(items[k]) is Unreadable)
    keep = cut if cut else 1
    pushed = source if isinstance(source, PushedBack) else PushedBack(source)
    pushed.back.extend(reversed(items[keep:]))
    return items[:keep], pushed
