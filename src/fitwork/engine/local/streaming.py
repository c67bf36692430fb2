"""A local reader replica hands a shard's rows on as it reads them, and says so.

A reader (`fitwork.io.shards.Source.reader`) given a ``stream`` sends every
`fitwork.io.shards.STREAM_ROWS` children to it mid-shard (`fitwork.io.shards.streamed`).  Here
each such chunk is settled as the children of the shard with half the weight still its
(exponent ``e + c`` for the ``c``-th chunk, numbered from the chunk's first row), sent on
at once (into the next channel, or written to the replica's part with a `Written` to the
driver), so the run core's books hold the rows delivered before a death and a retry reads
only the rest (`fitwork.engine.core.retries`).  When the call ends, the rows it yielded
settle as a `Slice` from the first row not streamed, with the weight left (``e + C``):
the shard's weights still add up to exactly its own.

A shard (or piece of one) whose rows the run core sends again as new pieces, after a death
in a later unit, is *stale* (`fitwork.engine.local.marks.Mark.is_stale`): the reader sends
none of its rows more and stops reading it, and the call settles nothing of it (the new
pieces carry its weight).  Streaming on had every later row of the shard, a row that kills
every time too, reach the next unit once per piece: about 15 deaths a such row, where
naming the row and stopping the stream cost 5-6 (`tests/engine/test_poison.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fitwork.engine.parts import Written
from fitwork.engine.segment import Segment
from fitwork.engine.serving import Finished
from fitwork.io.shards import Slice
from fitwork.workload.kernel import Failed, Kernel

if TYPE_CHECKING:
    from fitwork.engine.local.worker import Worker


class RowStreams:
    """One reader replica's streamed shards: where each value sits in its frame, and how
    many chunks of it went on, up to which row."""

    def __init__(self, worker: Worker, kernel: Kernel) -> None:
        self.worker, self.kernel = worker, kernel
        self.places: dict[int, tuple[Segment, int]] = {}
        self.streamed: dict[int, tuple[int, int]] = {}  # id(value): chunks, next row
        self.mark_row: Callable[[int], None] | None = None  # told each row as it starts
        self.stopped: set[int] = set()  # id(value) of stale values: they settle nothing

    def note(self, segments: list[Segment]) -> None:
        """A frame taken: where each of its values is (the reader is called with them)."""
        for segment in segments:
            for j, value in enumerate(segment.values):
                self.places[id(value)] = (segment, j)

    def __call__(self, value: Any, lo: int, rows: list[Any]) -> bool:
        """Settle rows ``lo..`` of ``value`` as its next chunk and send them on now; False
        (nothing sent) where the value is stale: its reader stops."""
        segment, j = self.places[id(value)]
        mark = self.worker.mark
        if mark is not None and mark.is_stale(segment.frame, segment.offsets[j]):
            self.stopped.add(id(value))
            return False
        chunks = self.streamed.get(id(value), (0, 0))[0] + 1
        self.streamed[id(value)] = (chunks, lo + len(rows))
        exp = (segment.exps[j] if segment.exps else 0) + chunks
        path = segment.paths[j] if segment.paths else ()
        inner = value.value if type(value) is Slice else value
        piece = Segment(segment.frame, segment.attempt, [segment.offsets[j]],
                        [path] if path else None, [exp], [Slice(inner, lo, None)])
        worker = self.worker
        worker.settle(self.kernel, piece, [rows], 0)
        worker.flush()
        if worker.written:  # the part holds them: the driver hears of them now
            worker.items_out += sum(len(s.values) for s in worker.written)
            worker.send(Written(worker.written))
            worker.written = []
        return True

    def finished(self, frames: list[Finished]) -> list[Finished]:
        """``frames`` with each streamed value's segment settling only what it yielded:
        from its first row not streamed, with the weight left."""
        out = []
        for frame in frames:
            if self.stopped:
                frame = self._unstale(frame)
            segments = [self._rest(s, r) for s, r in zip(frame.segments, frame.results,
                                                         strict=True)]
            out.append(frame._replace(segments=segments))
            for segment in frame.segments:
                for value in segment.values:
                    self.places.pop(id(value), None)
                    self.streamed.pop(id(value), None)
        return out

    def _unstale(self, frame: Finished) -> Finished:
        """``frame`` without its stale values (they settle nothing: new pieces carry them)."""
        stopped = self.stopped
        segments, results = [], []
        for segment, got in zip(frame.segments, frame.results, strict=True):
            kept = [j for j, v in enumerate(segment.values) if id(v) not in stopped]
            for value in segment.values:
                if id(value) in stopped:
                    stopped.discard(id(value))
                    self.places.pop(id(value), None)
                    self.streamed.pop(id(value), None)
            segments.append(segment if len(kept) == len(segment.values) else segment.keep(kept))
            results.append(got if len(kept) == len(got) else [got[j] for j in kept])
        return frame._replace(segments=segments, results=results)

    def _rest(self, segment: Segment, results: list[Any]) -> Segment:
        """``segment`` with its streamed values as the rest of them (a call that failed
        keeps its value, for its dead letter, and returns the weight left)."""
        streamed = self.streamed
        if not any(id(v) in streamed for v in segment.values):
            return segment
        values = list(segment.values)
        exps = list(segment.exps or [0] * len(values))
        for j, value in enumerate(values):
            if id(value) in streamed:
                chunks, next_row = streamed[id(value)]
                exps[j] += chunks
                if type(results[j]) is Failed:
                    continue
                inner, hi = (value.value, value.hi) if type(value) is Slice else (value, None)
                values[j] = Slice(inner, next_row, hi)
        return Segment(segment.frame, segment.attempt, segment.offsets, segment.paths, exps,
                       values)


def install(worker: Worker, kernel: Kernel) -> RowStreams | None:
    """Streams for a reader replica that runs its items one call after another (else
    None: batched and concurrent replicas keep whole results)."""
    fn = kernel.fn
    if not getattr(fn, "slices_rows", False) or not hasattr(fn, "stream"):
        return None
    if kernel.batched or kernel.given.io:
        return None
    streams = RowStreams(worker, kernel)
    fn.stream = streams
    return streams


__all__ = ["RowStreams", "install"]
