"""What every engine's driver shares: the loop around the run core, and the caller's side.

An engine's driver subclasses `Shell` and supplies its I/O: how to reserve room for a
frame and send it, start and retire workers, wait, and turn what arrived into core
events (`pump`).  The shell owns the rest: pulling the source, carrying out the core's
instructions, dead letters, progress, the record, and the run's context::

    loop:  resizes → feed (retries first) → wait → pump (events) → Tick → yield a batch

With ``spans`` the loop also yields an empty batch after `QUIET_TURN_S` without one: a
journal checkpoints as batches reach it, and spans settle in waves (a sharded run's shards
finish together), so the last spans of a wave would otherwise wait for the next wave's
outputs to be journaled, and a crash in between would redo them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from fitwork.engine.adapt import Adapter
from fitwork.engine.contract import RunResult
from fitwork.engine.core import (
    Abort,
    Arrived,
    DeadLetter,
    Drain,
    Emit,
    Event,
    Fed,
    Finished,
    FrameSizes,
    Instruction,
    Policy,
    Report,
    Resize,
    RestoreCredits,
    Retire,
    RunCore,
    Send,
    Spawn,
    Stage,
    Stale,
    Tick,
)
from fitwork.engine.core.account import assemble
from fitwork.engine.options import RunOptions
from fitwork.engine.parts import PartBooks, Written
from fitwork.failure import Failure
from fitwork.io.unreadable import feed_alone, holds_unreadable
from fitwork.placement import Placement, allot_unit
from fitwork.telemetry.processes import ProcessBook, Worker
from fitwork.telemetry.record import DeviceSample, RunRecord, RunStatus
from fitwork.workload.pipeline import Pipeline

TAKE_CHUNK = 1


QUIET_TURN_S = 0.25
"""With spans, seconds without a batch after which the caller is handed an empty one."""


class DeadLetters:
    """This run's dead-letter file: a stale one is removed at the start, created on first use."""

    def __init__(self, path: Path | None, keep: int | None = None) -> None:
        self.path = path
        self.file: IO[str] | None = None
        self.count = 0
        if path is None:
            return
        if keep is None:
            path.unlink(missing_ok=True)
        elif path.exists():  # a resumed run: what the journal saw written stays
            with path.open("r+b") as held:
                held.truncate(keep)

    def write(self, failure: Failure) -> None:
        """Append one failure as a JSON line."""
        self.count += 1
        if self.path is None:
            return
        if self.file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("a", encoding="utf-8")
        self.file.write(json.dumps(failure.to_json()) + "\n")
        self.file.flush()

    def close(self) -> None:
        """Close the file."""
        if self.file is not None:
            self.file.close()
            self.file = None


def policy_for(options: RunOptions, **engine: Any) -> Policy:
    """The core's policy: the run's portable options, and what the engine decides itself
    (frames in flight, frame sizes, quiet detection, sample interval)."""
    return Policy(ordered=options.ordered, spans=options.spans,
                  max_attempts=options.max_attempts,
                  max_failures=options.max_failures,
                  progress_interval=options.progress_interval if options.progress else None,
                  **{"sample_interval": options.sample_interval, **engine})


def stages_of(pipeline: Pipeline, placement: Placement) -> list[Stage]:
    """What the core needs of each unit: its shape, and what a replica of it is allotted
    (`fitwork.placement.allot_unit`: batch size, calls at once, resources)."""
    stages = []
    for u in pipeline.units:
        given = allot_unit(u, placement)
        stages.append(Stage(name=u.name, kind=u.kind.value, io=given.io,
                            batch_size=given.batch_size, demand=given.demand(),
                            slices=bool(getattr(u.fn, "slices_rows", False))))
    return stages


