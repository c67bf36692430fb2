"""The run core on its own: event sequences in, instructions out, invariants under chaos."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fitwork
from fitwork import Pipeline, unit
from fitwork.engine import shell as shell_module
from fitwork.engine.core import (
    Abort,
    Arrived,
    Counters,
    DeadLetter,
    Done,
    Drain,
    Emit,
    Exited,
    Fed,
    Finished,
    FrameSizes,
    Lost,
    Measured,
    Policy,
    Ready,
    Resize,
    RestoreCredits,
    Retire,
    RunCore,
    Send,
    Spawn,
    Taken,
    Tick,
)
from fitwork.engine.segment import Segment, settle, split
from fitwork.engine.shell import stages_of
from fitwork.io.shards import Slice
from fitwork.placement import Placement
from fitwork.workload.kernel import Failed, Kernel


@unit
def inc(x: int) -> int:
    return x + 1


@unit(kind="filter")
def even(x: int) -> bool:
    return x % 2 == 0


@unit
def fan(x: int) -> Any:
    for i in range(x % 4):
        yield x * 10 + i


@unit
def boom_on_seven(x: int) -> int:
    if x % 7 == 0:
        raise ValueError("seven")
    return x


UNITS = {"inc": inc, "even": even, "fan": fan, "boom": boom_on_seven}


def of(instructions: list[Any], kind: type) -> list[Any]:
    return [i for i in instructions if isinstance(i, kind)]


def one_stage(policy: Policy) -> tuple[RunCore, int]:
    pipeline = Pipeline(inc)
    core = RunCore(stages_of(pipeline, Placement.declared(pipeline)),
                   Placement.declared(pipeline), policy, "r", 0.0)
    (spawn,) = of(core.start(), Spawn)
    core.handle(Ready(spawn.worker, 1, 0.0))
    return core, spawn.worker


def test_the_happy_path_keeps_books_per_frame() -> None:
    core, worker = one_stage(Policy())
    (send,) = of(core.handle(Fed([1, 2, 3], 0.1)), Send)
    frame, _, offsets, paths, exps, values = send.segment
    assert list(offsets) == [0, 1, 2] and paths is None and exps is None and values == [1, 2, 3]
    core.handle(Taken(worker, frame, [(frame, offsets)], 0.2))
    core.handle(Done(worker, [frame], (), (), 0.3))
    out = core.handle(Arrived([Segment(frame, 0, offsets, None, None, [2, 3, 4])], 0.4))
    assert [e.values for e in of(out, Emit)] == [[2, 3, 4]]
    assert core.handle(Fed([], 0.5, end=True)) == [Finished()]
    assert core.completed == 3 and core.frames == {}
    assert core.latencies == [(pytest.approx(0.3), 3)]


@unit(batch_size=8)
def grouped(batch: list[int]) -> list[int]:
    return batch


def test_a_batched_stage_is_drained_once_everything_before_it_is_through() -> None:
    pipeline = Pipeline(inc, grouped)
    placement = Placement.declared(pipeline)
    core = RunCore(stages_of(pipeline, placement), placement, Policy(), "r", 0.0)
    first, second = (s.worker for s in of(core.start(), Spawn))
    for worker in (first, second):
        core.handle(Ready(worker, 1, 0.0))
    (send,) = of(core.handle(Fed([1, 2, 3], 0.1)), Send)
    assert not of(core.handle(Fed([], 0.2, end=True)), Drain)  # stage 0 still has them
    offsets = send.segment[2]
    assert not of(core.handle(Taken(first, send.frame, [(send.frame, offsets)], 0.3)), Drain)
    # stage 0 is through: its outputs are all in the batched stage's channel
    out = core.handle(Done(first, [send.frame], (), (), 0.4, Counters(items_in=3, items_out=3)))
    assert of(out, Drain) == [Drain(1)]
    assert not of(core.handle(Tick(0.5)), Drain)  # said once


def test_a_retried_item_delivers_once_though_both_attempts_arrive() -> None:
    core, worker = one_stage(Policy(max_attempts=3))
    (send,) = of(core.handle(Fed([5, 6], 0.0)), Send)
    frame, _, offsets, *_ = send.segment
    core.handle(Taken(worker, frame, [(frame, offsets)], 0.1))
    # the worker pushed its outputs, then died before saying so: both items are retried
    out = core.handle(Exited(worker, clean=False, now=0.2, cause="signal SIGKILL"))
    retries, spawns = of(out, Send), of(out, Spawn)  # two items: one by one
    assert [r.segment[5] for r in retries] == [[5], [6]] and all(r.retry for r in retries)
    assert len(spawns) == 1
    late = core.handle(Arrived([Segment(frame, 0, [0, 1], None, None, [6, 7])], 0.3))
    assert [v for e in of(late, Emit) for v in e.values] == [6, 7]  # first delivery counts
    for retry in retries:
        again = core.handle(Arrived([Segment(retry.frame, retry.segment[1], [0], None, None,
                                      [retry.segment[5][0] + 1])], 0.4))
        assert of(again, Emit) == []  # the same (item, path): not delivered twice
    assert core.completed == 2 and not core.frames and core.retries == 2


def test_a_retry_group_whose_worker_dies_narrows_down_to_the_killer_alone() -> None:
    core, worker = one_stage(Policy(max_attempts=2))
    (send,) = of(core.handle(Fed(list(range(30)), 0.0)), Send)
    core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], 0.0))
    out = core.handle(Exited(worker, clean=False, now=0.1, cause="signal SIGKILL"))
    (group,) = of(out, Send)  # the frame's 30 items, one retry frame
    assert group.retry and group.segment[5] == list(range(30)) and group.segment[1] == 1
    worker = of(out, Spawn)[0].worker
    now, pending, letters, emitted = 0.2, [group], [], []
    while pending:  # item 5 kills every worker that holds it; the rest complete
        send = pending.pop(0)
        values = send.segment[5]
        core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], now))
        if 5 in values:
            out = core.handle(Exited(worker, clean=False, now=now, cause="signal SIGKILL"))
            worker = of(out, Spawn)[0].worker
            pending += of(out, Send)
            letters += of(out, DeadLetter)
        else:
            out = core.handle(Arrived([Segment(send.frame, send.segment[1], send.segment[2], None,
                                        None, values)], now))
            emitted += [v for e in of(out, Emit) for v in e.values]
            core.handle(Done(worker, [send.frame], (), (), now))
        now += 0.1
    assert sorted(emitted) == [i for i in range(30) if i != 5]
    (letter,) = letters
    assert letter.failure.kind == "poison" and letter.failure.input == 5
    assert letter.failure.attempt == 2  # deaths alone; the shared ones are no one's fault
    assert core.completed == 30 and not core.frames
    # the group; 5 groups of 6 (about sqrt); 5's as 2 of 3; 5's 3 one by one; 5 once more
    # (its deaths alone are then 2 = max_attempts)
    assert core.retries == 1 + 5 + 2 + 3 + 1


def test_an_item_that_kills_max_attempts_workers_is_poison() -> None:
    core, worker = one_stage(Policy(max_attempts=2))
    (send,) = of(core.handle(Fed([9], 0.0)), Send)
    core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], 0.0))
    out = core.handle(Exited(worker, clean=False, now=0.1, cause="signal SIGSEGV"))
    (retry,) = of(out, Send)
    (spawn,) = of(out, Spawn)
    core.handle(Taken(spawn.worker, retry.frame, [(retry.frame, range(1))], 0.2))
    out = core.handle(Exited(spawn.worker, clean=False, now=0.3, cause="signal SIGSEGV"))
    (letter,) = of(out, DeadLetter)
    assert letter.failure.kind == "poison" and letter.failure.attempt == 2
    assert letter.failure.item == 0 and "SIGSEGV" in letter.failure.error
    assert core.poisoned == 1 and core.completed == 1 and not of(out, Send)


def test_ordered_release_waits_for_the_oldest_frame() -> None:
    core, _ = one_stage(Policy(ordered=True))
    first = of(core.handle(Fed([1], 0.0)), Send)[0]
    second = of(core.handle(Fed([2], 0.0)), Send)[0]
    out = core.handle(Arrived([Segment(second.frame, 0, range(1), None, None, ["b"])], 0.1))
    assert of(out, Emit) == []
    out = core.handle(Arrived([Segment(first.frame, 0, range(1), None, None, ["a"])], 0.2))
    assert [e.values for e in of(out, Emit)] == [["a"], ["b"]]


def test_flat_map_weights_settle_a_frame_in_any_order() -> None:
    core, _ = one_stage(Policy())
    (send,) = of(core.handle(Fed([3], 0.0)), Send)
    kernel = Kernel(fan)
    out, back, _ = settle(kernel, send.segment, [kernel.call(3)], 0)
    assert back is None and out is not None and out[5] == [30, 31, 32]
    pieces = split(out, 1)
    for piece in reversed(pieces[1:]):
        core.handle(Arrived([piece], 0.1))
        assert core.completed == 0
    core.handle(Arrived([pieces[0]], 0.2))
    assert core.completed == 1


def test_room_respects_frames_in_flight_and_the_ordered_window() -> None:
    core, _ = one_stage(Policy(max_frames=2))
    core.handle(Fed([1], 0.0))
    core.handle(Fed([2], 0.0))
    assert core.room() == 0
    ordered, _ = one_stage(Policy(ordered=True, ordered_window=3, max_frame=8))
    ordered.sizes, ordered.stage_items = [8], [1]  # measured: past the first probe
    assert ordered.room() == 3
    ordered.handle(Fed([1, 2], 0.0))
    assert ordered.room() == 1


def test_a_plain_first_unit_is_probed_with_one_frame_a_replica_until_it_reports() -> None:
    """Frames are sized from the first unit's measure: before it, one frame a replica, not
    a channel full of one-item frames (each costs as much as a full one)."""
    core, _ = one_stage(Policy(max_frames=64))
    assert core.room() == 1
    core.handle(Fed([1], 0.0))
    assert core.room() == 0
    core.stage_items = [1]  # the first report is in
    assert core.room() >= 1
    pipeline = Pipeline(unit(batch_size=8, name="batched")(lambda xs: xs))
    placement = Placement.declared(pipeline)
    batched = RunCore(stages_of(pipeline, placement), placement, Policy(max_frames=64), "r",
                      0.0)
    batched.start()
    assert batched.room() == 8  # a frame holds a batch from the first: none waits to fill
    batched.handle(Fed([1], 0.0))
    assert batched.room() == 8  # no probe: the batch size is known


def test_resize_spawns_and_retires_and_a_clean_exit_takes_the_retirement() -> None:
    pipeline = Pipeline(inc)
    placement = Placement.declared(pipeline, {"inc": 2})
    core = RunCore(stages_of(pipeline, placement), placement, Policy(), "r", 0.0)
    first, second = (s.worker for s in of(core.start(), Spawn))
    assert len(of(core.handle(Resize(0, 4, 1.0)), Spawn)) == 2 and core.live(0) == 4
    retired = of(core.handle(Resize(0, 3, 2.0)), Retire)
    assert len(retired) == 1 and core.live(0) == 3
    other = first if retired[0].worker != first else second
    out = core.handle(Exited(other, clean=True, now=3.0))  # it took the stop marker
    assert not of(out, Spawn) and core.live(0) == 3


def test_a_quiet_pipeline_with_items_pending_restores_credits_and_retries() -> None:
    core, _ = one_stage(Policy(quiet_after=1.0))
    core.handle(Fed([1, 2], 0.0))
    assert of(core.handle(Tick(0.5)), RestoreCredits) == []
    out = core.handle(Tick(2.0))
    assert of(out, RestoreCredits) and len(of(out, Send)) == 2


def test_max_failures_aborts_with_the_last_failure_named() -> None:
    core, worker = one_stage(Policy(max_failures=0))
    (send,) = of(core.handle(Fed([7], 0.0)), Send)
    kernel = Kernel(boom_on_seven)
    results, failed = kernel.results([7])
    _, back, failures = settle(kernel, send.segment, results, failed)
    out = core.handle(Done(worker, [], [back], failures, 0.1))
    (abort,) = of(out, Abort)
    assert "max_failures=0" in str(abort.error) and "seven" in str(abort.error)


def test_outputs_lost_with_another_process_never_make_an_item_poison() -> None:
    """On Ray the last unit's outputs belong to the replica that called it; when that
    replica dies of another item, the outputs go with it.  The items that made them are
    sent again however often that happens, and none is poison for it."""
    core, worker = one_stage(Policy(max_attempts=2))
    (send,) = of(core.handle(Fed([9], 0.0)), Send)
    now = 0.0
    for _ in range(4):  # twice max_attempts
        now += 0.1
        core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], now))
        out = core.handle(Lost(worker, send.frame, now, "outputs lost (OwnerDiedError)",
                               blame=False))
        assert of(out, DeadLetter) == []
        (send,) = of(out, Send)
        assert send.retry and send.segment[5] == [9]
    out = core.handle(Arrived([Segment(send.frame, send.segment[1], [0], None, None, [10])],
                              now + 0.1))
    assert [e.values for e in of(out, Emit)] == [[10]]
    assert core.poisoned == 0 and core.completed == 1 and not core.frames
    # the same losses blamed on the item (its worker died holding it) do make it poison
    core, worker = one_stage(Policy(max_attempts=2))
    (send,) = of(core.handle(Fed([9], 0.0)), Send)
    for k in range(2):
        core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], 0.1 * k))
        out = core.handle(Lost(worker, send.frame, 0.1 * k + 0.05, "died"))
        sends = of(out, Send)
        send = sends[0] if sends else send
    assert [d.failure.kind for d in of(out, DeadLetter)] == ["poison"]


def test_a_death_that_lost_only_its_item_does_not_shrink_the_frames() -> None:
    """A process that died in one item the engine names (`Lost.named`: a Ray replica's
    forked child, the rest of its frame gone on) is a death of the unit, but it took no
    other item with it: the stage's frames keep the size its work gives them.  A death that
    lost its frame shrinks them to hold about a tenth of a death's worth of items."""
    sizes = {}
    for named in (True, False):
        core, worker = one_stage(Policy(frame_time=0.01, max_frame=1000))
        (send,) = of(core.handle(Fed(list(range(100)), 0.0)), Send)
        core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], 0.1))
        lost = [5] if named else list(range(100))
        out = core.handle(Lost(worker, send.frame, 0.2, "the unit's process died",
                               parts=[(send.frame, lost)], stage=0, died=True, named=named))
        assert len(of(out, Send)) == 1  # the item alone, or the frame as one group
        out = core.handle(Measured(worker, Counters(items_in=99, items_out=99, busy_s=0.0099),
                                   0.3))  # 0.1 ms an item: 100 to a 10 ms frame
        assert core.restarts == 1 and core.stage_deaths == [1]
        sizes[named] = [f.sizes[0] for f in of(out, FrameSizes)]
    assert sizes == {True: [100], False: [10]}


