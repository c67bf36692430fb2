"""The books of one feed frame: kept per frame, per item only once something goes wrong.

A fresh frame counts the weight that has come back for all its items together and logs the
metadata of what arrived (references to lists already received, no per-item work). When one
of its items must be retried, the frame *itemizes*: the log is replayed into per-item books
(weight of the current attempt, paths already delivered), and from then on that frame is
handled item by item. A retry is a frame of its own with an ``origin`` pointing at the item
it stands for (a single), or at several items of one frame (a ``group``: its item ``k``
stands for item ``group[k]`` of the origin). An item of a sharded source's reader is retried
as *pieces* instead: frames of one `fitwork.io.shards.Slice` of it each (``piece``), settled
when their own weight comes back, the item once its last live piece is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from fitwork.engine.segment import Weight, weight_of


class Piece(NamedTuple):
    """Rows ``[lo, hi)`` of an item (``hi`` None: to its end; ``width``: where a death splits
    such a tail), how many workers died holding them (``deaths``), and the row the engine
    named in the death that made the piece (``killer``; -1: none named)."""

    lo: int
    hi: int | None
    width: int
    deaths: int
    killer: int = -1


class Item:
    """One item of an itemized frame: weight per attempt, and what was already delivered."""

    __slots__ = ("attempt", "failed", "paths", "pieces", "settled", "shared", "weights")

    def __init__(self) -> None:
        self.attempt = 0
        self.shared = 0  # deaths of workers holding it with other items (not its fault)
        self.weights: dict[int, Weight] = {}
        self.paths: set[tuple[int, ...]] = set()
        self.failed: set[tuple[int, ...]] = set()
        self.settled = False
        self.pieces: set[int] = set()  # ids of the live piece frames retrying it by slices

    def add(self, attempt: int, weight: Weight) -> bool:
        """Count weight returned by ``attempt``; True once any attempt has all of it.

        An earlier attempt may still finish after a retry was sent (its worker died after
        passing its outputs on): whichever attempt completes first settles the item.
        """
        total = self.weights.get(attempt, 0) + weight
        self.weights[attempt] = total
        return total == 1


class Frame:
    """A feed frame: ``count`` source items from index ``src`` on, fed at ``fed_at``."""

    __slots__ = ("attempt", "buffer", "count", "done", "fed_at", "group", "id", "items", "log",
                 "origin", "piece", "retries", "singles", "src", "unsettled", "values",
                 "weight")

    def __init__(self, frame_id: int, src: int, values: list[Any], fed_at: float,
                 attempt: int = 0, origin: tuple[Frame, int] | None = None) -> None:
        self.id, self.src, self.values, self.fed_at = frame_id, src, values, fed_at
        self.count = len(values)
        self.attempt, self.origin = attempt, origin
        self.weight: Weight = 0
        self.log: list[tuple[Sequence[int], list[tuple[int, ...]] | None, list[int] | None,
                             bool]] = []
        self.items: list[Item] | None = None
        self.unsettled = self.count
        self.buffer: list[tuple[Sequence[int], list[tuple[int, ...]] | None, list[Any]]] = []
        self.singles: list[tuple[int, tuple[int, ...], Any]] = []
        self.retries: list[int] = []
        self.done = False
        self.piece: Piece | None = None
        self.group: tuple[int, ...] | None = None

    def index(self, offset: int) -> int:
        """The item of the frame's books an arrival at ``offset`` of this frame is for."""
        if self.origin is None:
            return offset
        return self.origin[1] if self.group is None else self.group[offset]

    def itemize(self) -> list[Item]:
        """Switch to per-item books, replaying everything that has arrived so far."""
        if self.items is not None:
            return self.items
        items = [Item() for _ in range(self.count)]
        for offsets, paths, exps, delivered in self.log:
            if delivered:
                for j, offset in enumerate(offsets):
                    items[offset].paths.add(paths[j] if paths else ())
            start = 0  # a run of one item's entries adds its weight at once (a reader's rows)
            for j in range(1, len(offsets) + 1):
                if j == len(offsets) or offsets[j] != offsets[start]:
                    run = exps[start:j] if exps else None
                    items[offsets[start]].add(0, weight_of(run, j - start))
                    start = j
        self.log = []
        self.items = items
        self.unsettled = 0
        for item in items:
            if item.weights.get(0) == 1:
                item.settled = True
            else:
                self.unsettled += 1
        return items

    def ordered_values(self) -> list[Any]:
        """The frame's buffered outputs in source order, flat-map children in path order."""
        entries = list(self.singles)
        for offsets, paths, values in self.buffer:
            if paths is None:
                entries.extend((o, (), v) for o, v in zip(offsets, values, strict=True))
            else:
                entries.extend(zip(offsets, paths, values, strict=True))
        entries.sort(key=lambda e: (e[0], e[1]))
        return [value for _, _, value in entries]
