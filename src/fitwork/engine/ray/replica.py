"""A replica actor: runs one unit on frames and hands its outputs straight to the next unit.

A call to ``process`` returns once the frame's items have gone all the way down the
pipeline: the replica applies its unit, splits the outputs into frames, sends each to a
downstream replica (the less loaded of two picked at random, at most ``max_in_flight``
frames per downstream replica, enough to fill its batches and I/O slots), and waits for
those calls.  A downstream replica that dies
is reported to the registry and its frame goes to another one; a frame whose replica died
is retried item by item, and an item that has killed ``max_attempts`` replicas becomes a
poison dead letter.  The last unit puts its outputs into the object store, owned by the
registry, and returns only their references, which travel back up to the driver: data
moves once, from the last replica to the caller.

Records are ``(source id, path, attempt, value)``; the path names a flat-map child.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
import pickle
import random
import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from fitwork.engine.local.worker import _describe, _portable
from fitwork.errors import EngineError
from fitwork.workload.unit import Kind, Unit

Record = tuple[int, tuple[int, ...], int, Any]
DEATH = (RayActorError, ActorDiedError, ActorUnavailableError)
_MERGE_GAP = 0.001


def frame_bytes(records: list[Record]) -> int:
    """Bytes a frame moves: its pickle stream plus its large buffers, without copying them."""
    sizes: list[int] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        sizes.append(buffer.raw().nbytes)
        return False

    try:
        return len(pickle.dumps(records, protocol=5, buffer_callback=out_of_band)) + sum(sizes)
    except Exception:
        return 0


class Batcher:
    """Collects items from concurrent calls into batches of ``size`` or ``wait`` seconds."""

    def __init__(self, run: Any, size: int, wait: float) -> None:
        self.run, self.size, self.wait = run, size, wait
        self.queue: list[tuple[Any, Future[Any]]] = []
        self.first = 0.0
        self.cond = threading.Condition()
        threading.Thread(target=self.loop, daemon=True, name="fitwork-batcher").start()

    def submit(self, values: list[Any], alone: bool) -> list[Future[Any]]:
        futures = [Future() for _ in values]
        if alone:  # a retried item runs by itself, so a poison item hurts no other
            for value, future in zip(values, futures, strict=True):
                self.run([(value, future)])
            return futures
        with self.cond:
            if not self.queue:
                self.first = time.monotonic()
            self.queue.extend(zip(values, futures, strict=True))
            self.cond.notify()
        return futures

    def loop(self) -> None:
        while True:
            with self.cond:
                while not self.queue or (len(self.queue) < self.size
                                         and time.monotonic() < self.first + self.wait):
                    self.cond.wait(timeout=max(0.0, self.first + self.wait - time.monotonic())
                                   if self.queue else None)
                batch, self.queue = self.queue[:self.size], self.queue[self.size:]
                self.first = time.monotonic()
            self.run(batch)


class Replica:
    """One replica of one unit (wrapped with ``ray.remote`` by the driver)."""

    def __init__(self, unit: Unit, stage: int, names: list[str], registry: Any,
                 max_attempts: int, limits: list[int]) -> None:
        self.unit, self.stage, self.names = unit, stage, names
        self.last = stage == len(names) - 1
        self.registry, self.max_attempts = registry, max_attempts
        self.max_in_flight = limits[stage + 1] if stage + 1 < len(limits) else 1
        self.fn = unit.instantiate()
        self.id = ray.get_runtime_context().get_actor_id()
        self.lock = threading.Condition()
        self.compute = threading.Semaphore(1)
        self.pool = ThreadPoolExecutor(unit.resources.io) if unit.is_io else None
        self.batcher = Batcher(self._run_batch, unit.batch_size, unit.batch_wait) \
            if unit.batch_size else None
        self.members: list[Any] = []
        self.version = -1
        self.in_flight: dict[str, int] = {}
        self.alone: set[str] = set()
        self.frame_ids = itertools.count()
        self.items_in = self.items_out = self.bytes_in = self.bytes_out = 0
        self.busy_s = 0.0
        self.active = 0
        self.busy_since = 0.0
        self.waiting = 0
        self.intervals: list[list[float]] = []

    # -- identity and telemetry ------------------------------------------------------------

    def hello(self) -> dict[str, Any]:
        """Where this replica runs."""
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "actor": self.id}

    def stats(self) -> dict[str, Any]:
        """Counters so far, new busy intervals, and items waiting to be worked on."""
        with self.lock:
            intervals, self.intervals = self.intervals, []
            return {"actor": self.id, "items_in": self.items_in, "items_out": self.items_out,
                    "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                    "busy_s": self.busy_s, "cpu_s": time.process_time(),
                    "intervals": intervals, "waiting": self.waiting}

    def _begin(self) -> None:
        with self.lock:
            if not self.active:
                self.busy_since = time.monotonic()
            self.active += 1

    def _end(self) -> None:
        with self.lock:
            self.active -= 1
            if not self.active:
                now = time.monotonic()
                self.busy_s += now - self.busy_since
                if self.intervals and self.busy_since - self.intervals[-1][1] <= _MERGE_GAP:
                    self.intervals[-1][1] = now
                else:
                    self.intervals.append([self.busy_since, now])

    # -- the unit --------------------------------------------------------------------------

    def _call(self, value: Any) -> Any:
        result = self.fn(value)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
        elif inspect.isasyncgen(result):
            result = asyncio.run(_collect(result))
        return list(result) if self.unit.kind is Kind.FLAT_MAP else result

    def _timed_call(self, value: Any) -> Any:
        self._begin()
        try:
            return self._call(value)
        finally:
            self._end()

    def _run_batch(self, batch: list[tuple[Any, Future[Any]]]) -> None:
        self._begin()
        try:
            results = list(self.fn([value for value, _ in batch]))
            if len(results) != len(batch):
                raise ValueError(f"batched unit {self.unit.name!r} returned {len(results)} "
                                 f"results for {len(batch)} items; return one per item")
        except Exception as exc:
            self._end()
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
            else:
                for entry in batch:
                    self._run_batch([entry])
            return
        self._end()
        for (_, future), result in zip(batch, results, strict=True):
            if self.unit.kind is Kind.FLAT_MAP:
                try:
                    result = list(result)
                except Exception as exc:
                    future.set_exception(exc)
                    continue
            future.set_result(result)

    def _apply(self, records: list[Record]) -> tuple[list[Record], list[dict[str, Any]]]:
        values = [r[3] for r in records]
        if self.batcher is not None:
            futures = self.batcher.submit(values, alone=any(r[2] for r in records))
        elif self.pool is not None:
            futures = [self.pool.submit(self._timed_call, v) for v in values]
        else:
            futures = []
            with self.compute:
                for value in values:
                    future: Future[Any] = Future()
                    try:
                        future.set_result(self._timed_call(value))
                    except Exception as exc:
                        future.set_exception(exc)
                    futures.append(future)
        outputs: list[Record] = []
        failures: list[dict[str, Any]] = []
        kind = self.unit.kind
        for record, future in zip(records, futures, strict=True):
            src, path, attempt, value = record
            error = future.exception()
            if error is not None:
                failures.append(self._failure(record, error))
            elif kind is Kind.MAP:
                outputs.append((src, path, attempt, future.result()))
            elif kind is Kind.FILTER:
                if future.result():
                    outputs.append(record)
            else:
                outputs.extend((src, (*path, j), attempt, child)
                               for j, child in enumerate(future.result()))
        return outputs, failures

    def _failure(self, record: Record, error: BaseException, kind: str = "error",
                 text: str | None = None) -> dict[str, Any]:
        src, path, attempt, value = record
        return {"item": src, "path": list(path), "unit": self.unit.name, "kind": kind,
                "error": text or _describe(error),
                "traceback": "".join(traceback.format_exception(error))[-8192:],
                "attempt": attempt, "input": _portable(value)}

    # -- frames ----------------------------------------------------------------------------

    @ray.method(num_returns=2)
    def process(self, records: list[Record], hints: list[int]
                ) -> tuple[dict[str, Any], list[Record] | None]:
        """Run the unit on a frame and see its outputs all the way down.

        Returns a summary (references to the last unit's outputs, dead letters) and, from
        the last unit, its outputs: a separate object, which the caller never fetches but
        passes up by reference, so the driver alone reads it.
        """
        size = frame_bytes(records)
        with self.lock:
            self.items_in += len(records)
            self.bytes_in += size
            self.waiting += len(records)
        try:
            outputs, failures = self._apply(records)
        finally:
            with self.lock:
                self.waiting -= len(records)
        summary: dict[str, Any] = {"outputs": [], "failures": failures}
        if not outputs:
            return summary, None
        if self.last:
            outputs = self._portable_outputs(outputs, summary)
            self._count_out(outputs)
            return summary, outputs
        self._count_out(outputs)
        step = max(1, hints[self.stage + 1])
        frames = [outputs[i:i + step] for i in range(0, len(outputs), step)]
        for child in forward(self, self.stage + 1, frames, hints, summary):
            summary["outputs"].extend(child["outputs"])
            summary["failures"].extend(child["failures"])
        return summary, None

    def _count_out(self, records: list[Record]) -> None:
        with self.lock:
            self.items_out += len(records)
            self.bytes_out += frame_bytes(records)

    def _portable_outputs(self, records: list[Record], summary: dict[str, Any]) -> list[Record]:
        try:
            ray.cloudpickle.dumps(records)
            return records
        except Exception:
            kept = []
            for record in records:
                try:
                    ray.cloudpickle.dumps(record)
                    kept.append(record)
                except Exception as exc:
                    error = TypeError(f"unit {self.unit.name!r} returned a value that cannot "
                                      f"cross processes ({_describe(exc)}); return plain data")
                    summary["failures"].append(self._failure(record, error))
            return kept

    # -- downstream membership -------------------------------------------------------------

    def pick(self, stage: int) -> Any:
        """A live downstream replica: the less loaded of two at random, within the bound."""
        return pick_member(self, stage)


async def _await(awaitable: Any) -> Any:
    return await awaitable


async def _collect(generator: Any) -> list[Any]:
    return [item async for item in generator]


# `owner` below is a Replica or the driver: anything with registry, lock, members, version,
# in_flight, alone, names, max_attempts and max_in_flight.


def refresh(owner: Any, stage: int) -> None:
    """Fetch the live members of ``stage`` from the registry."""
    version, members = ray.get(owner.registry.members_of.remote(stage))
    with owner.lock:
        owner.version, owner.members = version, members


def pick_member(owner: Any, stage: int, patience: float = 120.0, block: bool = True,
                alone: bool = False) -> Any:
    """Power of two choices over the live members of ``stage``, waiting while all are full.

    With ``block=False`` it returns None at once when every member is full.  ``alone`` asks
    for a member with nothing in flight and keeps others off it until `release`: a retried
    item runs by itself, so if it kills the replica again, no bystander shares the blame.
    """
    deadline = time.monotonic() + patience
    while True:
        if not owner.members:
            refresh(owner, stage)
        with owner.lock:
            load = owner.in_flight
            members = [m for m in owner.members if m._actor_id.hex() not in owner.alone]
            if alone:
                members = [m for m in members if not load.get(m._actor_id.hex(), 0)]
            if members:
                a, b = (random.sample(members, 2) if len(members) > 1
                        else (members[0], members[0]))
                target = a if load.get(a._actor_id.hex(), 0) <= load.get(b._actor_id.hex(), 0) \
                    else b
                key = target._actor_id.hex()
                if load.get(key, 0) < owner.max_in_flight:
                    load[key] = load.get(key, 0) + 1
                    if alone:
                        owner.alone.add(key)
                    return target
            if not block:
                return None
            if owner.members:
                owner.lock.wait(timeout=0.05)
                continue
        if time.monotonic() > deadline:
            raise EngineError(f"no live replica of stage {stage} for {patience:.0f} s; "
                              "check the cluster has resources for its unit")
        time.sleep(0.05)


def release(owner: Any, target: Any) -> None:
    """One call to ``target`` is over: free its slot."""
    with owner.lock:
        key = target._actor_id.hex()
        owner.in_flight[key] = max(0, owner.in_flight.get(key, 1) - 1)
        owner.alone.discard(key)
        owner.lock.notify_all()


def mark_dead(owner: Any, stage: int, target: Any) -> None:
    """Drop a dead replica from the local view and tell the registry."""
    key = target._actor_id.hex()
    with owner.lock:
        owner.members = [m for m in owner.members if m._actor_id.hex() != key]
    owner.registry.report_dead.remote(stage, key)


def after_death(owner: Any, stage: int, target: Any, frame: list[Record], exc: BaseException,
                failures: list[dict[str, Any]]) -> list[list[Record]]:
    """A replica died holding ``frame``: retry its items one per frame, or dead-letter the
    ones that have now killed ``max_attempts`` replicas."""
    mark_dead(owner, stage, target)
    retries = []
    for src, path, attempt, value in frame:
        if attempt + 1 >= owner.max_attempts:
            failures.append({
                "item": src, "path": list(path), "unit": owner.names[stage], "kind": "poison",
                "error": f"replica died ({type(exc).__name__}) on each of {attempt + 1} "
                         "attempts", "traceback": "", "attempt": attempt + 1,
                "input": _portable(value)})
        else:
            retries.append([(src, path, attempt + 1, value)])
    return retries


def forward(owner: Any, stage: int, frames: list[list[Record]], hints: list[int],
            summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Send frames to ``stage`` and wait for them; retry what a dead replica held.

    A thread never waits for a slot while it holds calls of its own: it first collects one
    of them, so one frame's many outputs cannot take every slot and wait on itself.
    Returns the summaries of the calls that succeeded; poison dead letters go into
    ``summary["failures"]``.
    """
    results: list[dict[str, Any]] = []
    pending = deque(frames)
    calls: dict[Any, tuple[Any, Any, list[Record]]] = {}
    last = stage == len(owner.names) - 1

    def collect(ref: Any) -> None:
        outputs, target, frame = calls.pop(ref)
        try:
            result = ray.get(ref)
            if last:
                result["outputs"].append(outputs)
            results.append(result)
        except DEATH as exc:
            pending.extend(after_death(owner, stage, target, frame, exc, summary["failures"]))
            with contextlib.suppress(Exception):
                refresh(owner, stage)
        finally:
            release(owner, target)

    while pending or calls:
        if pending:
            target = pick_member(owner, stage, block=not calls,
                                 alone=any(record[2] for record in pending[0]))
            if target is not None:
                frame = pending.popleft()
                try:
                    ref, outputs = target.process.remote(frame, hints)
                except Exception as exc:  # the frame could not be serialised
                    release(owner, target)
                    unsendable(owner, stage, frame, exc, pending, summary)
                    continue
                calls[ref] = (outputs, target, frame)
                continue
        done, _ = ray.wait(list(calls), num_returns=1)
        collect(done[0])
    return results


def unsendable(owner: Any, stage: int, frame: list[Record], exc: BaseException,
               pending: deque[list[Record]], summary: dict[str, Any]) -> None:
    """A frame that could not be serialised: split it, or dead-letter its one item."""
    if len(frame) > 1:
        pending.extend([record] for record in frame)
        return
    src, path, attempt, value = frame[0]
    summary["failures"].append({
        "item": src, "path": list(path), "unit": owner.names[stage - 1], "kind": "error",
        "error": f"unit {owner.names[stage - 1]!r} returned a value that cannot cross "
                 f"processes ({_describe(exc).splitlines()[0][:300]}); return plain data",
        "traceback": "",
        "attempt": attempt, "input": _portable(value)})