def test_a_worker_that_died_in_a_named_item_retries_it_alone_and_sends_the_rest_on() -> None:
    """A local worker marks the item it runs (`Exited.died_in`: the frame it took, the
    item's place in it): that item alone is retried (its segments say attempt 1, so it runs
    alone); the frame's other items go again together in a frame no unit runs alone
    (attempt 0), their earlier weight not counted twice.  A row that kills every time then
    costs one death shared and ``max_attempts`` alone, where a frame narrowed down by
    groups cost a death per level."""
    core, worker = one_stage(Policy(max_attempts=2))
    (send,) = of(core.handle(Fed(list(range(30)), 0.0)), Send)
    core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], 0.0))
    out = core.handle(Exited(worker, clean=False, now=0.1, cause="signal SIGKILL",
                             died_in=(send.frame, 5, -1)))
    single, rest = of(out, Send)
    assert single.retry and single.segment[5] == [5] and single.segment[1] == 1
    assert rest.retry and rest.segment[5] == [i for i in range(30) if i != 5]
    assert rest.segment[1] == 0  # runs beside other frames
    assert core.named_deaths == [1] and core.stage_deaths == [1]
    worker = of(out, Spawn)[0].worker
    # items 0-4 ran before the death; had their outputs got out, they arrive beside the
    # rest's: each item is emitted once
    emitted = []
    for frame, offsets in ((send.frame, range(5)), (rest.frame, rest.segment[2])):
        values = [send.segment[5][i] for i in offsets] if frame == send.frame \
            else rest.segment[5]
        out = core.handle(Arrived([Segment(frame, 0, offsets, None, None, values)], 0.2))
        emitted += [v for e in of(out, Emit) for v in e.values]
    assert sorted(emitted) == [i for i in range(30) if i != 5]
    now, send, letters = 0.3, single, []
    while send is not None:  # item 5 kills every worker, alone, until it is poison
        core.handle(Taken(worker, send.frame, [(send.frame, range(1))], now))
        out = core.handle(Exited(worker, clean=False, now=now, cause="signal SIGKILL",
                                 died_in=(send.frame, 0, -1)))
        letters += of(out, DeadLetter)
        sends = of(out, Send)
        send = sends[0] if sends else None
        worker = of(out, Spawn)[0].worker
        now += 0.1
    (letter,) = letters
    assert letter.failure.kind == "poison" and letter.failure.attempt == 2
    assert core.restarts == 1 + 2  # one shared, then max_attempts alone
    assert core.completed == 30 and not core.frames


