"""Deaths and failures: how the run core narrows a death down, retries, and dead-letters.

Narrowing a death.  A frame's items travel by value, so the items a dead worker held of
a frame are replayed as one *group*, a retry frame that runs alone in its worker (a few,
at most ``GROUP_SINGLES``, one by one).  A group whose worker dies too is split into about
sqrt(n) groups of about sqrt(n) items, and so on down to ``GROUP_SINGLES`` items, which go
*one by one*: each a frame of its own (a single).  A single that has killed
``max_attempts`` workers alone is poison (a death with other items is no item's fault, so a
row that kills once completes whatever it shared a frame with).  A group, because the
common killer kills once and then its group completes: replaying a light unit's frame of
~600 items one by one cost a frame's books and a drained worker per item (0.13 s a death,
0.04x the clean run's throughput with 0.1% such rows), and so did splitting every frame at
once (27 retry frames a death, 0.15x).  Square roots, not halves, because a death (a new
worker: seconds for a Ray actor) costs more than a retry frame: a row that kills every time
costs two or three shared deaths before its ``max_attempts`` alone, not log2(n).  And once
a stage's workers die, its frames shrink to hold about ``KILLER_SHARE`` of a death each
(`_frame_size`), so a death takes few innocent rows with it and the run keeps settling
items between deaths.

Where the engine names the item a worker died in (`Exited.died_in`: a local worker marks
each item as it starts it, once its unit has lost one), that item alone is retried as a
death's, and the rest of the worker's frames go again at once, together, in a frame no unit
runs alone (`_resend`): a row that kills every time costs one death shared and then
``max_attempts`` alone, where narrowing by groups cost a death a level (and, with such rows
one in a thousand, isolated them back to back until the run stopped as a restart storm).
Whether such a death shrinks the stage's frames is the engine's (`Policy.named_shrink`).

An item of a sharded source's reader (``Stage.slices``) is a shard of thousands of rows,
which only a reader can re-read: replaying its rows one by one would re-read the shard once
per row. It is *bisected* instead: its retry is two `Slice`s, row ranges a reader reads
alone, and a range whose worker dies is split in two again (a range open at its end, whose
length nobody knows yet, is split at its ``width``, and the open rest gets twice that), so a
row that kills is alone after about log2(rows) deaths, reading the shard about twice per
level; then, like a single, it is poison once it has killed ``max_attempts`` workers alone.
A shard's first death is not split, as a frame's is not: its rows not yet delivered go
again as one open piece, split only if it dies too.  Each piece reads its shard from the
start, passing the rows before it unparsed, so splitting at once read a shard about twice
more per death (its open half mostly past the shard's end, holding nothing: ``width`` is
half the largest shard's rows rounded up to a power of 2), ~10 ms of a worker's CPU a death
in ``bench/poison.py``'s sharded runs, where every killer kills once; a row that kills every
time pays one death more before it is alone.
A local reader names the row it died in, too, and a unit after a reader of its own the row
it runs (by its path): the rows not delivered then go again as one piece that remembers it
(`Piece.killer`: a row that kills once does not again), and a row that kills such a piece's
reader as well is read alone, the rows around it as they were, in place of halving (about
13 deaths a row that kills every time in a 5,700-row shard; 5 now). A reader still
streaming the shard or piece that went again is told to stop (`Stale`): it went on handing
every later row, killers too, to the next unit once per piece (about 15 deaths a row that
kills every time, 5-6 now). The dead letter names the shard and the row. Any other row of a
killing range is read again in a smaller one, and the paths it delivered before are not
emitted twice; a range starts after the rows its item has delivered (`delivered_rows`: a
local reader streams its rows as it reads, so most of a shard read before a death is not
read again).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from fitwork.engine.core.frames import Frame, Item, Piece
from fitwork.engine.core.instructions import Abort, DeadLetter, Instruction, Send, Stale
from fitwork.engine.core.policy import Policy
from fitwork.engine.segment import fresh
from fitwork.errors import TooManyFailures
from fitwork.failure import Failure, portable
from fitwork.io.shards import Slice

KEEP_FAILURES = 1000
"""Failures the run's record keeps (each is dead-lettered all the same)."""
GROUP_SINGLES = 4
"""A retry group of at most this many items whose worker dies goes one by one."""


