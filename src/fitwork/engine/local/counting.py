"""Per-replica items in counted as items, not deliveries: the local driver's rule, as Ray's.

A worker counts an item in when it receives its frame, so a row delivered twice counts
twice: a death loses the frames its worker held, and the run core sends their rows again
from the first unit (`fitwork.engine.core.retries`), so every unit above the death runs
them again; a retry group is sent again whole, with its items still in flight in a peer.
As on Ray (`Summary.entered` in `fitwork.engine.ray.records`), the run's record gives
each worker's items in as counted here:

* from the frames it reported done (a frame lost with its worker is counted where its
  retry runs);
* a retry's item (its feed frame has an ``origin``) only if no frame of its unit was done
  with that item before (each feed frame's items done per stage, kept until it settles);
  once some of a feed frame's items were sent again, the frame's own items count by the
  same rule, since a worker may report the retry done before the original (its ``Done``
  comes on the control pipe, after the outputs it sent on).

Each item is then in once per unit however often delivered; the deliveries again are the
record's ``retries``.  Items out are counted the same way where the driver sees them
arrive: a frame a worker sent is counted out of it when the next unit's worker takes it (or
the driver reads it from the last channel), a retry's items only if its unit had not sent
them on before (a replica writing its outputs to a sink's part keeps its own count).  A
flat-map's children share their item's offset: a retry's child counts only if no child of
that item was done (sent on) in its unit before.  The core's live books keep the workers'
own counts (deliveries): queue depths are what was sent into a unit less what it took, and
frame sizing is items run per busy second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fitwork.engine.core.events import Done, Taken

WORKER_SHIFT = 32
"""A worker's frame ids start at its id shifted by this (`Worker.frame_ids`)."""
PRUNE_EVERY = 4096
"""Frames done between sweeps of the books of settled feed frames."""


class ItemCounts:
    """The items in and out of one local run's workers (see the module docstring)."""

    def __init__(self, stage_of: Callable[[int], int | None],
                 frames: Callable[[], dict[int, Any]]) -> None:
        self.stage_of = stage_of  # a worker's stage (None: unknown)
        self.frames = frames  # the core's feed frames not settled, by id
        self.held: dict[tuple[int, int], Sequence[tuple[int, Sequence[int]]]] = {}
        self.items_in: dict[int, int] = {}  # per worker
        self.items_out: dict[int, int] = {}  # per worker whose frames the driver saw taken
        # per feed frame (a retry's: its origin's): (stage, item indices) done there (a
        # stage's items sent on: under ``-1 - stage``)
        self.route: dict[int, list[tuple[int, Sequence[int]]]] = {}
        # the same per feed frame some of whose items were sent again, as sets per stage
        # (built from its route once): a set per call was the route's length each time, and
        # a sharded run's route grows by a chunk a call (7 s of a 10 s run with 0.1% rows
        # that kill once)
        self.done_sets: dict[int, dict[int, set[int]]] = {}
        # per retry frame: its origin feed frame and the origin's index of each offset
        self.origin: dict[int, tuple[int, list[int]]] = {}
        self.stale: dict[int, tuple[int, list[int]]] = {}  # retries of settled frames
        self.retried: set[int] = set()  # feed frames some of whose items were sent again
        self.done_frames = 0

    def sent(self, frame: int) -> None:
        """The core sends feed frame ``frame``: if a retry, note whose items it holds."""
        books = self.frames().get(frame)
        if books is not None and books.origin is not None:
            owner = books.origin[0].id
            self.origin[frame] = (owner, [books.index(o) for o in range(books.count)])
            self.retried.add(owner)

    def taken(self, event: Taken) -> None:
        """A worker holds a frame: its parts, counted in when it is done, and out of the
        worker that sent it now."""
        self.held[(event.worker, event.frame)] = event.parts
        stage = self.stage_of(event.worker)
        if stage:
            self.delivered(event.frame, event.parts)

    def delivered(self, frame: int, parts: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Frame ``frame``, sent by a worker, arrived (holding ``parts``): its items out."""
        sender = frame >> WORKER_SHIFT
        stage = self.stage_of(sender)
        if stage is not None:
            self.items_out[sender] = self.items_out.get(sender, 0) + sum(
                self.entered(-1 - stage, feed, offsets) for feed, offsets in parts)

    def done(self, event: Done) -> None:
        """A worker reported frames done: count their items in."""
        worker = event.worker
        stage = self.stage_of(worker)
        count = self.items_in.get(worker, 0)
        for frame in event.frames:
            parts = self.held.pop((worker, frame), None)
            if parts is not None and stage is not None:
                count += sum(self.entered(stage, feed, offsets) for feed, offsets in parts)
        self.items_in[worker] = count
        self.done_frames += len(event.frames)
        if self.done_frames >= PRUNE_EVERY:
            self.prune()

    def entered(self, stage: int, feed: int, offsets: Sequence[int]) -> int:
        """Items of feed frame ``feed`` at ``offsets`` done at ``stage`` (or sent on from
        ``-1 - stage``) that count: a fresh frame's all, a retry's those not done there
        before."""
        origin = self.origin.get(feed) or self.stale.get(feed)
        if origin is None:
            if feed not in self.retried:  # no copy of its items was sent: all count
                self.route.setdefault(feed, []).append((stage, offsets))
                return len(offsets)
            owner, items = feed, list(offsets)  # a retry's copy may have been done first
        else:
            owner, index = origin
            items = [index[o] for o in offsets]
        done = self.done_at(owner, stage)
        count = sum(1 for i in items if i not in done)
        done.update(items)
        return count

    def done_at(self, feed: int, stage: int) -> set[int]:
        """The items of feed frame ``feed`` done at ``stage`` so far (its route, turned into
        sets per stage the first time it is asked)."""
        stages = self.done_sets.get(feed)
        if stages is None:
            stages = {}
            for at, done in self.route.pop(feed, ()):
                stages.setdefault(at, set()).update(done)
            self.done_sets[feed] = stages
        return stages.setdefault(stage, set())

    def ended(self, worker: int) -> None:
        """A worker is gone: the frames it held are no one's (the core retries them)."""
        for key in [k for k in self.held if k[0] == worker]:
            del self.held[key]

    def prune(self) -> None:
        """Forget the books of feed frames settled (a retry of one: kept one sweep more,
        for a copy still on its way)."""
        self.done_frames = 0
        pending = self.frames()
        self.stale = {f: o for f, o in self.origin.items() if o[0] not in pending}
        owners = {o[0] for o in self.stale.values()}
        self.route = {f: r for f, r in self.route.items() if f in pending or f in owners}
        self.done_sets = {f: d for f, d in self.done_sets.items()
                          if f in pending or f in owners}
        self.origin = {f: o for f, o in self.origin.items() if o[0] in pending}
        self.retried = {f for f in self.retried if f in pending or f in owners}


__all__ = ["ItemCounts"]