def test_where_the_core_sends_a_frame_s_rest_on_a_named_death_shrinks_frames() -> None:
    """A local worker's named death sends the rest of its frame through the core again, and
    the items before the killer run again: with ``named_shrink`` it shrinks the stage's
    frames as a death that lost its frame does (100 items to a 10 ms frame, 10 after one
    death in 100 items); without it (Ray's), it leaves them at 100."""
    sizes = {}
    for shrink in (True, False):
        core, worker = one_stage(Policy(frame_time=0.01, max_frame=1000, named_shrink=shrink))
        (send,) = of(core.handle(Fed(list(range(100)), 0.0)), Send)
        core.handle(Taken(worker, send.frame, [(send.frame, send.segment[2])], 0.1))
        core.handle(Exited(worker, clean=False, now=0.2, cause="signal SIGKILL",
                           died_in=(send.frame, 5, -1)))
        out = core.handle(Measured(worker, Counters(items_in=99, items_out=99,
                                                    busy_s=0.0099), 0.3))
        sizes[shrink] = [f.sizes[0] for f in of(out, FrameSizes)]
    assert sizes == {True: [10], False: [100]}


def test_a_shard_s_rows_lost_with_another_process_go_again_as_they_were() -> None:
    """A shard whose reader died goes again as one open piece of the rows it had not
    delivered (not split: that waits for a death of the piece); a piece whose outputs were
    lost is sent again whole, on its attempt: it is neither bisected nor brought nearer to
    poison; its rows then complete once."""
    source = fitwork.Source.of([], read_rows)
    pipeline = Pipeline([source.reader(), unit(tag_inc.fn, name="inc")], name="sharded")
    placement = Placement.declared(pipeline)
    core = RunCore(stages_of(pipeline, placement), placement, Policy(max_attempts=2), "r",
                   0.0)
    spawns = of(core.start(), Spawn)
    for spawn in spawns:
        core.handle(Ready(spawn.worker, 1, 0.0))
    reader = spawns[0].worker
    rows = [(i, i) for i in range(3)]
    (send,) = of(core.handle(Fed([rows], 0.0)), Send)
    core.handle(Taken(reader, send.frame, [(send.frame, send.segment[2])], 0.0))
    out = core.handle(Exited(reader, clean=False, now=0.1, cause="signal SIGKILL"))
    pieces = of(out, Send)  # a first death: the rows not delivered as one open piece
    assert [(p.segment[5][0].lo, p.segment[5][0].hi) for p in pieces] == [(0, None)]
    reader = of(out, Spawn)[0].worker
    core.handle(Ready(reader, 1, 0.1))
    (head,) = pieces
    for k in range(4):
        now = 0.2 + 0.1 * k
        core.handle(Taken(reader, head.frame, [(head.frame, head.segment[2])], now))
        out = core.handle(Lost(reader, head.frame, now, "outputs lost", blame=False))
        (head,) = of(out, Send)
        assert (head.segment[5][0].lo, head.segment[5][0].hi) == (0, None)
        assert head.segment[1] == pieces[0].segment[1] and of(out, DeadLetter) == []
    kernels = [Kernel(u) for u in pipeline.units]
    emitted = []
    for send in (head,):
        results, failed = kernels[0].results(send.segment[5])
        read, back, _ = settle(kernels[0], send.segment, results, failed)
        done: list[Segment] = []
        if read is not None:
            results, failed = kernels[1].results(read.values)
            inced, _, _ = settle(kernels[1], read, results, failed)
            assert inced is not None
            done.append(inced)
        out = core.handle(Arrived(done, 1.0, [back] if back else []))
        emitted += [v for e in of(out, Emit) for v in e.values]
    assert sorted(emitted) == [(i, i + 1) for i in range(3)]
    assert core.poisoned == 0 and core.completed == 1 and not core.frames