def delivered_rows(item: Item, start: int = 0) -> int:
    """The first row from ``start`` on of a shard item not yet delivered (nor
    dead-lettered) as its one output (path ``(row,)``): a row whose outputs are a flat-map's
    children (paths ``(row, k)``) may have delivered some of them only, so it stops the
    count.  A reader that streams its rows (`fitwork.engine.local.streaming`) has them
    delivered mid-shard, so a death redoes only the rows after them."""
    paths, failed = item.paths, item.failed
    row = start
    while (row,) in paths or (row,) in failed:
        row += 1
    return row


class Retries:
    """The run core's rules for deaths and failures (a part of `RunCore`, whose books
    these are: they are set in its ``__init__``)."""

    frames: dict[int, Frame]
    out: list[Instruction]
    policy: Policy
    run_id: str
    frame_ids: Iterator[int]
    retries: int
    fed_records: int
    failures: int
    poisoned: int
    poisoned_since_progress: int
    failures_by_unit: dict[str, int]
    failed_items: list[Failure]
    aborted: BaseException | None
    stopping: bool
    slices: bool
    shard_rows: int

    if TYPE_CHECKING:
        def _owner(self, frame: Frame, offset: int) -> tuple[Frame, Item, int]: ...

        def _settle_item(self, frame: Frame, item: Item, now: float,
                         progress: bool = True) -> None: ...

    def _failed(self, failure: Failure) -> None:
        frame = self.frames.get(failure.frame)
        if frame is None:
            return
        if frame.origin is not None or frame.items is not None:
            owner, item, _ = self._owner(frame, failure.offset)
            if item.settled or failure.path in item.failed:
                return  # settled already, or this outcome is known from another attempt
            item.failed.add(failure.path)
            src = owner.src + frame.index(failure.offset)
        else:
            src = frame.src + failure.offset
        self._dead_letter(failure.placed(src, self.run_id))

    def _dead_letter(self, failure: Failure) -> None:
        self.failures += 1
        self.failures_by_unit[failure.unit] = self.failures_by_unit.get(failure.unit, 0) + 1
        if failure.kind == "poison":
            self.poisoned += 1
            self.poisoned_since_progress += 1
        if len(self.failed_items) < KEEP_FAILURES:
            self.failed_items.append(failure.summary())
        self.out.append(DeadLetter(failure))
        limit = self.policy.max_failures
        if limit is not None and self.failures > limit and self.aborted is None:
            self._abort(TooManyFailures(
                f"{self.failures} items failed, more than max_failures={limit}, "
                f"{self.poisoned} of them rows isolated as poison (last: unit "
                f"{failure.unit!r}: {failure.error}); fix the unit or raise max_failures"))

    def _retry_held(self, held: Sequence[Sequence[tuple[int, Sequence[int]]]], unit: str,
                    why: str, now: float, named: tuple[int, int, int] | None = None) -> None:
        """The items a dead worker held (its frames' parts) go again.  Where its engine named
        the item it died in (``named``: feed frame, offset, a shard's row), that item alone
        is retried as a death's, and every other goes again as it was (`_resend`); a shard's
        row, where a piece of the shard died in it, is read alone (`_piece_died`); else each
        part is narrowed down (`_retry_part`)."""
        if named is None:
            for parts in held:
                for frame_id, offsets in parts:
                    self._retry_part(frame_id, offsets, unit, why, now)
            return
        if self.slices:
            self._retry_rows(held, unit, why, now, named)
            return
        by_frame: dict[int, list[int]] = {}
        for parts in held:
            for frame_id, offsets in parts:
                by_frame.setdefault(frame_id, []).extend(offsets)
        for frame_id, offsets in by_frame.items():
            self._resend(frame_id, offsets, named[1] if frame_id == named[0] else None, unit,
                         why, now)

    def _retry_rows(self, held: Sequence[Sequence[tuple[int, Sequence[int]]]], unit: str,
                    why: str, now: float, named: tuple[int, int, int]) -> None:
        """A sharded source's reader died in a row it named: a piece of a shard it held
        goes again by that row (`_piece_died`); a whole shard as one piece from its first
        row not delivered, remembering the row (`_retry_part`)."""
        for parts in held:
            for frame_id, offsets in parts:
                frame = self.frames.get(frame_id)
                if (frame_id != named[0] or frame is None or frame.piece is None
                        or frame.origin is None):
                    self._retry_part(frame_id, offsets, unit, why, now,
                                     named=named[1:] if frame_id == named[0] else None)
                    continue
                owner, index = frame.origin
                item = owner.itemize()[index]
                if not item.settled and frame.id in item.pieces:
                    self._piece_died(owner, index, frame, unit, why, now, row=named[2])

    def _resend(self, frame_id: int, offsets: Sequence[int], named: int | None, unit: str,
                why: str, now: float) -> None:
        """Items ``offsets`` of a frame were held by a worker that died in item ``named``
        of it (None: in another frame's): that item is retried as a death's; the rest ran,
        or never started, and go again together as they were, a frame no unit runs alone
        (on a fresh attempt, so their earlier weight does not count twice, and with the
        death counted shared, so none of them is nearer poison for it)."""
        frame = self.frames.get(frame_id)
        if frame is None:
            return
        if frame.piece is not None or (frame.origin is not None and frame.group is None):
            self._retry_part(frame_id, offsets, unit, why, now, blame=named is not None)
            return
        if frame.group is not None:  # all its items go again, as for any death of a group
            assert frame.origin is not None
            owner, items = frame.origin[0], frame.origin[0].itemize()
            held = [i for i in frame.group
                    if not items[i].settled and items[i].attempt == frame.attempt]
            named = frame.group[named] if named is not None else None
            self.frames.pop(frame.id, None)
        else:
            owner, items = frame, frame.itemize()
            held = [o for o in sorted(set(offsets))
                    if not items[o].settled and items[o].attempt == 0]
        if named is not None and named in held:
            held.remove(named)
            self._retry_or_poison(owner, named, unit, why, now,
                                  alone=frame.group is None and frame.count == 1)
        if not held:
            return
        for index in held:
            items[index].attempt += 1
            items[index].shared += 1
        values = [owner.values[i] for i in held]
        rest = Frame(next(self.frame_ids), owner.src + held[0], values, now,
                     attempt=items[held[0]].attempt, origin=(owner, held[0]))
        rest.group = tuple(held)
        self.frames[rest.id] = rest
        owner.retries.append(rest.id)
        self.retries += 1
        self.fed_records += len(values)
        # its segments say attempt 0, so no unit runs them alone; a retry all the same, so
        # the driver sends it ahead of fresh items
        self.out.append(Send(rest.id, fresh(rest.id, values, 0), retry=True))

    def _retry_part(self, frame_id: int, offsets: Sequence[int], unit: str, why: str,
                    now: float, blame: bool = True,
                    named: tuple[int, int] | None = None) -> None:
        """Items ``offsets`` of a frame are gone with a worker: narrow them down and send them
        again.  Without ``blame`` (they ran, and their outputs went with another process)
        they go again as they were, and the loss is no death of theirs alone.  ``named``:
        (offset, row) of a shard whose reader the engine saw die in that row."""
        frame = self.frames.get(frame_id)
        if frame is None:
            return
        if frame.group is not None:
            self._group_died(frame, unit, why, now)
            return
        if frame.origin is not None:
            owner, index = frame.origin
            item = owner.itemize()[index]
            if frame.piece is not None:
                if not item.settled and frame.id in item.pieces:
                    self._piece_died(owner, index, frame, unit, why, now, blame)
            elif not item.settled and item.attempt == frame.attempt:
                self._retry_or_poison(owner, index, unit, why, now, alone=blame)
            return
        items = frame.itemize()
        held = [o for o in sorted(set(offsets))
                if not items[o].settled and items[o].attempt == 0]
        if len(held) > GROUP_SINGLES and not self.slices:
            for offset in held:
                items[offset].shared += 1
            self._send_group(frame, held, unit, why, now)
            return
        for offset in held:
            if self.slices:  # the rows not delivered, as one piece: bisected if it dies
                items[offset].attempt = 1
                self.out.append(Stale(frame.id, offset))  # a reader reading it: stop
                width = max(1, self.shard_rows // 2)
                lo = delivered_rows(items[offset])  # rows delivered: not read again
                killer = named[1] if named is not None and named[0] == offset else -1
                self._send_piece(frame, offset, Piece(lo, None, width, 1, killer), 0, now)
            else:
                self._retry_or_poison(frame, offset, unit, why, now,
                                      alone=blame and frame.count == 1)

    def _piece_died(self, owner: Frame, index: int, frame: Frame, unit: str, why: str,
                    now: float, blame: bool = True, row: int = -1) -> None:
        """A worker died holding rows ``piece`` of an item: split them, or retry the row it
        holds alone (poison once it has killed ``max_attempts`` workers).  Without
        ``blame`` the rows not yet delivered go again as one piece, on the same attempt.
        Where the engine names the ``row`` it died in: the rows not delivered go again as
        one piece that remembers the row (a row that kills once does not again), and where
        that same row killed the piece's worker before, it is read alone and the rows around
        it go again as they were: no halves, two deaths shared for such a row.

        A piece that delivered rows before it died (a streaming reader's chunks) got past
        the row that killed the worker before it: a reader streams a chunk only once its
        last row is through, and a piece starts where the delivered rows end, so a row
        that kills every time kills again before the piece's first chunk.  Its death is
        another row's, a first death of the rows left, which go again as one piece, not
        split: a shard with many rows that kill once is not read over and over in halves."""
        item = owner.itemize()[index]
        piece = frame.piece
        assert piece is not None
        lo, hi, width, deaths = piece.lo, piece.hi, piece.width, piece.deaths + 1
        item.pieces.discard(frame.id)
        self.frames.pop(frame.id, None)
        self.out.append(Stale(frame.id, 0))  # a reader still reading the piece: stop
        start = delivered_rows(item, lo)  # rows of it delivered: not read again
        if hi is not None and start >= hi:
            pass  # every row of it was delivered before its worker died
        elif blame and start <= row and (hi is None or (row < hi and hi - start > 1)):
            self._piece_by_row(owner, index, piece, start, row, now)
        elif not blame:
            self._send_piece(owner, index, piece._replace(lo=start), frame.attempt, now)
        elif start > lo and (hi is None or hi - start > 1):  # another row killed it
            self._send_piece(owner, index, Piece(start, hi, width, deaths), 0, now)
        elif hi is None:
            self._send_piece(owner, index, Piece(start, start + width, width, deaths), 0, now)
            self._send_piece(owner, index, Piece(start + width, None, 2 * width, deaths), 0,
                             now)
        elif hi - start > 1:
            mid = (start + hi) // 2
            self._send_piece(owner, index, Piece(start, mid, mid - start, deaths), 0, now)
            self._send_piece(owner, index, Piece(mid, hi, hi - mid, deaths), 0, now)
        elif start > lo:  # one row left of several: alone from now on
            self._send_piece(owner, index, Piece(start, hi, 1, deaths), 0, now)
        elif frame.attempt + 1 < self.policy.max_attempts:  # attempts alone
            self._send_piece(owner, index, Piece(lo, hi, 1, deaths), frame.attempt + 1, now)
        else:
            shard = owner.values[index]
            self._dead_letter(Failure(
                unit=unit, error=f"{why} on each of {frame.attempt + 1} attempts with this "
                f"row alone ({deaths} deaths in all with it)", kind="poison",
                attempt=frame.attempt + 1, path=(lo,), input={"shard": portable(shard), "row": lo},
                item=owner.src + index, run_id=self.run_id))
        if not item.pieces and not item.settled:
            self._settle_item(owner, item, now, progress=False)

    def _piece_by_row(self, owner: Frame, index: int, piece: Piece, start: int, row: int,
                      now: float) -> None:
        """The rows of ``piece`` from ``start`` on go again by the ``row`` its worker died
        in: as one piece that remembers the row (a row that kills once does not again), or,
        where that row made this piece too, the row alone and the rows around it as they
        were."""
        hi, width, deaths = piece.hi, piece.width, piece.deaths + 1
        if row != piece.killer:
            self._send_piece(owner, index, Piece(start, hi, width, deaths, row), 0, now)
            return
        if row > start:
            self._send_piece(owner, index, Piece(start, row, row - start, piece.deaths), 0,
                             now)
        self._send_piece(owner, index, Piece(row, row + 1, 1, deaths), 0, now)
        if hi is None or row + 1 < hi:
            rest = hi - row - 1 if hi is not None else width
            self._send_piece(owner, index, Piece(row + 1, hi, rest, piece.deaths), 0, now)

    def _send_piece(self, owner: Frame, index: int, piece: Piece, attempt: int,
                    now: float) -> None:
        """Feed rows ``piece`` of an item as a frame of their own (a `Slice` of it)."""
        value = Slice(owner.values[index], piece.lo, piece.hi)
        retry = Frame(next(self.frame_ids), owner.src + index, [value], now,
                      attempt=attempt, origin=(owner, index))
        retry.piece = piece
        self.frames[retry.id] = retry
        owner.retries.append(retry.id)
        owner.itemize()[index].pieces.add(retry.id)
        self.retries += 1
        self.fed_records += 1
        # its segments say attempt >= 1 (a retry), so every unit runs them alone
        self.out.append(Send(retry.id, fresh(retry.id, [value], attempt + 1), retry=True))

    def _retry_or_poison(self, frame: Frame, index: int, unit: str, why: str,
                         now: float, alone: bool) -> None:
        """Feed one item again, alone, or dead-letter it once it has used its attempts (a
        death with other items counts, but only an item that died alone is poison)."""
        item = frame.itemize()[index]
        item.attempt += 1
        if not alone:
            item.shared += 1
        value = frame.values[index]
        attempts = item.attempt - item.shared  # deaths alone
        if attempts >= self.policy.max_attempts:
            self._dead_letter(Failure(
                unit=unit, error=f"{why} on each of {attempts} attempts", kind="poison",
                attempt=attempts, path=(), input=portable(value),
                item=frame.src + index, run_id=self.run_id))
            self._settle_item(frame, item, now, progress=False)
            return
        self.retries += 1
        retry = Frame(next(self.frame_ids), frame.src + index, [value], now,
                      attempt=item.attempt, origin=(frame, index))
        self.frames[retry.id] = retry
        frame.retries.append(retry.id)
        self.fed_records += 1
        self.out.append(Send(retry.id, fresh(retry.id, [value], item.attempt), retry=True))

    def _send_group(self, owner: Frame, indices: Sequence[int], unit: str, why: str,
                    now: float) -> None:
        """Feed items ``indices`` of ``owner`` again, together in one frame (one alone as a
        single); each has had a death shared with others, which is no item's fault."""
        if len(indices) == 1:  # its shared deaths are counted: what comes now is alone
            self._retry_or_poison(owner, indices[0], unit, why, now, alone=True)
            return
        items = owner.itemize()
        for index in indices:
            items[index].attempt += 1
        values = [owner.values[i] for i in indices]
        attempt = items[indices[0]].attempt
        retry = Frame(next(self.frame_ids), owner.src + indices[0], values, now,
                      attempt=attempt, origin=(owner, indices[0]))
        retry.group = tuple(indices)
        self.frames[retry.id] = retry
        owner.retries.append(retry.id)
        self.retries += 1
        self.fed_records += len(values)
        self.out.append(Send(retry.id, fresh(retry.id, values, attempt), retry=True))

    def _group_died(self, frame: Frame, unit: str, why: str, now: float) -> None:
        """A worker died holding a group: its items not yet settled go again, narrower."""
        assert frame.origin is not None and frame.group is not None
        owner = frame.origin[0]
        items = owner.itemize()
        held = [i for i in frame.group
                if not items[i].settled and items[i].attempt == frame.attempt]
        self.frames.pop(frame.id, None)
        for index in held:
            items[index].shared += 1
        self._send_groups(owner, held, unit, why, now)

    def _send_groups(self, owner: Frame, indices: Sequence[int], unit: str, why: str,
                     now: float) -> None:
        """Feed items ``indices`` of ``owner`` again, whose worker died holding them: in
        about sqrt(n) groups of about sqrt(n), or one by one when a few."""
        if len(indices) <= GROUP_SINGLES:
            for index in indices:
                self._retry_or_poison(owner, index, unit, why, now, alone=True)
            return
        size = math.isqrt(len(indices) - 1) + 1  # ceil(sqrt): as many groups as in one
        for start in range(0, len(indices), size):
            self._send_group(owner, indices[start:start + size], unit, why, now)

    def _abort(self, error: BaseException) -> None:
        if self.aborted is None:
            self.aborted = error
            self.stopping = True
            self.out.append(Abort(error))


__all__ = ["GROUP_SINGLES", "KEEP_FAILURES", "Retries", "delivered_rows"]
