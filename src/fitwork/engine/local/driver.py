"""The local engine's driver: forks workers, feeds the source, keeps the books, never relays.

::

    source ─▶ driver ──ch0──▶ [unit 0 replicas] ──ch1──▶ [unit 1 replicas] ──ch2──▶ driver ─▶ caller
                 ▲                 │                          │
                 └──── control: hello / took / done / final ──┘

Items move only through the channels: every replica of a unit pulls frames from the one
channel in front of it and pushes its outputs into the next.  The driver feeds the first
channel from the source and reads the last one for the caller; between the two it only
hears small control messages, from which it knows which frames each worker holds (to
retry them if the worker dies), when each source item is finished (by weights, see
`worker`), and what every worker measured.

Faults: a worker that exits without being told is replaced; the source items of the frames
it held are fed again as a new generation, alone in their frames, and one that has killed
``max_attempts`` workers goes to the dead letters as poison.  Outputs are deduplicated by
(source id, path), so a retried item delivers each output once.  A kill can only lose a
frame in the instant between receiving it and reporting it; the driver notices that as a
pipeline that has gone quiet with items still pending, tops the channel credits back up,
and feeds those items again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from multiprocessing.connection import wait
from typing import Any

from fitwork.engine.base import RunOptions, RunResult
from fitwork.engine.books import RunBooks
from fitwork.engine.local.channel import Channel
from fitwork.engine.local.wire import Wire
from fitwork.engine.local.worker import WorkerSpec, worker_main
from fitwork.errors import EngineError, FitworkError
from fitwork.telemetry.record import (
    RunRecord,
    WorkerRecord,
)
from fitwork.workload.pipeline import Pipeline

_FRAME_TIME = 0.005
_MAX_FRAME = 256
_QUIET = 1.0


class LocalEngine:
    """Runs a pipeline as processes on this host."""

    name = "local"

    def run(self, pipeline: Pipeline, source: Iterable[Any], options: RunOptions) -> RunResult:
        """Fork the workers and return a result that streams outputs as they come."""
        return _LocalRun(pipeline, source, options).start()


class _Pending:
    """A source item fed and not yet finished (paths and buffer appear only when needed)."""

    __slots__ = ("attempts", "buffered", "fed_at", "gen", "item", "paths", "weight")

    def __init__(self, item: Any, fed_at: float) -> None:
        self.item, self.fed_at = item, fed_at
        self.gen = self.attempts = 0
        self.weight: Fraction | int = 0
        self.paths: set[tuple[int, ...]] | None = None
        self.buffered: list[tuple[tuple[int, ...], Any]] | None = None


@dataclass
class _Handle:
    """The driver's view of one worker process."""

    worker_id: int
    stage: int
    process: Any
    started: float
    pid: int = 0
    ready: bool = False
    final: bool = False
    ended: float | None = None
    held: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    counters: tuple[int, int, int, int, float, float] = (0, 0, 0, 0, 0.0, 0.0)
    intervals: list[tuple[float, float]] = field(default_factory=list)