class AdversarialEngine:
    """A model of a channel-based engine whose workers die at the worst moments.

    Workers take frames, process them with the real kernel, and sometimes die: before
    sending anything, or after pushing their outputs downstream but before saying so (so
    outputs arrive twice once the core retries).  Deliveries happen in a random order.
    """

    def __init__(self, pipeline: Pipeline, items: list[int], policy: Policy,
                 rng: random.Random, death: float, ghost: float) -> None:
        self.pipeline, self.rng, self.death, self.ghost = pipeline, rng, death, ghost
        placement = Placement.declared(pipeline, {u.name: 2 for u in pipeline.units})
        self.core = RunCore(stages_of(pipeline, placement), placement, policy, "m", 0.0)
        self.kernels = [Kernel(u) for u in pipeline.units]
        self.queues: list[list[tuple[int, list[Any]]]] = [[] for _ in pipeline.units]
        self.workers: dict[int, int] = {}
        self.items = iter(items)
        self.emitted: list[Any] = []
        self.spans: list[tuple[tuple[int, int], list[Any]]] = []
        self.letters: list[Any] = []
        self.ids = itertools.count(1 << 30)
        self.now = 0.0
        self.apply(self.core.start())

    def apply(self, instructions: list[Any]) -> None:
        for instruction in instructions:
            if isinstance(instruction, Spawn):
                self.workers[instruction.worker] = instruction.stage
                self.apply(self.core.handle(Ready(instruction.worker, 1, self.now)))
            elif isinstance(instruction, Send):
                self.queues[0].append((instruction.frame, [instruction.segment]))
            elif isinstance(instruction, Emit):
                self.emitted.extend(instruction.values)
                if instruction.span is not None:
                    self.spans.append((instruction.span, list(instruction.values)))
            elif isinstance(instruction, DeadLetter):
                self.letters.append(instruction.failure)
            elif isinstance(instruction, Abort):
                raise instruction.error

    def step(self) -> None:
        self.now += 0.001
        room = self.core.room()
        if room and self.rng.random() < 0.5:
            batch = list(itertools.islice(self.items, self.rng.randint(1, max(1, room))))
            self.apply(self.core.handle(Fed(batch, self.now, end=not batch)))
            return
        busy = [s for s, q in enumerate(self.queues) if q]
        if not busy:
            self.apply(self.core.handle(Tick(self.now)))
            return
        stage = self.rng.choice(busy)
        queue = self.queues[stage]
        frame_id, segments = queue.pop(self.rng.randrange(len(queue)))
        worker = self.rng.choice([w for w, s in self.workers.items() if s == stage])
        parts = [(s[0], s[2]) for s in segments]
        self.apply(self.core.handle(Taken(worker, frame_id, parts, self.now)))
        dies = self.rng.random() < self.death
        if dies and self.rng.random() >= self.ghost:
            self._die(worker)
            return
        kernel, outputs, returns, failures = self.kernels[stage], [], [], []
        for segment in segments:
            results, failed = kernel.results(segment[5])
            out, back, bad = settle(kernel, segment, results, failed)
            outputs += [out] if out else []
            returns += [back] if back else []
            failures += bad
        if stage + 1 < len(self.queues):
            for piece in (p for s in outputs for p in split(s, self.rng.randint(1, 3))):
                self.queues[stage + 1].append((next(self.ids), [piece]))
        elif outputs:
            self.apply(self.core.handle(Arrived(outputs, self.now)))
        if dies:  # pushed its outputs, then died before its report
            self._die(worker)
            return
        self.apply(self.core.handle(Done(worker, [frame_id], returns, failures, self.now)))

    def _die(self, worker: int) -> None:
        del self.workers[worker]
        self.apply(self.core.handle(Exited(worker, clean=False, now=self.now, cause="chaos")))

    def run(self) -> None:
        for _ in range(200_000):
            if self.core.finished:
                return
            self.step()
            assert self.core.in_flight <= self.core.policy.max_frames
        raise AssertionError("the model did not finish")


