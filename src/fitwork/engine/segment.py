"""Segments: how items travel between replicas, and how a unit's results become segments.

A `Segment` is a named tuple ``(frame, attempt, offsets, paths, exps, values)``: the items of
one feed frame that travel together.  ``offsets`` locates each item's source item in its
feed frame (a ``range`` for a fresh run of items), ``paths`` names a flat-map child
(``None``: every path is ``()``), and ``exps`` gives each item's weight as ``2**-exp``
(``None``: every weight is 1).  A source item starts with weight 1; a map passes its weight
on, a filter that drops an item and a failed item *return* theirs, and a flat-map splits
its weight exactly among its children (``n`` children of ``2**-e`` get ``2**-(e+k-1)`` or
``2**-(e+k)``, ``k = ceil(log2 n)``).  The children of a `Slice` (rows ``lo..`` of a shard,
what the run core sends a reader in place of a shard whose worker died) are numbered from
``lo``, as in the whole shard, and share the slice's weight; a reader's `Children` (the
outputs of one row, when it runs a filter or flat-map first unit) split that row's weight
as a flat-map's children do, one level down.  The run's books know a source
item is finished when the weights that reached the sink or were returned add up to 1,
whatever order reports arrive in.  A `Return` is ``(frame, offsets, exps)``.

The common case costs no per-item work here: a map over a fresh segment keeps its
metadata and swaps its values.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from fitwork.errors import EngineError
from fitwork.failure import Failure
from fitwork.io.shards import Children, Slice
from fitwork.workload.kernel import ChildFailed, Failed, Kernel
from fitwork.workload.unit import Kind


class _SegmentFields(NamedTuple):
    """The fields of a `Segment`, in the order they cross a pipe."""

    frame: int
    attempt: int
    offsets: Sequence[int]
    paths: list[tuple[int, ...]] | None
    exps: list[int] | None
    values: list[Any]


class Segment(_SegmentFields):
    """Items of one feed frame that travel together (see above); checked as it is built:
    one offset, and one path and exponent where given, per value.  (`typed` and ``_make``
    rebuild segments that were checked where they were made, without checking again.)"""

    __slots__ = ()

    def __new__(cls, frame: int, attempt: int, offsets: Sequence[int],
                paths: list[tuple[int, ...]] | None, exps: list[int] | None,
                values: list[Any]) -> Segment:
        count = len(values)
        if (len(offsets) != count or (paths is not None and len(paths) != count)
                or (exps is not None and len(exps) != count) or frame < 0 or attempt < 0):
            raise EngineError(_malformed("segment", frame, attempt, count, offsets, paths,
                                         exps))
        return super().__new__(cls, frame, attempt, offsets, paths, exps, values)

    def with_values(self, values: list[Any]) -> Segment:
        """The same items' books with other values (as many)."""
        return Segment(self.frame, self.attempt, self.offsets, self.paths, self.exps, values)

    def head(self, size: int) -> tuple[Segment, Segment]:
        """The first ``size`` items, and the rest (empty values when none)."""
        if len(self.values) <= size:
            return self, Segment(self.frame, self.attempt, range(0), None, None, [])
        return self.cut(0, size), self.cut(size, len(self.values))

    def cut(self, start: int, stop: int) -> Segment:
        """Items ``start`` to ``stop`` (a slice of every field)."""
        paths, exps = self.paths, self.exps
        return Segment(self.frame, self.attempt, self.offsets[start:stop],
                       paths[start:stop] if paths else None, exps[start:stop] if exps else None,
                       self.values[start:stop])

    def keep(self, kept: list[int]) -> Segment:
        """Only the items at these indexes."""
        offsets, paths, exps, values = self.offsets, self.paths, self.exps, self.values
        return Segment(self.frame, self.attempt, [offsets[j] for j in kept],
                       [paths[j] for j in kept] if paths else None,
                       [exps[j] for j in kept] if exps else None, [values[j] for j in kept])


class _ReturnFields(NamedTuple):
    """The fields of a `Return`."""

    frame: int
    offsets: Sequence[int]
    exps: list[int] | None


class Return(_ReturnFields):
    """Weight handed back: items of feed frame ``frame`` at these offsets, of these weights
    (one exponent per offset, where given); checked as it is built."""

    __slots__ = ()

    def __new__(cls, frame: int, offsets: Sequence[int], exps: list[int] | None) -> Return:
        if (exps is not None and len(exps) != len(offsets)) or frame < 0:
            raise EngineError(_malformed("return", frame, None, len(offsets), offsets, None,
                                         exps))
        return super().__new__(cls, frame, offsets, exps)


def _malformed(what: str, frame: int, attempt: int | None, count: int, offsets: Sequence[int],
               paths: Sequence[Any] | None, exps: Sequence[int] | None) -> str:
    """The one line saying how a segment's (or a return's) books disagree."""
    sizes = [f"{len(offsets)} offsets"]
    if paths is not None:
        sizes.append(f"{len(paths)} paths")
    if exps is not None:
        sizes.append(f"{len(exps)} exponents")
    tried = f" (attempt {attempt})" if attempt is not None else ""
    return (f"malformed {what} of frame {frame}{tried}: {', '.join(sizes)} for {count} "
            "items; an engine built it wrong: give one of each per item (None for paths or "
            "exponents that are all () or 0), and a frame and attempt >= 0")


