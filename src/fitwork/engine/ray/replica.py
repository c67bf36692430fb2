"""A replica actor: runs one unit on frames and hands its outputs straight to the next unit.

A call to ``process`` returns once the frame's items have gone all the way down the
pipeline: the replica runs its unit's items by the one replica loop
(`fitwork.engine.serving.Serving`, as the local worker does: the call hands its frame to
the loop's thread through the `Calls` transport and waits for it), cuts the output
segments into frames by the one rule (`fitwork.engine.framing.outputs_per_frame`), sends
each to a downstream replica chosen by its `Router`, and waits for those calls.  A
downstream replica that dies is dropped from the router and named in the summary, with
what the frame it was sent held (`LostFrame`): the driver reports that to the run core,
which alone decides what to retry and what is poison (a replica keeps no attempts of its
own).
The last unit returns its outputs as a second object that travels back up by reference:
data moves once, from the last replica to the driver.

A call's `Summary` (`fitwork.engine.ray.records`) carries what the driver's run core needs
to settle the frame: references to the output segments, the weight returned by filters,
the failures, and the counters of the replicas it went through.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import traceback
from collections import deque
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from fitwork.engine.core.events import Counters
from fitwork.engine.framing import outputs_per_frame
from fitwork.engine.limits import local_gate
from fitwork.engine.parts import PartWriter, Written
from fitwork.engine.ray.forked import Build, Forked, Settled, UnitDied
from fitwork.engine.ray.records import Hello, LostFrame, Reading, ReplicaSpec, Stats, Summary
from fitwork.engine.ray.refill import REFILL_WAIT_S, refill
from fitwork.engine.ray.routing import Router, key
from fitwork.engine.ray.transport import crosses, frame_bytes, pack
from fitwork.engine.ray.warm import WarmState
from fitwork.engine.segment import Return, Segment, settle, split
from fitwork.engine.serve import Alone, Busy, Runner
from fitwork.engine.serving import Calls, Serving
from fitwork.engine.threads import hold_threads
from fitwork.failure import Failure, describe
from fitwork.telemetry.cputime import cpu_seconds
from fitwork.telemetry.schedstat import run_queue_seconds
from fitwork.workload.kernel import Kernel
from fitwork.workload.unit import Unit

DEATH = (RayActorError, ActorDiedError, ActorUnavailableError)


class Replica:
    """One replica of one unit (wrapped with ``ray.remote`` by the driver)."""

    def __init__(self, spec: ReplicaSpec) -> None:
        started = time.perf_counter()
        unit, stage, names = spec.unit, spec.stage, spec.names
        self.error: str | None = None
        self.load_error: str | None = None  # the unit could not be unpickled here
        if isinstance(unit, bytes):  # loaded here, so a failure is said, not a crash
            loaded = load_unit(unit, names[stage])
            if isinstance(loaded, str):
                self.load_error = loaded
                unit = Unit(_unloaded, names[stage])
            else:
                unit = loaded
        self.unit = unit
        self.id: str = ray.get_runtime_context().get_actor_id() or ""
        self.kernel: Kernel | None = None
        self.lock = threading.Lock()
        self.pool = WarmState()  # parked between runs (`park`, `claim`), or not
        self.serving = Calls()
        self.arm(spec, build=True)
        self.build_s = time.perf_counter() - started  # what a warm start saves

    def arm(self, spec: ReplicaSpec, build: bool) -> None:
        """Set up for one run: counters, routes, gate, the replica loop, and (``build``)
        the unit built (else the one built before is kept)."""
        stage, names = spec.stage, spec.names
        self.stage, self.names = stage, names
        self.sink = spec.sink  # the last unit's, in a run with a sink: sink, run id, worker id
        self.part: PartWriter | None = None
        self.part_lock = threading.Lock()
        self.last = stage == len(names) - 1
        self.busy = Busy()
        self.serving: Calls | Forked = Calls()  # frames to the replica's loop, on a thread
        try:
            hold_threads(spec.cores)
            if self.load_error is None and spec.forked:  # the unit in a child process
                self.kernel = None
                self.serving = Forked(Build(self.unit, spec.given, self.unit.max_concurrency,
                                            self.unit.rate_limit, spec.replicas, spec.spares),
                                      self.busy)
                self.error = self.serving.error
            elif self.load_error is None:  # a warm replica may keep the instance it built
                kept = None if build or self.kernel is None else self.kernel.fn
                self.kernel = Kernel(self.unit, kept, spec.given)
        except Exception as exc:  # reported by hello(), in one line, by the driver
            self.error = f"{describe(exc)} ({traceback.format_exc().splitlines()[-2].strip()})"
        self.router = None if self.last else Router(stage + 1, spec.limits[stage + 1],
                                                    spec.timeout)
        self.alone = Alone()
        if self.kernel is not None and isinstance(self.serving, Calls):
            gate = local_gate(self.unit.max_concurrency, self.unit.rate_limit, spec.replicas)
            self.serving.start(Serving(Runner(self.kernel, gate, self.busy)))
        self.items_in = self.items_out = self.bytes_in = self.bytes_out = 0
        self.blocked_s = 0.0
        self.calls = 0
        self.last_call = time.monotonic()
        self.waiting = 0
        self.seq = getattr(self, "seq", 0)  # numbers each reading, so the driver keeps the
        self.built_cpu = self._own_cpu()  # newest; starting, building: not unit work
        self.contact = time.monotonic()  # the driver's last word (a warm pool's watch)

    # -- a warm pool between runs (`fitwork.engine.ray.warm`) ------------------------------

    def park(self, keep: float) -> bool:
        """The run is over: drop what it set up and wait ``keep`` seconds for the next run
        to `claim` this replica, then exit.  False if it holds calls still."""
        with self.lock:
            if self.calls:
                return False
            self.serving.close()
            self.router = None
            self.sink = self.part = None
        self.pool.park(keep, self._exit)
        return True

    def claim(self, token: str) -> bool:
        """Taken by the run ``token`` if parked and not taken yet (one run adopts it)."""
        self.contact = time.monotonic()
        return self.pool.claim(token)

    def adopt(self, token: str, spec: ReplicaSpec, rebuild_under: float) -> Hello:
        """Set up for the run that claimed this replica: everything fresh but the unit,
        which is built again if its build took under ``rebuild_under`` seconds; its hello."""
        if not self.pool.owned_by(token):
            return Hello(os.getpid(), None, self.id, "not claimed by this run")
        self.error = None
        if isinstance(spec.unit, bytes):  # this run's settings of the same code
            loaded = load_unit(spec.unit, spec.names[spec.stage])
            if isinstance(loaded, str):
                self.load_error = loaded
            else:
                self.unit = loaded
        self.arm(spec, build=self.build_s < rebuild_under)
        return self.hello()

    def watch(self, orphan: float) -> None:
        """A detached replica of a run with a warm pool: exit once ``orphan`` seconds pass
        with no call while not parked (its run's driver died without a word)."""
        self.pool.watch(orphan, lambda: time.monotonic() - self.contact, self._exit)

    def _exit(self) -> None:
        """End this actor (its name is then free): first an idle worker asked of Ray in
        its place (`fitwork.engine.ray.refill`: an actor's process never returns
        to Ray's pool, and the next task would wait for a fresh one), then Ray kills it;
        if it has not within a few seconds, the process ends itself."""
        with contextlib.suppress(Exception):
            refs = refill([ray.get_runtime_context().get_node_id()])
            ray.wait(refs, num_returns=len(refs), timeout=REFILL_WAIT_S)
        with contextlib.suppress(Exception):
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        time.sleep(5.0)
        os._exit(0)

    # -- identity and telemetry ------------------------------------------------------------

    def hello(self) -> Hello:
        """Where this replica runs, and why its unit could not start if it could not."""
        return Hello(os.getpid(), ray.get_runtime_context().get_node_id(), self.id,
                     self.load_error or self.error, self.load_error is not None,
                     self.built_cpu)

    def serve_as(self, worker: int) -> Hello:
        """A spare handed over serves as worker ``worker``: its sink's part is named by it
        (`fitwork.engine.ray.spares`); its hello."""
        with self.part_lock:
            if self.sink is not None and self.part is None:
                self.sink = (self.sink[0], self.sink[1], worker)
        return self.hello()

    def set_members(self, version: int, members: list[Any]) -> None:
        """The next unit's live replicas, as the driver holds them at ``version``."""
        if self.router is not None:
            self.router.set_members(members, version)

    def stats(self) -> Stats:
        """Counters so far, new busy intervals, and items waiting to be worked on."""
        with self.lock:
            self.contact = time.monotonic()
            return Stats(self._counters(), self.busy.take(), self.waiting)

    def counters(self) -> Reading:
        """The counters now, numbered."""
        with self.lock:
            return self._counters()

    def _own_cpu(self) -> float:
        """This actor's CPU seconds, with its finished children's where the unit runs here
        (tools it shells out to); not where the unit runs in a forked child, which reports
        its own (its tools' included) and whose death would count it twice."""
        return time.process_time() if isinstance(self.serving, Forked) else cpu_seconds()

    def _counters(self) -> Reading:
        """The counters now, numbered (the caller holds the lock).  Items still waiting in
        a call are not in yet: busy time covers only the items worked on, and the core
        sizes frames by busy time per item."""
        self.seq += 1
        return Reading(self.seq, Counters(
            self.items_in - self.waiting, self.items_out, self.bytes_in, self.bytes_out,
            self.busy.so_far(), self.blocked_s, self._own_cpu() - self.built_cpu
            + (self.serving.cpu_seconds() if isinstance(self.serving, Forked) else 0.0),
            run_queue_seconds()))

    def flush(self) -> None:
        """Nothing more comes but retries (`fitwork.engine.core.Drain`): batches wait no
        longer for items."""
        self.serving.drain()

    def drain(self, idle: float = 0.5, patience: float = 300.0) -> Stats:
        """Return once no call has run for ``idle`` seconds (a retiring replica's last word)."""
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            with self.lock:
                quiet = not self.calls and time.monotonic() - self.last_call >= idle
            if quiet:
                break
            time.sleep(idle / 5)
        return self.stats()

    # -- frames ----------------------------------------------------------------------------

    def lease(self) -> int:
        """Hold this process, empty, for a retry about to be sent (`Alone.lease`): its
        token, or 0 where it is not free.  A lease that meets a dead replica tells the
        sender so before the retry is sent; once leased, nothing else enters the process
        until the retry's call takes the hold over, so a death after that is the retry's."""
        return self.alone.lease()

    def unlease(self, token: int) -> None:
        """Let a lease go whose retry could not be sent."""
        self.alone.drop(token)

    def ack(self, seq: int) -> None:
        """The caller of retry ``seq`` holds its reply: the next call may start."""
        self.alone.ack(seq)

    @ray.method(num_returns=2)
    def process(self, segments: list[Segment], hints: list[int], version: int,
                lease: int = 0) -> tuple[Summary, list[Segment] | None]:
        """Run the unit on a frame and see its outputs all the way down.

        Returns a summary (references to the last unit's outputs, returned weight,
        failures, and the counters of every replica the frame went through, so the
        driver sizes frames from the first call on) and, from the last unit, its output
        segments: a separate object, which the caller never fetches but passes up by
        reference, so the driver alone reads it.
        """
        alone = any(s.attempt > 0 for s in segments)
        # A retry's reply cannot be lost to a death of a forked unit process (this actor
        # lives and holds it), so no grace follows it there.
        grace = not isinstance(self.serving, Forked)
        if alone and self.stage > 0:
            if not (self.alone.take(lease) or self.alone.claim()):
                # a retry queued behind other calls would die with them: the sender picks
                # again
                return Summary(busy=True), None
            try:
                summary, outputs = self.run(segments, hints, version)
            finally:
                self.alone.release(grace)
        else:
            with self.alone.hold(alone, grace):
                summary, outputs = self.run(segments, hints, version)
        if alone:  # no call enters before this retry's grace ends: the number is its own
            summary.graced = self.alone.seq
        summary.counters[self.id] = self.counters()
        summary.entered[self.id] = summary.entered.get(self.id, 0) + entered(
            segments, summary, self.stage)
        if summary.made:  # its outputs, less those lost below it (they come through again);
            # an item lost in its own unit made none
            summary.exited[self.id] = summary.exited.get(self.id, 0) + max(
                0, summary.made - lost_below(summary, self.stage + 1))
        summary.carries = outputs is not None
        return summary, outputs

    def run(self, segments: list[Segment], hints: list[int], version: int
            ) -> tuple[Summary, list[Segment] | None]:
        """A frame through the unit and on down, with no claim on the process (a task's
        call, or one `process` let in)."""
        assert self.error is None, self.error
        count = sum(len(s.values) for s in segments)
        with self.lock:
            self.items_in += count
            self.bytes_in += frame_bytes(segments)
            self.waiting += count
            self.calls += 1
            self.contact = time.monotonic()
        try:
            outputs: list[Segment] = []
            summary = Summary()
            try:
                settled = self._settled(segments)
            except UnitDied as died:  # the actor lives on
                settled = self._report_deaths(died, summary)
            for out, back, failures in settled:
                if out is not None:
                    outputs.append(out)
                if back is not None:
                    summary.returns.append(back)
                summary.failures.extend(failures)
        finally:
            with self.lock:
                self.waiting -= count
        try:
            if not outputs:
                return summary, None
            if self.last and self.sink is not None:
                written = self._write_part(outputs, summary)
                summary.written.append(written)
                summary.made = sum(len(s.values) for s in written.segments)
                return summary, None
            if self.last:
                outputs = self._portable(outputs, summary)
                summary.made = self._count_out(outputs)
                return summary, pack(outputs) if outputs else None
            summary.made = self._count_out(outputs)
            assert self.router is not None
            self.router.follow(version)
            total = sum(len(s.values) for s in outputs)  # cut by the one rule
            with self.lock:
                sent, sent_bytes = self.items_out, self.bytes_out
            step = outputs_per_frame(total, hints[self.stage + 1], len(self.router.members),
                                     sent, sent_bytes)
            frames = _frames(outputs, step)
            for child in forward(self, frames, hints, version, summary):
                summary.merge(child)
            return summary, None
        finally:
            with self.lock:
                self.calls -= 1
                self.last_call = time.monotonic()

    def _report_deaths(self, died: UnitDied, summary: Summary) -> Settled:
        """Each death of the forked unit as a lost frame, which goes again by the core's
        rules as for any death; what the call settled besides."""
        for number, lost, named in died.losses:
            summary.forks.append((self.stage, self.id, number))
            summary.lost.append(LostFrame(
                self.stage, f"{died} in a replica of {self.unit.name!r}",
                [(s.frame, list(s.offsets)) for s in lost], named))
        return died.settled

    def _settled(self, segments: list[Segment]) -> Settled:
        """A frame run by the replica's loop (here, or in its forked child) and settled:
        per segment, its outputs, returned weight and failures."""
        if isinstance(self.serving, Forked):
            return self.serving.call(segments).result()
        assert self.kernel is not None
        done = self.serving.call(segments).result()
        return [settle(self.kernel, segment, results, failed) for segment, results, failed
                in zip(segments, done.results, done.failed, strict=True)]

    def _write_part(self, outputs: list[Segment], summary: Summary) -> Written:
        """Append a frame's outputs to this replica's part; what commits them, for the
        driver (an output the part cannot encode is dead-lettered alone)."""
        assert self.sink is not None
        books: list[Segment] = []
        with self.part_lock:
            if self.part is None:
                self.part = PartWriter(*self.sink)
            part = self.part
            for segment in outputs:
                try:
                    encoded = [part.encode(value) for value in segment.values]
                except (TypeError, ValueError):
                    encoded = None
                if encoded is not None:
                    books.append(segment.with_values(part.write(encoded)))
                    continue
                for single in split(segment, 1):
                    try:
                        line = part.encode(single.values[0])
                    except (TypeError, ValueError) as exc:
                        error = TypeError(f"unit {self.unit.name!r} returned a value its "
                                          f"output part cannot hold ({describe(exc)}); "
                                          "return plain data")
                        lost(summary, single, self.unit.name, error)
                        continue
                    books.append(single.with_values(part.write([line])))
            self._count_out(books)
            return Written(books)

    def _count_out(self, segments: list[Segment]) -> int:
        """Count ``segments`` out of this replica; how many items they hold."""
        count = sum(len(s.values) for s in segments)
        with self.lock:
            self.items_out += count
            self.bytes_out += frame_bytes(segments)
        return count

    def _portable(self, segments: list[Segment], summary: Summary) -> list[Segment]:
        """The outputs that can cross processes; the rest dead-lettered, their weight returned."""
        if crosses(segments):
            return segments
        try:
            ray.cloudpickle.dumps(segments)
            return segments
        except Exception:
            pass
        kept: list[Segment] = []
        for single in (piece for s in segments for piece in split(s, 1)):
            try:
                ray.cloudpickle.dumps(single)
                kept.append(single)
            except Exception as exc:
                error = TypeError(f"unit {self.unit.name!r} returned a value that cannot "
                                  f"cross processes ({describe(exc)}); return plain data")
                lost(summary, single, self.unit.name, error)
        return kept


def entered(segments: list[Segment], summary: Summary, stage: int) -> int:
    """Items a call brought into a replica of ``stage`` that count as in there: its own,
    less those lost below it (their retry comes through this unit again, and is counted
    where it runs), so each item is in once however often it is delivered."""
    return max(0, sum(len(s.values) for s in segments) - lost_below(summary, stage))


def lost_below(summary: Summary, stage: int) -> int:
    """Items a call lost in ``stage``'s unit (its forked child died) or in units below it
    (their retry comes through it again)."""
    return sum(len(offsets) for lost in summary.lost if lost.stage >= stage
               for _, offsets in lost.parts)


def load_unit(blob: bytes, name: str) -> Unit | str:
    """The unit pickled in ``blob``, or one line saying why this process cannot load it
    (a module its code needs that is not importable here, say)."""
    try:
        loaded = ray.cloudpickle.loads(blob)
    except Exception as exc:
        return (f"a Ray worker could not load unit {name!r}: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:300] if str(exc) else ''}".rstrip(": "))
    if not isinstance(loaded, Unit):
        return f"a Ray worker loaded {type(loaded).__name__}, not unit {name!r}"
    return loaded


def _unloaded(value: Any) -> Any:
    """What a replica that could not load its unit holds in its place (never called)."""
    raise RuntimeError("the unit could not be loaded")


def lost(summary: Summary, single: Segment, unit: str, error: BaseException) -> None:
    """Dead-letter a one-item segment and return its weight, into ``summary``."""
    frame, attempt, offsets, paths, exps, values = single
    path = paths[0] if paths else ()
    failure = Failure.of(unit, error, values[0], attempt=attempt + 1, path=path, frame=frame,
                         offset=offsets[0])
    summary.failures.append(failure)
    back = Return(frame, [offsets[0]], [exps[0]] if exps else None)
    summary.returns.append(back)


def _frames(segments: list[Segment], step: int) -> list[list[Segment]]:
    """Segments grouped into frames of at most ``step`` items."""
    frames: list[list[Segment]] = []
    frame: list[Segment] = []
    count = 0
    for segment in segments:
        for piece in split(segment, step):
            if frame and count + len(piece.values) > step:
                frames.append(frame)
                frame, count = [], 0
            frame.append(piece)
            count += len(piece.values)
    if frame:
        frames.append(frame)
    return frames


def _lease(router: Router, target: Any, summary: Summary) -> int:
    """Lease ``target`` for a retry (see `Replica.lease`): the token, or 0, with ``target``
    released (and marked dead if it is), when the retry should not go there now."""
    try:
        token: int = ray.get(target.lease.remote())
        if token:
            return token
    except DEATH:
        router.mark_dead(target)
        summary.dead.append(key(target))
    router.release(target)
    return 0


def _unsendable(frame: list[Segment], exc: Exception, unit: str,
                pending: deque[list[Segment]], summary: Summary) -> None:
    """A frame that could not be serialised: its items go again one by one, and an item
    alone that cannot is dead-lettered (its weight returned)."""
    pieces = [piece for s in frame for piece in split(s, 1)]
    if len(pieces) > 1:
        pending.extend([piece] for piece in pieces)
        return
    lost(summary, pieces[0], unit,
         TypeError(f"unit {unit!r} returned a value that cannot cross processes "
                   f"({describe(exc).splitlines()[0][:300]}); return plain data"))


def _call(replica: Replica, target: Any, frame: list[Segment], token: int,
          route: tuple[list[int], int], pending: deque[list[Segment]],
          summary: Summary) -> tuple[Any, Any] | None:
    """Send ``frame`` to ``target`` (leased by ``token`` for a retry, else 0), with the
    frame sizes and membership version (``route``): references to its summary and outputs;
    None where the frame could not be serialised (its items go again one by one)."""
    try:
        ref, outputs = target.process.remote(pack(frame), *route, token)
    except Exception as exc:  # the frame could not be serialised
        if token:
            target.unlease.remote(token)
        assert replica.router is not None
        replica.router.release(target)
        _unsendable(frame, exc, replica.names[replica.stage], pending, summary)
        return None
    return ref, outputs


def forward(replica: Replica, frames: list[list[Segment]], hints: list[int], version: int,
            summary: Summary) -> list[Summary]:
    """Send frames to the next stage and wait for them; report what a dead replica held.

    A thread never waits for a slot while it holds calls of its own: it first collects one
    of them, so one frame's many outputs cannot take every slot and wait on itself.
    Returns the summaries of the calls that succeeded.  A call whose replica died goes
    into ``summary.lost`` (a `LostFrame`: the items its frame held), which the driver hands
    the run core as a `Lost` of those items (the core alone decides their retries).
    Unsendable items go into ``summary`` as failures with their weight returned.
    """
    router = replica.router
    assert router is not None
    name = replica.names[replica.stage + 1]
    results: list[Summary] = []
    pending = deque(frames)
    calls: dict[Any, tuple[Any, Any, list[Segment]]] = {}
    last = replica.stage + 1 == len(replica.names) - 1

    def collect(ref: Any) -> None:
        outputs, target, frame = calls.pop(ref)
        try:
            result: Summary = ray.get(ref)
            if result.graced:
                target.ack.remote(result.graced)
            if result.busy:  # a retry must run alone: try another moment or replica
                pending.appendleft(frame)
                time.sleep(Alone.GRACE / 5)
                return
            if last and outputs is not None and result.carries:
                result.outputs.append(outputs)
            results.append(result)
        except DEATH as exc:
            router.mark_dead(target)
            summary.dead.append(key(target))
            summary.lost.append(
                LostFrame(replica.stage + 1, f"replica of {name!r} died ({type(exc).__name__})",
                          [(s.frame, list(s.offsets)) for s in frame]))
        finally:
            router.release(target)

    while pending or calls:
        if pending:
            retry = any(s.attempt > 0 for s in pending[0])
            target = router.pick(block=not calls, alone=retry)
            if target is not None:
                frame = pending.popleft()
                token = _lease(router, target, summary) if retry else 0
                if retry and not token:
                    pending.appendleft(frame)  # busy or dead: another moment or replica
                    time.sleep(Alone.GRACE / 5)
                    continue
                sent = _call(replica, target, frame, token, (hints, version), pending, summary)
                if sent is not None:
                    calls[sent[0]] = (sent[1] if last else None, target, frame)
                continue
        done, _ = ray.wait(list(calls), num_returns=1)
        collect(done[0])
    return results