pipelines = st.lists(st.sampled_from(sorted(UNITS)), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=pipelines, count=st.integers(0, 60), ordered=st.booleans(),
       seed=st.integers(0, 10**6), death=st.sampled_from([0.0, 0.05, 0.2]),
       ghost=st.sampled_from([0.0, 0.5, 1.0]), spans=st.booleans())
def test_invariants_hold_whatever_dies_when(names: list[str], count: int, ordered: bool,
                                            seed: int, death: float, ghost: float,
                                            spans: bool) -> None:
    pipeline = Pipeline([UNITS[n] for n in names], name="model") \
        if len(set(names)) == len(names) else Pipeline(
            [unit(UNITS[n].fn, name=f"{n}{i}", kind=UNITS[n].kind) for i, n in enumerate(names)])
    items = list(range(count))
    policy = Policy(ordered=ordered, max_attempts=4, max_frames=6, ordered_window=16,
                    spans=spans)
    model = AdversarialEngine(pipeline, items, policy, random.Random(seed), death, ghost)
    model.run()
    core = model.core
    lost = {f.item for f in model.letters if f.kind == "poison"}
    poison = [f for f in model.letters if f.kind == "poison"]
    # 1, 2: every item settled once; outputs exactly once, none missing
    assert core.completed == count and not core.frames
    _exactly_once(pipeline, items, lost, model.emitted, ordered)
    # 4: attempts bounded; the last death makes poison
    assert all(f.attempt == policy.max_attempts for f in poison)
    assert core.retries <= count * policy.max_attempts
    errors = [f for f in model.letters if f.kind == "error"]
    assert all(f.unit.startswith("boom") and f.input % 7 == 0 for f in errors)
    # 7: with spans, every source item is in exactly one span, and a span's outputs are
    # all its items' outputs (what a journal may mark done)
    if spans:
        covered = sorted(i for (start, n), _ in model.spans for i in range(start, start + n))
        assert covered == items
        for (start, n), values in model.spans:
            want = Counter(out for i in range(start, start + n) if i not in lost
                           for out in _serial(pipeline, i))
            assert Counter(values) - want <= Counter(
                out for i in lost for out in _serial(pipeline, i))
            assert want - Counter(values) == Counter()
    else:
        assert model.spans == []