Weight = int | Fraction


Row = tuple[Any, ...]
"""A segment as a plain tuple: how segments cross the local engine's pipes (a named tuple's
pickle names its class, about 40 bytes more a frame)."""


def rows(segments: Sequence[Segment]) -> list[Row]:
    """Segments as plain tuples, to cross a pipe."""
    return [tuple(s) for s in segments]


def typed(crossed: Sequence[Row]) -> list[Segment]:
    """Segments again, from the plain tuples that crossed a pipe."""
    return [Segment._make(s) for s in crossed]


def fresh(frame: int, values: list[Any], attempt: int = 0) -> Segment:
    """A segment of new source items, the whole of feed frame ``frame``."""
    return Segment(frame, attempt, range(len(values)), None, None, values)


def weight_of(exps: list[int] | None, count: int) -> Weight:
    """The total weight of ``count`` items with these exponents."""
    if exps is None:
        return count
    top = max(exps)
    if top == 0:
        return count
    return Fraction(sum(1 << (top - e) for e in exps), 1 << top)


def split(segment: Segment, limit: int) -> list[Segment]:
    """``segment`` cut into pieces of at most ``limit`` items."""
    count = len(segment.values)
    if count <= limit:
        return [segment]
    return [segment.cut(i, i + limit) for i in range(0, count, limit)]


def settle(kernel: Kernel, segment: Segment, results: list[Any], failed: int
           ) -> tuple[Segment | None, Return | None, list[Failure]]:
    """The outputs, returned weight and failures of ``segment`` given its raw results."""
    kind = kernel.kind
    if kind is Kind.MAP and not failed:
        return segment.with_values(results), None, []
    frame, offsets, paths, exps, values = (segment.frame, segment.offsets, segment.paths,
                                           segment.exps, segment.values)
    out_offsets: list[int] = []
    out_paths: list[tuple[int, ...]] = []
    out_exps: list[int] = []
    out_values: list[Any] = []
    back_offsets: list[int] = []
    back_exps: list[int] = []
    failures: list[Failure] = []
    outs, backs = (out_offsets, out_paths, out_exps, out_values), (back_offsets, back_exps)
    flat = kind is Kind.FLAT_MAP
    for j, raw in enumerate(results):
        offset = offsets[j]
        path = paths[j] if paths else ()
        exp = exps[j] if exps else 0
        if type(raw) is Failed:
            failures.append(raw.record(kernel.name, values[j], path, frame, offset))
        elif flat:
            if _children(raw, values[j], (frame, offset), path, exp, outs, backs, failures):
                continue
        elif raw if kind is Kind.FILTER else True:
            out_offsets.append(offset)
            out_paths.append(path)
            out_exps.append(exp)
            out_values.append(values[j] if kind is Kind.FILTER else raw)
            continue
        back_offsets.append(offset)
        back_exps.append(exp)
    out = None
    if out_values:
        out = Segment(frame, segment.attempt, out_offsets, out_paths if any(out_paths) else None,
                      out_exps if any(out_exps) else None, out_values)
    back = Return(frame, back_offsets, back_exps if any(back_exps) else None) \
        if back_offsets else None
    return out, back, failures


def _children(raw: list[Any], value: Any, at: tuple[int, int], path: tuple[int, ...], exp: int,
              out: tuple[list[int], list[tuple[int, ...]], list[int], list[Any]],
              back: tuple[list[int], list[int]], failures: list[Failure]) -> bool:
    """One row's flat-map outputs ``raw`` (``value`` the row, ``at`` its frame and offset),
    each child sharing the row's weight ``2**-exp``: kept in ``out``, or failed alone with
    its weight in ``back``; False where there are none (the row returns its weight)."""
    count = len(raw)
    if not count:
        return False
    frame, offset = at
    k = (count - 1).bit_length()
    first = (1 << k) - count
    base = value.lo if type(value) is Slice else 0
    for i, child in enumerate(raw):
        child_exp = exp + k - 1 if i < first else exp + k
        if type(child) is ChildFailed:  # fails alone, and returns its weight
            failures.append(child.failed.record(child.unit, child.value, (*path, base + i),
                                                frame, offset))
            back[0].append(offset)
            back[1].append(child_exp)
        elif type(child) is Children:
            _grandchildren(child.values, offset, (*path, base + i), child_exp, out, back)
        else:
            out[0].append(offset)
            out[1].append((*path, base + i))
            out[2].append(child_exp)
            out[3].append(child)
    return True


def _grandchildren(values: list[Any], offset: int, path: tuple[int, ...], exp: int,
                   out: tuple[list[int], list[tuple[int, ...]], list[int], list[Any]],
                   back: tuple[list[int], list[int]]) -> None:
    """One row's outputs (a reader's `Children`), sharing the weight ``2**-exp`` of its
    child ``path`` as a flat-map's children do; none returns the weight."""
    count = len(values)
    if not count:
        back[0].append(offset)
        back[1].append(exp)
        return
    k = (count - 1).bit_length()
    first = (1 << k) - count
    for q, value in enumerate(values):
        out[0].append(offset)
        out[1].append((*path, q))
        out[2].append(exp + k - 1 if q < first else exp + k)
        out[3].append(value)
