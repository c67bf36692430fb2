"""How the run core settles what comes back: outputs delivered once per path, weights
counted, items and frames completed (a part of `fitwork.engine.core.machine.RunCore`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fitwork.engine.core.frames import Frame, Item
from fitwork.engine.core.instructions import Emit
from fitwork.engine.core.retries import Retries
from fitwork.engine.segment import Return, Segment, weight_of
from fitwork.failure import Failure


class Settling(Retries):
    """The run core's settling rules (its books are set in `RunCore.__init__`)."""

    order: deque[Frame]
    in_flight: int
    outputs: int
    completed: int
    released: int
    rows_seen: bool
    deaths_since_progress: int
    t0: float
    latencies: list[tuple[float, int]]
    completions: list[tuple[float, int]]

    if TYPE_CHECKING:
        def _maybe_finish(self) -> None: ...

    def _settle(self, now: float, segments: Sequence[Segment], returns: Sequence[Return],
                failures: Sequence[Failure]) -> None:
        """Deliver outputs and count weights; failures first, before their weight lands."""
        for failure in failures:
            self._failed(failure)
        frames = self.frames
        ordered = self.policy.ordered or self.policy.spans
        for segment in segments:
            frame = frames.get(segment.frame)
            if frame is None:
                continue
            if frame.items is not None or frame.origin is not None:
                self._arrive_itemized(frame, segment, now)
                continue
            offsets, paths, exps, values = (segment.offsets, segment.paths, segment.exps,
                                            segment.values)
            if self.slices and paths and paths[-1]:  # a shard's rows seen, to a power of 2
                rows = 1 << min(paths[-1][0].bit_length(), 24)
                self.shard_rows = max(self.shard_rows, rows) if self.rows_seen else rows
                self.rows_seen = True
            frame.log.append((offsets, paths, exps, True))
            self.outputs += len(values)
            if ordered:
                frame.buffer.append((offsets, paths, values))
            else:
                self.out.append(Emit(values))
            frame.weight += weight_of(exps, len(values))
            if frame.weight == frame.count:
                self._complete(frame, now)
        for back in returns:
            frame = frames.get(back.frame)
            if frame is None:
                continue
            if frame.items is not None or frame.origin is not None:
                self._return_itemized(frame, back.offsets, back.exps, now)
                continue
            frame.log.append((back.offsets, None, back.exps, False))
            frame.weight += weight_of(back.exps, len(back.offsets))
            if frame.weight == frame.count:
                self._complete(frame, now)

    def _owner(self, frame: Frame, offset: int) -> tuple[Frame, Item, int]:
        """The frame and item an arrival belongs to, and the attempt it came from."""
        if frame.origin is not None:
            origin = frame.origin[0]
            return origin, origin.itemize()[frame.index(offset)], frame.attempt
        return frame, frame.itemize()[offset], 0

    def _arrive_itemized(self, frame: Frame, segment: Segment, now: float) -> None:
        """Outputs of an itemized frame: each emitted once per path, and the weight of a
        run of outputs of one item (a reader's streamed rows) counted at once."""
        offsets, paths, exps, values = (segment.offsets, segment.paths, segment.exps,
                                        segment.values)
        emitted: list[Any] = []  # one Emit for the segment, where its first output was
        at = len(self.out)
        ordered = self.policy.ordered or self.policy.spans
        run: list[int] = []  # the exponents of the current run of one item's outputs
        last, owner, item, attempt = -1, frame, None, 0
        for j, offset in enumerate(offsets):
            if offset != last or item is None:
                if run and item is not None:
                    self._add(frame, owner, item, attempt, weight_of(run, len(run)), now)
                run = []
                last = offset
                owner, item, attempt = self._owner(frame, offset)
            if item.settled:
                continue
            path = paths[j] if paths else ()
            if path not in item.paths:
                item.paths.add(path)
                self.outputs += 1
                if ordered:
                    owner.singles.append((frame.index(offset), path, values[j]))
                else:
                    if not emitted:
                        at = len(self.out)
                    emitted.append(values[j])
            run.append(exps[j] if exps else 0)
        if run and item is not None:
            self._add(frame, owner, item, attempt, weight_of(run, len(run)), now)
        if emitted:
            self.out.insert(at, Emit(emitted))

    def _return_itemized(self, frame: Frame, offsets: Sequence[int], exps: list[int] | None,
                         now: float) -> None:
        for j, offset in enumerate(offsets):
            owner, item, attempt = self._owner(frame, offset)
            if not item.settled:
                self._add(frame, owner, item, attempt,
                          weight_of([exps[j]], 1) if exps else 1, now)

    def _add(self, frame: Frame, owner: Frame, item: Item, attempt: int, weight: Any,
             now: float) -> None:
        """Count weight that came back for ``item`` through ``frame`` (a piece's weight is
        its own: the item settles once its last live piece has all of it)."""
        if frame.piece is None:
            if item.add(attempt, weight):
                self._settle_item(owner, item, now)
            return
        frame.weight += weight
        if frame.weight == 1 and frame.id in item.pieces:
            self.deaths_since_progress = self.poisoned_since_progress = 0
            self._drop_piece(owner, item, frame, now)

    def _drop_piece(self, owner: Frame, item: Item, piece: Frame, now: float) -> None:
        """``piece`` is settled or replaced: the item settles with its last live piece."""
        item.pieces.discard(piece.id)
        self.frames.pop(piece.id, None)
        if not item.pieces and not item.settled:
            self._settle_item(owner, item, now, progress=False)

    def _settle_item(self, frame: Frame, item: Item, now: float,
                     progress: bool = True) -> None:
        item.settled = True
        if progress:
            self.deaths_since_progress = self.poisoned_since_progress = 0
        for piece_id in item.pieces:
            self.frames.pop(piece_id, None)
        item.pieces.clear()
        frame.unsettled -= 1
        if frame.unsettled == 0:
            self._complete(frame, now, progress)

    def _complete(self, frame: Frame, now: float, progress: bool = True) -> None:
        """Every item of ``frame`` is settled: count it, and release it in turn if ordered."""
        del self.frames[frame.id]
        for retry_id in frame.retries:
            self.frames.pop(retry_id, None)
        frame.done = True
        self.in_flight -= 1
        self.completed += frame.count
        if progress:
            self.deaths_since_progress = self.poisoned_since_progress = 0
        self.latencies.append((now - frame.fed_at, frame.count))
        self.completions.append((now - self.t0, self.completed))
        spans = self.policy.spans
        if self.policy.ordered:
            order = self.order
            while order and order[0].done:
                done = order.popleft()
                self.released += done.count
                values = done.ordered_values()
                if values or spans:
                    self.out.append(Emit(values, (done.src, done.count) if spans else None))
        else:
            self.released += frame.count
            if spans:
                self.out.append(Emit(frame.ordered_values(), (frame.src, frame.count)))
        self._maybe_finish()