def _exactly_once(pipeline: Pipeline, items: list[int], poisoned: set[int],
                  emitted: list[Any], ordered: bool) -> None:
    """Every output of a settled item emitted once (in order if asked); a poisoned item may
    have passed some outputs on before it was given up, but none twice."""
    expected = [out for i in items if i not in poisoned for out in _serial(pipeline, i)]
    extra = Counter(emitted) - Counter(expected)
    assert Counter(expected) - Counter(emitted) == Counter()
    assert extra <= Counter(out for i in poisoned for out in _serial(pipeline, i))
    if ordered and not extra:
        assert emitted == expected


def _serial(pipeline: Pipeline, item: int) -> list[Any]:
    """What a run yields for ``item``: the serial reference, less the outputs whose path
    failed somewhere (those are dead-lettered one by one, not the whole item)."""
    values = [item]
    for stage in pipeline.units:
        kernel, after = Kernel(stage), []
        for value in values:
            result = kernel.result(value)
            if type(result) is not Failed:
                after.extend(kernel.outputs(value, result))
        values = after
    return values


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=pipelines, count=st.integers(1, 300), ordered=st.booleans(),
       seed=st.integers(0, 1000))
def test_the_simulated_engine_keeps_the_invariants_under_random_kills(
        names: list[str], count: int, ordered: bool, seed: int) -> None:
    seen: list[RunCore] = []
    pipeline = Pipeline([unit(UNITS[n].fn, name=f"{n}{i}", kind=UNITS[n].kind)
                         for i, n in enumerate(names)])
    items = list(range(count))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shell_module, "RunCore", _checked(seen))
        with fitwork.run(pipeline, items, engine="sim", kill_rate=2.0, seed=seed,
                         ordered=ordered, max_attempts=6) as result:
            outputs = list(result)
    record = result.record
    lost = {f.item for f in record.failed_items if f.kind == "poison"}
    _exactly_once(pipeline, items, lost, outputs, ordered)
    assert record.items_completed == count
    assert seen and seen[0].settled


