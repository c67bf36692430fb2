"""Which item each local worker runs, in memory it shares with the driver.

A worker writes, into its slot of an anonymous shared mapping the driver made before it
forked anything (workers, zygotes and their spares inherit it), the frame it took and then
the place in that frame of each item as the item starts (a reader of a sharded source, the
row of its shard it reads, as each row starts).  When a worker dies, the driver
reads its slot and names the item in its `Exited` (``died_in``), so the run core retries
that item alone and sends the rest of the frame on (`fitwork.engine.core.retries`), where
it would otherwise narrow the whole frame down.  Only a unit that runs one item at a time
marks items: a batch, or calls at once, leave the place unknown and their frames go whole.

A slot is ``(worker id, frame, place, row)``; slots are shared by worker ids modulo their
count, so a read whose worker id is not the dead worker's (a later worker took the slot)
names nothing.  The place is -1 between items (the frame's outputs are going out: a death
then is no item's).

Items are marked only in a unit whose workers have died in this run (the driver raises a
flag per stage, `Marks.want`): marking costs a call per item, a tenth of a no-op unit's
throughput (`bench/overhead.py`), and a unit that never kills never needs a name.  Its
first death is narrowed down as any unnamed death is.

After the stage flags, a ring of the shards (and pieces of them) whose rows go again as new
pieces (`Marks.stale`, from the core's `Stale`): a reader of its own still streaming one
stops at its next chunk (`Mark.is_stale`), where it went on handing every later row of the
shard, killers too, to the next unit while the new piece read them again.
"""

from __future__ import annotations

import mmap

SLOTS = 1 << 14
"""Worker slots in a run's mapping (32 bytes each; pages are committed only once touched)."""
STAGES = 512
"""Stage flags after the slots (a pipeline of more units marks none past these)."""
RING = 256
"""Stale (frame, offset) pairs the ring holds (an older one is forgotten: its reader, if
still reading, goes on as it would have)."""


class Marks:
    """A run's mapping of worker slots: the driver makes it, a worker binds its own slot."""

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self.ring = 4 * slots + STAGES  # the count of stale pairs, then the pairs
        self.memory = mmap.mmap(-1, 8 * (self.ring + 1 + 2 * RING))  # shared across fork
        self.cells = memoryview(self.memory).cast("q")

    def bind(self, worker: int, stage: int) -> Mark:
        """Worker ``worker``'s slot, for it (of stage ``stage``) to write in its process."""
        flag = 4 * self.slots + stage if stage < STAGES else None
        return Mark(self.cells, 4 * (worker % self.slots), worker, flag, self.ring)

    def want(self, stage: int) -> None:
        """Have the workers of stage ``stage`` mark their items from their next frame on."""
        if stage < STAGES:
            self.cells[4 * self.slots + stage] = 1

    def stale(self, frame: int, offset: int) -> None:
        """Item ``offset`` of frame ``frame`` goes again as new pieces: a reader still
        streaming it stops.  The pair is written before the count that publishes it."""
        cells, ring = self.cells, self.ring
        count = cells[ring]
        at = ring + 1 + 2 * (count % RING)
        cells[at], cells[at + 1] = frame, offset
        cells[ring] = count + 1

    def died_in(self, worker: int) -> tuple[int, int, int] | None:
        """The frame worker ``worker`` had taken, the place in it of the item it was
        running and the row of it (-1: not a reader's, or none started); None where not
        known (no item running, or its slot is another's now)."""
        cells, base = self.cells, 4 * (worker % self.slots)
        if cells[base] != worker:
            return None
        frame, place, row = cells[base + 1], cells[base + 2], cells[base + 3]
        if place < 0 or cells[base] != worker:
            return None
        return frame, place, row

    def close(self) -> None:
        """Unmap (the run is over: no worker writes any more)."""
        self.cells.release()
        self.memory.close()


class Mark:
    """One worker's slot."""

    __slots__ = ("base", "cells", "flag", "ring", "seen", "stale", "worker")

    def __init__(self, cells: memoryview, base: int, worker: int, flag: int | None,
                 ring: int) -> None:
        self.cells, self.base, self.worker, self.flag = cells, base, worker, flag
        self.ring, self.seen = ring, 0
        self.stale: set[tuple[int, int]] = set()

    def is_stale(self, frame: int, offset: int) -> bool:
        """Whether item ``offset`` of frame ``frame`` went again as new pieces (its stream
        is no longer wanted).  One read while nothing new is stale."""
        cells, ring = self.cells, self.ring
        count = cells[ring]
        if count != self.seen:
            for k in range(max(self.seen, count - RING), count):
                at = ring + 1 + 2 * (k % RING)
                self.stale.add((cells[at], cells[at + 1]))
            self.seen = count
        return (frame, offset) in self.stale

    def wanted(self) -> bool:
        """Whether the driver wants this worker's items marked (its unit has lost one)."""
        return self.flag is not None and self.cells[self.flag] == 1

    def took(self, frame: int) -> None:
        """The worker took frame ``frame`` and runs none of its items yet."""
        cells, base = self.cells, self.base
        cells[base + 2] = cells[base + 3] = -1
        cells[base + 1] = frame
        cells[base] = self.worker

    def running(self, place: int, row: int = -1) -> None:
        """The worker starts the item at ``place`` of its frame (across its segments): the
        ``row`` of a shard a reader handed on, if it is one."""
        self.cells[self.base + 3] = row
        self.cells[self.base + 2] = place

    def row(self, row: int) -> None:
        """The worker, a reader, starts row ``row`` of the shard it reads."""
        self.cells[self.base + 3] = row

    def between(self) -> None:
        """The worker runs no item now (its frame's outputs are going out)."""
        self.cells[self.base + 2] = self.cells[self.base + 3] = -1


__all__ = ["RING", "SLOTS", "Mark", "Marks"]