class _LocalRun(RunBooks):
    """One run: its channels, workers and books."""

    engine_name = "local"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], options: RunOptions) -> None:
        super().__init__(pipeline, source, options)
        self.ctx = multiprocessing.get_context("fork")
        self.wire = Wire(f"fitwork-{self.run_id}")
        self.channels = [Channel(self.ctx, options.channel_capacity)
                         for _ in range(len(self.units) + 1)]
        self.control_send, self.control_recv = socket.socketpair(socket.AF_UNIX,
                                                                 socket.SOCK_DGRAM)
        self.control_recv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.control_recv.setblocking(False)
        self.hints: Any = self.ctx.Array("i", [1] * len(self.units) + [_MAX_FRAME], lock=False)
        self.handles: dict[int, _Handle] = {}
        self.worker_ids = itertools.count(1)
        self.frame_ids = itertools.count()
        self.pending: dict[int, _Pending] = {}
        self.retry: deque[int] = deque()
        self.fed_records = 0
        self.last_activity = self.last_sample = 0.0
        self.stopping = False
        self.shut = False
        self.gpus = options.gpus if options.gpus is not None else visible_gpus()
        self.gpu_turns: dict[int, int] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> RunResult:
        """Enter the pipeline's context, fork every replica, and hand back the result."""
        try:
            self.enter_context()
            self.last_activity = self.t0
            for stage, unit in enumerate(self.units):
                for _ in range(unit.replicas):
                    self.spawn(stage)
        except BaseException:
            self.shutdown()
            raise
        events = self.events()
        return RunResult(events, self.build_record, lambda: self.close(events),
                         lambda: [h.pid for h in self.handles.values()
                                  if h.ended is None and h.pid])

    def close(self, events: Iterator[Any]) -> None:
        """Stop early if still running; always release processes and memory."""
        close = getattr(events, "close", None)
        if close:
            close()
        self.shutdown()

    def spawn(self, stage: int) -> _Handle:
        """Fork one replica of ``stage``'s unit."""
        worker_id = next(self.worker_ids)
        spec = WorkerSpec(
            worker_id=worker_id, stage=stage, unit=self.units[stage],
            inbox=self.channels[stage], outbox=self.channels[stage + 1],
            control=self.control_send, wire_prefix=self.wire.prefix, hints=self.hints,
            parent_pid=os.getpid(), env=self.worker_env(stage),
        )
        process = self.ctx.Process(target=worker_main, args=(spec,), daemon=True,
                                   name=f"fitwork-{self.units[stage].name}-{worker_id}")
        process.start()
        handle = _Handle(worker_id, stage, process, time.monotonic(), pid=process.pid or 0)
        self.handles[worker_id] = handle
        return handle

    def worker_env(self, stage: int) -> dict[str, str]:
        """Environment for a new replica: a GPU unit's replicas take visible GPUs in turn."""
        if not self.units[stage].resources.gpu or not self.gpus:
            return {}
        turn = self.gpu_turns.get(stage, 0)
        self.gpu_turns[stage] = turn + 1
        return {"CUDA_VISIBLE_DEVICES": self.gpus[turn % len(self.gpus)]}

    def shutdown(self) -> None:
        """Kill what still runs, remove shared memory, close channels; safe to call twice."""
        if self.shut:
            return
        self.shut = True
        for handle in self.handles.values():
            if handle.process.exitcode is None:
                with contextlib.suppress(ProcessLookupError, OSError):
                    os.kill(handle.process.pid, signal.SIGKILL)
        for handle in self.handles.values():
            handle.process.join(timeout=5)
            if handle.ended is None:
                handle.ended = time.monotonic()
        self.ended = self.ended or time.monotonic()
        self.wire.sweep()
        for channel in self.channels:
            channel.close()
        self.control_send.close()
        self.control_recv.close()
        self.ledger.close()
        self.exit_context()

    # -- the event loop --------------------------------------------------------------------

    def events(self) -> Iterator[Any]:
        """Drive the run; yields outputs as they finish (in source order if ``ordered``)."""
        try:
            while not (self.source_done and not self.pending and not self.retry):
                self.feed()
                self.wait()
                self.drain_control()
                self.drain_sink()
                self.reap()
                self.tick()
                if self.abort:
                    raise self.abort
                if self.out:
                    while self.out:
                        yield self.out.popleft()
                    self.last_activity = time.monotonic()
            self.stop_workers()
            self.ended = time.monotonic()
            self.report_progress(force=True)
            if self.source_error:
                raise self.source_error
        finally:
            self.shutdown()

    def wait(self) -> None:
        """Sleep until a message, an output or a worker exit arrives (or a short timeout)."""
        handles = [h.process.sentinel for h in self.handles.values() if h.ended is None]
        wait([self.control_recv, self.channels[-1].recv_end, *handles],
             timeout=self.options.sample_interval)

    def feed(self) -> None:
        """Send source items (retries first) into the first channel while credits allow."""
        channel = self.channels[0]
        while self.retry:
            src = self.retry[0]
            pending = self.pending.get(src)
            if pending is None:
                self.retry.popleft()
                continue
            record = (src, pending.gen, (), 0, pending.attempts, pending.item)
            data, _ = self.wire.dumps((next(self.frame_ids), [record]))
            if not channel.try_put(data):
                return
            self.retry.popleft()
            self.fed_records += 1
        while not self.source_done:
            if self.window_full():
                return
            if not channel.credits.acquire(False):
                return
            records = self.take_source(max(1, self.hints[0]))
            if not records:
                channel.credits.release()
                return
            data, _ = self.wire.dumps((next(self.frame_ids), records))
            channel.send_end.send(data)
            self.fed_records += len(records)

    def take_source(self, count: int) -> list[tuple[Any, ...]]:
        """Up to ``count`` new records from the source, each pending until finished."""
        def make(src: int, item: Any, now: float) -> tuple[Any, ...]:
            self.pending[src] = _Pending(item, now)
            return (src, 0, (), 0, 0, item)

        return self.take(count, make)

    def drain_control(self) -> None:
        """Handle every control message waiting."""
        while True:
            try:
                data = self.control_recv.recv(1 << 17)
            except BlockingIOError:
                return
            self.last_activity = time.monotonic()
            message, _ = self.wire.loads(data)
            handle = self.handles.get(message[1])
            if handle is None:
                continue
            getattr(self, f"on_{message[0]}")(handle, *message[2:])

    def on_hello(self, handle: _Handle, pid: int) -> None:
        handle.pid, handle.ready = pid, True

    def on_took(self, handle: _Handle, frame_id: int, sources: list[tuple[int, int]]) -> None:
        handle.held[frame_id] = sources

    def on_done(self, handle: _Handle, frames: list[int], returns: list[tuple[int, int, int]],
                failures: list[dict[str, Any]], counters: tuple[Any, ...],
                intervals: list[list[float]]) -> None:
        for frame_id in frames:
            handle.held.pop(frame_id, None)
        self.update(handle, counters, intervals)
        for failure in failures:
            self.dead_letter(failure)
        for src, gen, weight in returns:
            self.credit(src, gen, weight)

    def on_final(self, handle: _Handle, counters: tuple[Any, ...],
                 intervals: list[list[float]]) -> None:
        handle.final = True
        self.update(handle, counters, intervals)

    def on_fatal(self, handle: _Handle, error: str, trace: str) -> None:
        name = self.units[handle.stage].name
        self.abort = EngineError(f"unit {name!r} could not start in its worker: {error}; "
                                 "fix its constructor (it runs once per replica)")

    def update(self, handle: _Handle, counters: tuple[Any, ...],
               intervals: list[list[float]]) -> None:
        """Take a worker's latest cumulative counters and new busy intervals."""
        handle.counters = tuple(counters)  # type: ignore[assignment]
        handle.intervals.extend((s - self.t0, e - self.t0) for s, e in intervals)

    def drain_sink(self) -> None:
        """Read every finished frame waiting in the last channel."""
        sink, pending_of, ordered = self.channels[-1], self.pending, self.options.ordered
        while True:
            data = sink.get(timeout=0)
            if data is None:
                return
            self.last_activity = time.monotonic()
            (_, records), _ = self.wire.loads(data)
            for src, gen, path, weight, _, value in records:
                pending = pending_of.get(src)
                if pending is None:
                    continue
                if not weight and not path and not pending.paths and gen == pending.gen:
                    self.outputs += 1  # the common case: a 1:1 item, first delivery
                    if ordered:
                        pending.buffered = [(path, value)]
                    else:
                        self.out.append(value)
                    self.finish_item(src)
                    continue
                paths = pending.paths if pending.paths is not None else set()
                pending.paths = paths
                if path not in paths:
                    paths.add(path)
                    self.outputs += 1
                    if ordered:
                        if pending.buffered is None:
                            pending.buffered = []
                        pending.buffered.append((path, value))
                    else:
                        self.out.append(value)
                self.credit(src, gen, weight)

    def credit(self, src: int, gen: int, weight: int) -> None:
        """Add weight returned for a source item; at a total of 1 the item is finished."""
        pending = self.pending.get(src)
        if pending is None or pending.gen != gen:
            return
        if weight == 0 and not pending.weight:
            self.finish_item(src)
            return
        pending.weight += Fraction(1, 1 << weight)
        if pending.weight == 1:
            self.finish_item(src)

    def finish_item(self, src: int) -> None:
        """A source item is done: record its latency and release its outputs if ordered."""
        pending = self.pending.pop(src)
        parts = sorted(pending.buffered or (), key=lambda pv: pv[0])
        self.complete(src, pending.fed_at, [value for _, value in parts])

    # -- failures --------------------------------------------------------------------------

    def dead_letter(self, failure: dict[str, Any]) -> None:
        """Write one failed item to the dead letters; abort past ``max_failures``."""
        self.ledger.dead_letter(failure)
        self.abort = self.abort or self.ledger.abort

    def reap(self) -> None:
        """Replace workers that exited unasked and retry what they held."""
        for handle in list(self.handles.values()):
            if handle.ended is not None or handle.process.exitcode is None:
                continue
            handle.ended = time.monotonic()
            if handle.final:
                continue
            self.restarts += 1
            self.deaths_since_progress += 1
            unit = self.units[handle.stage]
            code = handle.process.exitcode
            cause = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            for sources in handle.held.values():
                for src, gen in sources:
                    pending = self.pending.get(src)
                    if pending is not None and pending.gen == gen:
                        self.retry_or_poison(src, unit.name, f"worker died ({cause})")
            handle.held.clear()
            limit = 3 * self.options.max_attempts + 2 * sum(u.replicas for u in self.units)
            if self.deaths_since_progress > limit and not self.abort:
                self.abort = EngineError(
                    f"workers of unit {unit.name!r} keep dying ({cause}) and no item has "
                    f"finished in {self.deaths_since_progress} restarts; check its memory "
                    "demand and native code")
            elif not self.stopping:
                self.spawn(handle.stage)

    def retry_or_poison(self, src: int, unit: str, why: str) -> None:
        """Feed a source item again, or dead-letter it once it has used its attempts."""
        pending = self.pending[src]
        pending.attempts += 1
        if pending.attempts >= self.options.max_attempts:
            self.dead_letter({
                "item": src, "path": [], "unit": unit, "kind": "poison",
                "error": f"{why} on each of {pending.attempts} attempts",
                "traceback": "", "attempt": pending.attempts,
                "input": _portable(pending.item)})
            self.finish_item(src)
            return
        self.retries += 1
        pending.gen += 1
        pending.weight = 0
        self.retry.append(src)

    # -- housekeeping ----------------------------------------------------------------------

    def tick(self) -> None:
        """Sample queue depths, tune frame sizes, report progress, and catch lost frames."""
        now = time.monotonic()
        if now - self.last_sample >= self.options.sample_interval:
            self.last_sample = now
            self.samples.append((now - self.t0, self.depths()))
            self.tune_frames()
        self.report_progress()
        stalled = (self.pending or not self.source_done) and not self.retry
        if stalled and now - self.last_activity > _QUIET and self.quiet():
            self.last_activity = now
            for channel in self.channels:
                channel.restore_credits()
            for src in list(self.pending):
                self.retry_or_poison(src, self.units[0].name, "frame lost with a killed worker")

    def quiet(self) -> bool:
        """True when every worker is up and holds nothing: nothing can be in flight."""
        live = [h for h in self.handles.values() if h.ended is None]
        return all(h.ready and not h.held for h in live)

    def depths(self) -> list[int]:
        """Items waiting in front of each unit (sent into its channel, not yet taken)."""
        sent = [self.fed_records] + [0] * len(self.units)
        taken = [0] * len(self.units)
        for handle in self.handles.values():
            taken[handle.stage] += handle.counters[0]
            sent[handle.stage + 1] += handle.counters[1]
        return [max(0, sent[i] - taken[i]) for i in range(len(self.units))]

    def tune_frames(self) -> None:
        """Size each unit's input frames to about 5 ms of its measured work."""
        items = [0] * len(self.units)
        busy = [0.0] * len(self.units)
        for handle in self.handles.values():
            items[handle.stage] += handle.counters[0]
            busy[handle.stage] += handle.counters[4]
        for stage, unit in enumerate(self.units):
            if not items[stage]:
                continue
            per_item = max(busy[stage] / items[stage], 1e-7)
            size = int(min(_MAX_FRAME, max(1, _FRAME_TIME / per_item)))
            if unit.is_io:
                size = min(size, max(1, unit.resources.io // 2))
            self.hints[stage] = size

    def report_progress(self, force: bool = False) -> None:
        """Hand the progress callback a snapshot, with each unit's live counters."""
        if self.options.progress is not None:
            counters = ((h.stage, {"items_in": h.counters[0], "items_out": h.counters[1],
                                   "busy_s": h.counters[4], "cpu_s": h.counters[5]})
                        for h in self.handles.values())
            super().report_progress(self.live_figures(counters), force)

    def stop_workers(self) -> None:
        """Tell every worker to stop, collect their final counters, and wait for them."""
        self.stopping = True
        for stage, channel in enumerate(self.channels[:-1]):
            for handle in self.handles.values():
                if handle.stage == stage and handle.ended is None:
                    channel.put_stop()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            live = [h for h in self.handles.values() if h.ended is None and not h.final]
            if not live:
                break
            self.wait()
            self.drain_control()
            self.drain_sink()
            self.reap()
        for handle in self.handles.values():
            handle.process.join(timeout=2)
            if handle.ended is None:
                handle.ended = time.monotonic()

    # -- the record ------------------------------------------------------------------------

    def build_record(self) -> RunRecord:
        """Assemble the run record from everything the workers reported."""
        return self.assemble([
            WorkerRecord(
                worker_id=h.worker_id, unit=self.units[h.stage].name, pid=h.pid,
                started_s=h.started - self.t0,
                ended_s=(h.ended - self.t0) if h.ended is not None else None,
                exit_code=h.process.exitcode, items_in=h.counters[0], items_out=h.counters[1],
                bytes_in=h.counters[2], bytes_out=h.counters[3], busy_s=h.counters[4],
                cpu_s=h.counters[5], busy_intervals=h.intervals)
            for h in self.handles.values()
        ])


def visible_gpus(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else every NVML GPU."""
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return tuple(g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1")
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
        try:
            return tuple(str(i) for i in range(pynvml.nvmlDeviceGetCount()))
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return ()


def _portable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return {"repr": repr(value)[:1000]}
    return value


__all__ = ["FitworkError", "LocalEngine"]