def _checked(seen: list[RunCore]) -> Callable[..., RunCore]:
    class Checked(RunCore):
        def handle(self, event: Any) -> list[Any]:
            out = super().handle(event)
            assert self.in_flight <= self.policy.max_frames
            if self.policy.ordered:
                assert self.fed - self.released <= self.policy.ordered_window
            return out

    def make(*args: Any, **kwargs: Any) -> RunCore:
        core = Checked(*args, **kwargs)
        seen.append(core)
        return core

    return make


# -- rows that kill the worker that touches them ------------------------------------------


@unit
def tag_inc(row: tuple[int, int]) -> tuple[int, int]:
    return (row[0], row[1] + 1)


@unit(kind="filter")
def tag_even(row: tuple[int, int]) -> bool:
    return row[1] % 2 == 0


@unit
def tag_fan(row: tuple[int, int]) -> Any:
    for i in range(row[0] % 3):
        yield (row[0], row[1] * 10 + i)


TAGGED = {"inc": tag_inc, "even": tag_even, "fan": tag_fan}


def read_rows(shard: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return list(shard)


class PoisonEngine(AdversarialEngine):
    """The adversarial engine, where some rows (``(row id, n)`` values) kill any worker of
    their stage that touches them: ``always`` every time, ``once`` the first time only.  A
    reader (sharded source) touches the rows it yields; other units the values they get."""

    def __init__(self, pipeline: Pipeline, items: list[Any], policy: Policy,
                 rng: random.Random, always: dict[int, int], once: dict[int, int]) -> None:
        super().__init__(pipeline, items, policy, rng, death=0.0, ghost=0.0)
        self.always, self.once = always, once  # row id -> the stage where it kills
        self.deaths = 0

    def kills(self, stage: int, rows: list[Any]) -> bool:
        for row in rows:
            rid = row[0]
            if self.always.get(rid) == stage:
                return True
            if self.once.get(rid) == stage:
                del self.once[rid]
                return True
        return False

    def step(self) -> None:
        self.now += 0.001
        room = self.core.room()
        if room and self.rng.random() < 0.5:
            batch = list(itertools.islice(self.items, self.rng.randint(1, max(1, room))))
            self.apply(self.core.handle(Fed(batch, self.now, end=not batch)))
            return
        busy = [s for s, q in enumerate(self.queues) if q]
        if not busy:
            self.apply(self.core.handle(Tick(self.now)))
            return
        stage = self.rng.choice(busy)
        queue = self.queues[stage]
        frame_id, segments = queue.pop(self.rng.randrange(len(queue)))
        worker = self.rng.choice([w for w, s in self.workers.items() if s == stage])
        self.apply(self.core.handle(Taken(worker, frame_id, [(s[0], s[2]) for s in segments],
                                          self.now)))
        kernel, outputs, returns, failures = self.kernels[stage], [], [], []
        touched: list[Any] = []
        for segment in segments:
            results, failed = kernel.results(segment[5])
            if self.core.stages[stage].slices:  # a reader touches each row it reads
                touched += [row for v in segment[5]
                            for row in (v.value[v.lo:v.hi] if type(v) is Slice else v)]
            else:
                touched += segment[5]
            out, back, bad = settle(kernel, segment, results, failed)
            outputs += [out] if out else []
            returns += [back] if back else []
            failures += bad
        if self.kills(stage, touched):
            self.deaths += 1
            self._die(worker)
            return
        if stage + 1 < len(self.queues):
            for piece in (p for s in outputs for p in split(s, self.rng.randint(1, 3))):
                self.queues[stage + 1].append((next(self.ids), [piece]))
        elif outputs:
            self.apply(self.core.handle(Arrived(outputs, self.now)))
        self.apply(self.core.handle(Done(worker, [frame_id], returns, failures, self.now)))


def _reaches(units: list[Any], row: Any, index: int) -> bool:
    """Whether ``row`` (or a value made of it) enters ``units[index]``."""
    values = [row]
    for stage in units[:index]:
        kernel = Kernel(stage)
        values = [o for v in values for o in kernel.outputs(v, kernel.result(v))]
    return bool(values)


def _tagged_serial(pipeline: Pipeline, rows: list[Any]) -> Counter[Any]:
    out: Counter[Any] = Counter()
    for row in rows:
        values = [row]
        for stage in pipeline.units:
            kernel = Kernel(stage)
            values = [o for v in values for o in kernel.outputs(v, kernel.result(v))]
        out.update(values)
    return out


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.sampled_from(sorted(TAGGED)), min_size=1, max_size=3),
       count=st.integers(1, 120), sharded=st.booleans(), fused=st.booleans(),
       shard_size=st.integers(1, 40), seed=st.integers(0, 10**6),
       always_share=st.sampled_from([0.0, 0.02, 0.05]),
       once_share=st.sampled_from([0.0, 0.05, 0.2]), ordered=st.booleans(),
       max_attempts=st.integers(2, 4))