class Shell:
    """One run's driver, minus its engine's I/O (see the module docstring)."""

    engine_name = "engine"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
                 options: RunOptions, policy: Policy,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pipeline = pipeline
        self.units = list(pipeline.units)
        self.names = [u.name for u in self.units]
        self.placement = placement.check(pipeline)
        self.options = options
        self.policy = policy
        self.clock = clock
        self.run_id = uuid.uuid4().hex[:12]
        self.source: Iterator[Any] = iter(source)
        self.stages = stages_of(pipeline, self.placement)  # the units as the core sees them
        # how long a frame may wait on a slow source: a batched first unit closes its
        # batches after batch_wait, which a frame filling for longer would defeat
        first = allot_unit(self.units[0], self.placement)
        self.take_time = (min(policy.frame_time, first.batch_wait)
                          if first.batch_size else policy.frame_time)
        self.out: list[Any] = []
        self.emitted = 0  # outputs put in ``out`` so far
        self.spans: deque[tuple[int, int, int]] = deque()  # (emitted after, start, count)
        self.boundary = 0  # outputs handed out when the last span was taken
        self.retries: deque[Send] = deque()
        self.resizes: list[tuple[str, int]] = []
        self.reserved: Any = None
        self.held = False  # the last feed stopped for want of room or a credit (`feed`)
        self.status: RunStatus = "completed"
        self.error: str | None = None
        self.started_at = time.time()
        self.ended: float | None = None
        self.context: Any = None
        self.shut = False
        self.dead = DeadLetters(options.dead_letter, options.resume_dead_letters)
        self.parts = PartBooks(options.sink, self.run_id) if options.sink is not None else None
        self.core: RunCore | None = None
        self.device_samples: list[DeviceSample] = []
        self.sampler: Any = None
        self.processes: ProcessBook | None = None
        self.killed_for: dict[int, str] = {}  # worker id -> why the driver stopped it
        self.host: dict[str, Any] | None = None
        self.adapter = (Adapter(options.adapt, self.units) if options.adapt is not None
                        else None)
        self.last_adapt = 0.0
        self.handlers: dict[type, Callable[[Any], None]] = {
            Send: self._send, Spawn: self.spawn, Retire: self.retire,
            DeadLetter: lambda i: self.dead.write(i.failure),
            Emit: self._emit, FrameSizes: self.frame_sizes,
            RestoreCredits: lambda _: self.restore_credits(), Abort: self._abort,
            Report: self._report, Drain: self.drain, Stale: self.stale,
            Finished: lambda _: None,
        }

    # -- what an engine supplies -----------------------------------------------------------

    def connect(self) -> None:
        """Set up the engine's own machinery (channels, a cluster) before any worker starts."""

    def reserve(self, alone: bool) -> Any:
        """Room for one frame to the first unit (``alone``: a worker with nothing else), or
        None when there is none now."""
        raise NotImplementedError

    def unreserve(self, token: Any) -> None:
        """Give back room `reserve` took and no frame used."""

    def transmit(self, token: Any, send: Send) -> None:
        """Send one frame into the room ``token`` holds."""
        raise NotImplementedError

    def spawn(self, instruction: Spawn) -> None:
        """Start a worker."""
        raise NotImplementedError

    def retire(self, instruction: Retire) -> None:
        """Stop a worker once it is idle."""
        raise NotImplementedError

    def frame_sizes(self, instruction: FrameSizes) -> None:
        """Use these frame sizes from now on."""

    def restore_credits(self) -> None:
        """Top flow-control credits back up (engines whose hand-offs can leak them)."""

    def drain(self, instruction: Drain) -> None:
        """Have a batched stage's replicas run what they hold without waiting for fuller
        batches (engines whose replicas wait; others go on as they were)."""

    def stale(self, instruction: Stale) -> None:
        """Have a reader still streaming that item's rows stop (engines whose readers
        stream; others go on as they were)."""

    def wait(self) -> None:
        """Block until something arrives, or a short while passes."""
        raise NotImplementedError

    def pump(self) -> None:
        """Turn everything that arrived into core events (via `handle`)."""
        raise NotImplementedError

    def stop_workers(self) -> None:
        """Stop every worker cleanly, collecting their last counters."""
        raise NotImplementedError

    def release(self) -> None:
        """Free whatever the engine holds (processes, actors, memory); safe to call twice."""

    def describe_host(self) -> dict[str, Any] | None:
        """The machine the run's record describes (this host, for the local engine)."""
        from fitwork.hardware.discover import host_summary

        with contextlib.suppress(Exception):
            return host_summary()
        return None

    def start_devices(self) -> Any:
        """Start sampling accelerators (this host's GPUs through NVML; nothing without one)."""
        from fitwork.telemetry.devices import DeviceSampler

        assert self.core is not None
        interval = max(0.5, self.options.sample_interval)
        return DeviceSampler(interval, self.core.t0, clock=self.clock).start()

    def stop_devices(self) -> list[DeviceSample]:
        """Stop sampling and return the samples (each engine's sampler, in its own way)."""
        return list(self.sampler.stop()) if self.sampler is not None else []

    def worker_pids(self, unit: str | None = None) -> list[int]:
        """Process ids of the workers running now (of ``unit`` only, if named)."""
        return []

    def worker_processes(self) -> list[Worker]:
        """The workers running now as processes of this host (for sampling and the memory
        watchdog); engines whose workers live elsewhere give none."""
        return []

    def shm_prefix(self) -> str | None:
        """The name prefix of the shared-memory files this run makes, if any."""
        return None

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> RunResult:
        """Enter the pipeline's context, start every planned worker, hand back the result."""
        try:
            self.context = self.pipeline.run_context()
            self.context.__enter__()
            if self.parts is not None:
                self.parts.prepare()
            self.connect()
            # before the run's clock starts: a first run in a process reads the host
            # (~0.1 s), which is not the run's work
            self.host = self.describe_host()
            self.core = RunCore(self.stages, self.placement,
                                self.policy, self.run_id, self.clock())
            self.started_at = time.time()
            if self.options.sample_devices:
                self.sampler = self.start_devices()
            self.processes = ProcessBook(self.core.t0, max(0.5, self.options.sample_interval))
            self.execute(self.core.start())
        except BaseException:
            self.shutdown()
            raise
        return RunResult(self)

    def handle(self, event: Event) -> None:
        """Give the core one event and carry out what it says."""
        assert self.core is not None
        self.execute(self.core.handle(event))

    def execute(self, instructions: list[Instruction]) -> None:
        """Carry out the core's instructions in order."""
        handlers = self.handlers
        for instruction in instructions:
            handlers[type(instruction)](instruction)

    def batches(self) -> Generator[list[Any], None, None]:
        """Drive the run; yields lists of outputs as they settle (in source order if
        ``ordered``), one per turn of the loop that settled any."""
        assert self.core is not None
        core = self.core
        handed = self.clock()  # when the caller last got a batch
        try:
            while True:
                if self.resizes:
                    self._apply_resizes()
                self.feed()
                if core.finished:
                    break
                self.wait()
                self.pump()
                now = self.clock()
                self.execute(core.handle(Tick(now, len(self.retries))))
                if self.processes is not None and self.processes.due(now):
                    self._sample_processes(now)
                if self.adapter is not None:
                    self._adapt()
                if self.out:
                    handed = now
                    yield self._handed_out()
                elif self.policy.spans and now - handed >= QUIET_TURN_S:
                    handed = now
                    yield []  # a turn for the caller's journal (see the module docstring)
            self.stop_workers()
            self.ended = self.clock()
            self._report_now()
            if self.out:
                yield self._handed_out()
            if core.source_error is not None:
                self.status, self.error = "aborted", f"the source raised: {core.source_error}"
                raise core.source_error
        except (GeneratorExit, KeyboardInterrupt):
            if not core.finished:
                self.status, self.error = "interrupted", "stopped before the source ran dry"
            raise
        except BaseException as exc:
            if self.status == "completed":
                self.status, self.error = "aborted", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.ended = self.ended or self.clock()
            self.shutdown()

    def _handed_out(self) -> list[Any]:
        """What the caller gets of ``out``: the outputs; with a sink, one count of all the
        outputs committed since the last turn, so that when the caller sees it every span
        and part range the books hold is covered by what it has seen (a journal line
        taken then is consistent)."""
        out, self.out = self.out, []
        return out if self.parts is None else [sum(out)]

    def feed(self) -> None:
        """Send retries first (each alone), then new source items while the core has room."""
        assert self.core is not None
        self.held = True  # the source waits on the pipeline, until it is fed all it gives
        while self.retries:
            token = self.reserve(alone=True)
            if token is None:
                return
            self.transmit(token, self.retries.popleft())
        while True:
            count = self.core.room()
            if count <= 0:
                return
            token = self.reserve(alone=False)
            if token is None:  # the engine's credits, not the core's room, held it back
                return
            self.reserved = token
            fed = self.take(count)
            self.handle(fed)
            if self.reserved is not None:
                self.unreserve(self.reserved)
                self.reserved = None
            if fed.end or self.retries or not fed.items:
                self.held = bool(self.retries)
                return

    def take(self, count: int) -> Fed:
        """Up to ``count`` items from the source, without blocking long on a slow one: in
        pulls that double from `TAKE_CHUNK` while the source keeps up, the clock read
        between them (a fast source costs a few pulls a frame, a slow one waits little)."""
        items: list[Any] = []
        start = self.clock()
        chunk = TAKE_CHUNK
        try:
            while len(items) < count:
                want = min(chunk, count - len(items))
                got = len(items)
                items.extend(itertools.islice(self.source, want))
                if holds_unreadable(items, got):  # a bad input line is fed alone
                    items, self.source = feed_alone(items, got, self.source)
                    return Fed(items, self.clock())
                if len(items) - got < want:
                    return Fed(items, self.clock(), end=True)
                if self.clock() - start > self.take_time:
                    break
                chunk *= 2
        except Exception as error:
            return Fed(items, self.clock(), end=True, error=error)
        return Fed(items, self.clock())

    def _send(self, instruction: Send) -> None:
        if instruction.retry:
            self.retries.append(instruction)
        else:
            token, self.reserved = self.reserved, None
            self.transmit(token, instruction)

    def _abort(self, instruction: Abort) -> None:
        self.status = "aborted"
        self.error = f"{type(instruction.error).__name__}: {instruction.error}"
        raise instruction.error

    def _report(self, instruction: Report) -> None:
        if self.options.progress is not None:
            self.options.progress(instruction.progress)

    def _report_now(self) -> None:
        if self.options.progress is not None and self.core is not None:
            self.options.progress(self.core.progress(self.clock()))

    def _emit(self, instruction: Emit) -> None:
        if self.parts is None:
            self.out.extend(instruction.values)
        else:  # with a sink the outputs are in its parts: these are their places
            self.parts.accept(instruction.values)
            if instruction.values:
                self.out.append(len(instruction.values))  # the caller sees counts
        self.emitted += len(instruction.values)
        if instruction.span is not None:
            self.spans.append((self.emitted, *instruction.span))

    def written(self, message: Written) -> None:
        """A replica of the last unit wrote outputs to its part: they arrive, each as its
        place in the part (what the books accept is what the seal keeps)."""
        self.handle(Arrived(message.segments, self.clock()))

    def settled_spans(self, consumed: int) -> list[tuple[int, int]] | None:
        """Spans whose outputs are all among the first ``consumed`` handed out, if that many
        ends a span (else None: a span's outputs are part way through); see
        `fitwork.engine.contract.RunResult.settled_spans`."""
        spans = self.spans
        if consumed == self.boundary:
            if not spans or spans[0][0] > consumed:
                return []
        elif not spans or spans[0][0] > consumed:
            return None
        ends = 0  # spans at the head that end by ``consumed`` (the deque is in end order)
        for end, _, _ in spans:
            if end > consumed:
                break
            ends += 1
        if spans[ends - 1][0] != consumed:
            return None
        done = [spans.popleft()[1:] for _ in range(ends)]
        self.boundary = consumed
        return done

    def resize(self, unit: str, replicas: int) -> None:
        """Ask for ``replicas`` replicas of ``unit``; applied at the loop's next turn."""
        self.pipeline.unit_named(unit)
        self.resizes.append((unit, replicas))

    def _sample_processes(self, now: float) -> None:
        """Sample the run's processes; stop a worker holding more memory than its unit
        declares (its items are retried alone, then dead-lettered with this reason)."""
        assert self.processes is not None
        self.processes.take(now, self.worker_processes(), self.shm_prefix())
        for worker, rss in self.processes.over_memory:
            if worker.worker in self.killed_for:
                continue
            self.killed_for[worker.worker] = (
                f"stopped by the memory watchdog: {rss / 2**20:,.0f} MiB of its own, over the "
                f"{worker.memory / 2**20:,.0f} MiB unit {worker.unit!r} declares (memory=)")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(worker.pid, signal.SIGKILL)

    def _adapt(self) -> None:
        """Let the adapter look at the books once per sample interval; apply what it says."""
        assert self.core is not None and self.adapter is not None
        now = self.clock()
        if now - self.last_adapt < self.policy.sample_interval:
            return
        self.last_adapt = now
        counts = self.adapter.observe(self.core, now, held=self.held)
        for unit, replicas in (counts or {}).items():
            self.handle(Resize(self.names.index(unit), replicas, now))

    def _apply_resizes(self) -> None:
        assert self.core is not None
        resizes, self.resizes = self.resizes, []
        for unit, replicas in resizes:
            self.handle(Resize(self.names.index(unit), replicas, self.clock()))

    # -- the end ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Release the engine, close the dead letters, leave the context; safe to call twice."""
        if self.shut:
            return
        self.shut = True
        try:
            with contextlib.suppress(Exception):
                self.device_samples = self.stop_devices()
            self.sampler = None
            self.release()
            if self.parts is not None:  # every writer is stopped: nothing moves the parts
                self.parts.seal()
            if self.processes is not None:  # after the release: what the run left behind
                with contextlib.suppress(Exception):
                    self.processes.take(self.clock(), [], self.shm_prefix())
        finally:
            self.dead.close()
            if self.context is not None:
                context, self.context = self.context, None
                with contextlib.suppress(Exception):
                    context.__exit__(None, None, None)

    def close(self) -> None:
        """Stop early if still running; always release what the run holds."""
        if self.core is not None and not self.core.finished and self.status == "completed":
            self.status, self.error = "interrupted", "closed before the source ran dry"
        self.ended = self.ended or self.clock()
        self.shutdown()

    def record(self) -> RunRecord:
        """The run record (of what happened so far, if the run stopped early)."""
        assert self.core is not None
        dead = str(self.options.dead_letter) if self.options.dead_letter else None
        return assemble(self.core, pipeline=self.pipeline.name, engine=self.engine_name,
                        now=self.ended or self.clock(), started_at=self.started_at,
                        status=self.status, error=self.error, dead_letter=dead,
                        device_samples=self.device_samples, host=self.host,
                        process_samples=self.processes.samples if self.processes else (),
                        refits=self.adapter.refits if self.adapter is not None else ())