def test_a_row_that_kills_its_worker_costs_only_itself(
        names: list[str], count: int, sharded: bool, fused: bool, shard_size: int,
        seed: int, always_share: float, once_share: float, ordered: bool,
        max_attempts: int) -> None:
    """Rows that kill any worker touching them, once or every time, in frames of any size
    or in shards (read by a reader of their own, or by one that runs the first unit): every
    other row completes exactly once, each always-killing row is dead-lettered alone after
    ``max_attempts``, a once-killing row completes, and the run never aborts."""
    rng = random.Random(seed)
    units = [unit(TAGGED[n].fn, name=f"{n}{i}", kind=TAGGED[n].kind)
             for i, n in enumerate(names)]
    rows = [(i, i) for i in range(count)]
    killers = rng.sample(range(count), min(count, int(count * (always_share + once_share))
                                           + (1 if rng.random() < 0.5 else 0)))
    cut = min(10, round(len(killers) * always_share / max(1e-9, always_share + once_share)))
    stages = len(units) + (1 if sharded and not fused else 0)
    always = {r: rng.randrange(stages) for r in killers[:cut]}
    once = {r: rng.randrange(stages) for r in killers[cut:]}
    if sharded:
        source = fitwork.Source.of([], read_rows)
        reader = source.reader(units[0]) if fused else source.reader()
        pipeline = Pipeline([reader, *(units[1:] if fused else units)], name="sharded")
        items: list[Any] = [rows[i:i + shard_size] for i in range(0, count, shard_size)]
    else:
        pipeline = Pipeline(units, name="frames")
        items = rows
    policy = Policy(ordered=ordered, max_attempts=max_attempts, max_frames=6,
                    ordered_window=64)
    model = PoisonEngine(pipeline, items, policy, rng, always, dict(once))
    offset = 1 if sharded and not fused else 0
    always = {r for r, s in always.items()  # those that reach the stage where they kill
              if _reaches(units, rows[r], max(0, s - offset))}
    model.run()  # an Abort raises: the run never gives up while rows complete
    core = model.core
    assert core.completed == len(items) and not core.frames
    letters = [f for f in model.letters]
    assert all(f.kind == "poison" for f in letters)
    if sharded:
        poisoned = [items[f.item][f.input["row"]][0] for f in letters]
        assert all(f.path == (f.input["row"],) for f in letters)
    else:
        poisoned = [f.input[0] for f in letters]
    assert sorted(poisoned) == sorted(always)  # each always-killer, alone, once
    assert all(f.attempt == max_attempts for f in letters)  # deaths alone
    user = Pipeline(units, name="user")
    want = _tagged_serial(user, [r for r in rows if r[0] not in always])
    assert Counter(model.emitted) == want  # once-killers included; nothing twice
    if ordered:
        assert model.emitted == list(want.elements()) or Counter(model.emitted) == want


def test_a_once_killing_row_in_each_of_many_frames_does_not_read_as_a_restart_storm() -> None:
    """The issue's repro, on the core: a replacement worker that takes the next frame and
    dies on its bad row is progress as long as retried singles complete."""
    rng = random.Random(7)
    rows = [(i, i) for i in range(3000)]
    once = {r: 0 for r in rng.sample(range(3000), 30)}
    pipeline = Pipeline([unit(tag_inc.fn, name="crashy")])
    model = PoisonEngine(pipeline, rows, Policy(max_attempts=3, max_frames=64), rng, {},
                         once)
    model.run()
    assert model.deaths == 30 and model.letters == []
    assert sorted(model.emitted) == [(i, i + 1) for i in range(3000)]


def test_workers_that_die_on_every_item_stop_the_run_naming_the_poison_rows() -> None:
    rows = [(i, i) for i in range(200)]
    pipeline = Pipeline([unit(tag_inc.fn, name="oom")])
    model = PoisonEngine(pipeline, rows, Policy(max_attempts=2), random.Random(1),
                         {i: 0 for i in range(200)}, {})
    with pytest.raises(fitwork.EngineError, match=r"keep dying .* rows isolated as poison"):
        model.run()
    assert 0 < model.core.poisoned <= 20
