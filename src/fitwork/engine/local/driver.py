"""The local engine's driver: a thin shell that forks workers and turns their I/O into events.

::

    source ─▶ driver ──ch0──▶ [unit 0 replicas] ──ch1──▶ [unit 1 replicas] ──ch2──▶ driver ─▶ caller
                 ▲                 │                          │
                 └── control: Ready / Taken / Done / Final ───┘   (the run core's events)

Items move only through the channels: every replica of a unit pulls frames from the one
channel in front of it and pushes its outputs into the next.  The driver feeds the first
channel, reads the last one, and hands every control message to the run core
(`fitwork.engine.core`), which keeps the books and decides; the driver carries out what it
says (fork a replacement, stop a replica, top up credits).  A worker that exits unasked
is reported to the core, which retries what it held; its unit keeps a spare from then on,
forked and built ahead, which the next replacement is handed (`fitwork.engine.local.spare`),
each forked by the stage's zygote rather than the driver (`fitwork.engine.local.zygote`).
A kill can only lose a frame in the instant between receiving it and reporting it; the core
notices the pipeline gone quiet with items pending and has the driver top the channel
credits back up.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import selectors
import signal
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fitwork.engine.contract import RunResult
from fitwork.engine.core import (
    Arrived,
    Done,
    Drain,
    Exited,
    FrameSizes,
    Measured,
    Retire,
    Send,
    Spawn,
    Stale,
    Taken,
)
from fitwork.engine.core.account import counted_items
from fitwork.engine.framing import MAX_FRAME, first_sizes, sizes_told
from fitwork.engine.limits import shared_gate
from fitwork.engine.local.channel import Channel
from fitwork.engine.local.counting import ItemCounts
from fitwork.engine.local.marks import Marks
from fitwork.engine.local.spare import Spare, fork_spare
from fitwork.engine.local.wire import Wire
from fitwork.engine.local.worker import Fatal, Final, WorkerSpec, worker_main
from fitwork.engine.local.zygote import Forked, Zygote
from fitwork.engine.options import LocalOptions, RunOptions
from fitwork.engine.parts import Written
from fitwork.engine.segment import typed
from fitwork.engine.shell import Shell, policy_for
from fitwork.engine.threads import ForkHold
from fitwork.placement import Placement, allot
from fitwork.telemetry.processes import Worker
from fitwork.telemetry.record import RunRecord, WorkerRecord
from fitwork.workload.pipeline import Pipeline

FRAME_TIME = 0.005
QUIET = 1.0
REAP_SCAN = 0.5
"""Seconds between checks of every worker for an exit its sentinel did not show."""
CLOSE_DEATHS = 0.25
"""Deaths of a stage this many seconds apart or closer may outrun its zygote (`spares_wanted`)."""


class LocalEngine:
    """Runs a pipeline as processes on this host."""

    name = "local"
    options = LocalOptions

    def run(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
            options: RunOptions, engine_options: LocalOptions) -> RunResult:
        """Fork the workers and return a result that streams outputs as they come."""
        return LocalRun(pipeline, source, placement, options, engine_options).start()


@dataclass
class _Handle:
    """The driver's view of one worker process."""

    worker_id: int
    stage: int
    process: Any
    pid: int = 0
    final: bool = False
    reported: bool = False
    memory: int = 0  # bytes of its own it may hold (0: no bound; the memory watch's)


class LocalRun(Shell):
    """One run on this host: channels, worker processes, and the core's books."""

    engine_name = "local"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
                 options: RunOptions, local: LocalOptions) -> None:
        stages = len(pipeline.units)
        capacity = local.channel_capacity
        replicas = sum(placement.replicas(u.name) for u in pipeline.units)
        policy = policy_for(options, max_frames=capacity * (stages + 1) + 4 * replicas,
                            frame_time=FRAME_TIME, named_shrink=True,
                            max_frame=MAX_FRAME, quiet_after=QUIET)
        super().__init__(pipeline, source, placement, options, policy)
        self.local = local
        self.ctx = multiprocessing.get_context("fork")
        self.wire = Wire(f"fitwork-{self.run_id}")
        self.marks = Marks()  # before any fork: every worker writes its slot of it
        # enough credits for two frames per replica reading each channel (the sink: one)
        self.channels = [Channel(self.ctx, max(capacity, 2 * placement.replicas(u.name)))
                         for u in pipeline.units] + [Channel(self.ctx, capacity)]
        self.control_send, self.control_recv = socket.socketpair(socket.AF_UNIX,
                                                                 socket.SOCK_DGRAM)
        self.control_recv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.control_recv.setblocking(False)
        # each stage's frame size: its batch (else 0: cut per replica) until the core's
        self.hints: Any = self.ctx.Array(
            "i", [*first_sizes([s.batch_size for s in self.stages]), MAX_FRAME],
            lock=False)
        self.gates = [shared_gate(self.ctx, u.max_concurrency, u.rate_limit)
                      for u in pipeline.units]
        self.handles: dict[int, _Handle] = {}
        self.gpus = local.gpus if local.gpus is not None else visible_gpus()
        self.gpu_turns: dict[int, int] = {}
        # One poll set for the run, changed as workers come and go (building one per wait
        # cost the driver about as much as the rest of its work per frame).
        self.selector = _selector()
        self.selector.register(self.control_recv, selectors.EVENT_READ)
        self.selector.register(self.channels[-1].recv_end, selectors.EVENT_READ)
        self.exited: set[int] = set()  # workers whose sentinel showed an exit
        # bytes this driver moved: frames it fed, and what reached it from the last unit
        self.bytes_sent = self.bytes_from_sink = self.bytes_control = 0
        self.scanned = self.clock()
        self.pools = ForkHold()  # the driver's thread pools, held while it forks workers
        # stages that lost a worker keep one spare, forked and built ahead (`spare`)
        self.spare_stages: set[int] = set()
        self.spares: dict[int, list[Spare]] = {}  # oldest first
        self.spare_records: list[WorkerRecord] = []  # spares let go unused, for the record
        self.zygotes: dict[int, Zygote] = {}  # per stage with spares: what forks them
        self.spares_want: dict[int, int] = {}  # per stage: spares it keeps (`spares_wanted`)
        self.deaths: dict[int, tuple[float, float]] = {}  # per stage: its last two deaths
        self.old_zygotes: list[Zygote] = []  # told to quit: they leave with their last child
        # items in and out per worker counted as items, not deliveries (`counting`)
        self.counts = ItemCounts(self.stage_of, self.pending)

    # -- sending and workers ---------------------------------------------------------------

    def reserve(self, alone: bool) -> Any:
        return True if self.channels[0].credits.acquire(False) else None

    def unreserve(self, token: Any) -> None:
        self.channels[0].credits.release()

    def transmit(self, token: Any, send: Send) -> None:
        data, size = self.wire.dumps((send.frame, [tuple(send.segment)]),
                                     retry=send.segment.attempt > 0)
        self.bytes_sent += size
        if send.retry:  # items sent again: whose items it holds (`counting`)
            self.counts.sent(send.frame)
        self.channels[0].send_end.send(data)

    def spawn(self, instruction: Spawn) -> None:
        stage, unit = instruction.stage, self.units[instruction.stage]
        given = allot(unit, instruction.group)  # what this replica gets, decided once
        spec = WorkerSpec(
            worker_id=instruction.worker, stage=stage, unit=unit, given=given,
            next_replicas=(max(1, self.placement.replicas(self.names[stage + 1]))
                           if stage + 1 < len(self.units) else 1),
            inbox=self.channels[stage], outbox=self.channels[stage + 1],
            control=self.control_send, wire_prefix=self.wire.prefix, hints=self.hints,
            parent_pid=os.getpid(), env=self.worker_env(stage, given.resources.gpu),
            gate=self.gates[stage], marks=self.marks,
            sink=(self.options.sink, self.run_id) if self.options.sink is not None
            and stage == len(self.units) - 1 else None)
        process = self.start_worker(spec)
        self.handles[instruction.worker] = _Handle(
            instruction.worker, stage, process, pid=process.pid or 0,
            memory=given.memory_bound)
        self.selector.register(process.sentinel, selectors.EVENT_READ, instruction.worker)
        # (a replica given a GPU takes the next in turn: a spare would hold the wrong one)
        if (stage in self.spare_stages and not spec.env
                and not (self.core is not None and self.core.stopping)):
            self.ask_spares(spec)

    def ask_spares(self, spec: WorkerSpec) -> None:
        """Have ``spec``'s stage keep ``LocalOptions.spares`` spares: asked of its zygote
        (forked once, the first time; again if the stage's spec changed), so the driver
        does not fork one per death (`fitwork.engine.local.zygote`); forked here only
        where a zygote cannot be had (no ``os.pidfd_open``)."""
        stage, want = spec.stage, self.spares_wanted(spec.stage)
        kept = self.spares.setdefault(stage, [])
        if not hasattr(os, "pidfd_open"):
            while len(kept) < want:
                with self.pools.forking(spec.cores):
                    kept.append(fork_spare(self.ctx, spec, self.clock()))
            return
        zygote = self.zygotes.get(stage)
        if zygote is not None and not zygote.fits(spec):  # its workers live on: no kill
            zygote.quit()
            self.old_zygotes.append(self.zygotes.pop(stage))
            while zygote.made:
                self.let_go(zygote.made.pop())
            zygote = None
        if zygote is None:
            with self.pools.forking(spec.cores):
                zygote = self.zygotes[stage] = Zygote(self.ctx, spec)
            self.selector.register(zygote.sock, selectors.EVENT_READ)
        while len(kept) + len(zygote.made) + zygote.asked < want:
            zygote.ask()

    def spares_wanted(self, stage: int) -> int:
        """Spares ``stage`` keeps: ``LocalOptions.spares``, one more each time a death of
        it found none ready within `CLOSE_DEATHS` of the one before (`start_worker`), up
        to that plus one per replica.  A spare covers one death while the zygote forks and
        builds the next (tens of ms on a busy host); deaths closer than that each found
        none and were forked by the driver (rows that kill once, 15 deaths a second in
        ``bench/poison.py``: 30-40 of 202 with one spare, 2-3 with this rule).  A death
        long after the last that found none met a zygote slow for another reason (a
        loaded host), which more spares would not cure: the stage keeps what it was told."""
        return self.spares_want.get(stage, int(self.local.spares))

    def collect_spares(self) -> None:
        """Take the spares the zygotes have forked (and the exit codes they reported)."""
        for zygote in self.old_zygotes:
            zygote.collect(self.clock())
            while zygote.made:
                self.let_go(zygote.made.pop())
        for stage, zygote in self.zygotes.items():
            zygote.collect(self.clock())
            if zygote.made:
                self.spares.setdefault(stage, []).extend(zygote.made)
                zygote.made = []
        for zygote in [*self.old_zygotes, *self.zygotes.values()]:
            if zygote.ended and zygote.sock in self.selector.get_map():
                self.selector.unregister(zygote.sock)  # gone (a current one is replaced)

    def start_worker(self, spec: WorkerSpec) -> Any:
        """The process of a new worker: its stage's spare, handed over, if it has one that
        fits; else one forked now (it builds its unit before it serves)."""
        if spec.stage in self.zygotes:
            self.collect_spares()
        kept = self.spares.get(spec.stage, [])
        while kept:
            spare = kept.pop(0)
            if spare.fits(spec):
                spare.hand_over(spec.worker_id)  # built already: it serves at once
                return spare.process
            self.let_go(spare)
        zygote = self.zygotes.get(spec.stage)
        before, last = self.deaths.get(spec.stage, (-1e9, 0.0))
        if zygote is not None and self.local.spares and last - before <= CLOSE_DEATHS:
            cap = int(self.local.spares) + self.placement.replicas(self.names[spec.stage])
            self.spares_want[spec.stage] = min(cap, self.spares_wanted(spec.stage) + 1)
        process = self.ctx.Process(target=worker_main, args=(spec,), daemon=True,
                                   name=f"fitwork-{spec.unit.name}-{spec.worker_id}")
        with self.pools.forking(spec.cores):  # the child starts with its pools held to its cores
            process.start()
        return process

    def let_spares_go(self) -> None:
        """Stop every spare (the run is ending); the zygotes fork no more."""
        self.collect_spares()
        for zygote in self.zygotes.values():
            zygote.quit()
        for kept in self.spares.values():
            while kept:
                self.let_go(kept.pop())

    def let_go(self, spare: Spare) -> None:
        """Stop a spare never handed over; its building CPU goes in the record."""
        cpu = spare.cpu_seconds()
        t0 = self.core.t0 if self.core is not None else spare.born
        self.spare_records.append(WorkerRecord(
            worker_id=-1, unit=spare.spec.unit.name, pid=spare.process.pid or 0,
            started_s=spare.born - t0, ended_s=self.clock() - t0, build_cpu_s=cpu,
            exit_cause="a spare, let go unused"))
        spare.close()

    def stage_of(self, worker: int) -> int | None:
        """The stage of one of this run's workers (None: not one the core knows)."""
        books = self.core.workers.get(worker) if self.core is not None else None
        return books.stage if books is not None else None

    def pending(self) -> dict[int, Any]:
        """The core's feed frames not settled yet, by id."""
        return self.core.frames if self.core is not None else {}

    def record(self) -> RunRecord:
        """The run's record, with the spares let go unused among its workers (the CPU
        they spent building their unit counted in their unit's)."""
        record = self.counted(super().record())
        if not self.spare_records:
            return record
        units = [u.model_copy(update={"build_cpu_s": u.build_cpu_s + sum(
            r.build_cpu_s for r in self.spare_records if r.unit == u.name)})
            for u in record.units]
        return record.model_copy(update={"workers": [*record.workers, *self.spare_records],
                                         "units": units})

    def counted(self, record: RunRecord) -> RunRecord:
        """``record`` with each worker's items in and out, and so each unit's, counted as
        items, not deliveries (`fitwork.engine.local.counting`)."""
        return counted_items(record, self.counts.items_in, self.counts.items_out)

    def worker_env(self, stage: int, gpu: float) -> dict[str, str]:
        """Environment for a new replica: replicas that ask for a GPU take visible GPUs in
        turn."""
        if not gpu or not self.gpus:
            return {}
        turn = self.gpu_turns.get(stage, 0)
        self.gpu_turns[stage] = turn + 1
        return {"CUDA_VISIBLE_DEVICES": self.gpus[turn % len(self.gpus)]}

    def retire(self, instruction: Retire) -> None:
        self.channels[instruction.stage].put_stop()

    def drain(self, instruction: Drain) -> None:
        self.channels[instruction.stage].put_drain()

    def stale(self, instruction: Stale) -> None:
        self.marks.stale(instruction.frame, instruction.offset)

    def frame_sizes(self, instruction: FrameSizes) -> None:
        told = sizes_told(instruction.sizes, instruction.measured,
                          first_sizes([s.batch_size for s in self.stages]))
        for stage, size in enumerate(told):
            self.hints[stage] = size

    def restore_credits(self) -> None:
        for channel in self.channels:
            channel.restore_credits()

    def worker_pids(self, unit: str | None = None) -> list[int]:
        return [h.pid for h in self.handles.values() if not h.reported and h.pid
                and (unit is None or self.names[h.stage] == unit)]

    def worker_processes(self) -> list[Worker]:
        return [Worker(h.worker_id, self.names[h.stage], h.pid, h.memory)
                for h in self.handles.values() if not h.reported and h.pid] + [
            Worker(-1, f"{self.names[stage]} (spare)", s.process.pid, 0)
            for stage, kept in self.spares.items() for s in kept if s.process.pid]

    def shm_prefix(self) -> str | None:
        return self.wire.prefix

    # -- turning I/O into events -----------------------------------------------------------

    def wait(self) -> None:
        for key, _ in self.selector.select(self.options.sample_interval):
            if key.data is not None:  # a worker's sentinel: it exited
                self.exited.add(key.data)
                handle = self.handles.get(key.data)
                if handle is not None and isinstance(handle.process, Forked):
                    # a pidfd stays readable until its zygote's report of the exit code
                    # comes (its socket wakes this wait): unwatched, it spins no turns
                    self.selector.unregister(key.fileobj)

    def pump(self) -> None:
        if self.zygotes or self.old_zygotes:
            self.collect_spares()
        self.drain_control()
        self.drain_sink()
        self.drain_control()  # a worker's report precedes its outputs downstream
        self.reap()

    def drain_control(self) -> None:
        """Hand every control message waiting to the core."""
        recv, loads, handle = self.control_recv.recv, self.wire.loads, self.handle
        while True:
            try:
                data = recv(1 << 17)
            except BlockingIOError:
                return
            message, size = loads(data)
            self.bytes_control += size
            kind = type(message)
            if kind is Taken:
                self.counts.taken(message)
                handle(message)
            elif kind is Done:
                self.counts.done(message)
                handle(message)
            elif kind is Written:
                self.written(message)
            elif kind is Final:
                worker = self.handles.get(message.worker)
                if worker is not None:
                    worker.final = True
                handle(Measured(message.worker, message.counters, self.clock(),
                                message.intervals))
            elif kind is Fatal:
                self.handle(Exited(message.worker, clean=False, now=self.clock(),
                                   cause="its unit could not start", fatal=message.error))
            else:
                handle(message)

    def drain_sink(self) -> None:
        """Hand the finished frames waiting in the last channel to the core: at most as many
        as it holds, so outputs wait in the workers (backpressure), not in the driver,
        while the caller reads slower than the pipeline makes them."""
        sink, loads, handle = self.channels[-1], self.wire.loads, self.handle
        for _ in range(sink.capacity):
            data = sink.get(timeout=0)
            if data is None:
                return
            (frame, segments), size = loads(data)
            self.bytes_from_sink += size
            arrived = typed(segments)
            self.counts.delivered(frame, [(s.frame, s.offsets) for s in arrived])
            handle(Arrived(arrived, self.clock()))

    def reap(self) -> None:
        """Report workers that exited (a clean stop, or a death) to the core: those whose
        sentinel showed it, and every worker now and then."""
        now = self.clock()
        check = set(self.exited)
        if now - self.scanned >= REAP_SCAN:
            self.scanned = now
            check.update(w for w, h in self.handles.items() if not h.reported)
        for worker in check:
            handle = self.handles.get(worker)
            if handle is None or handle.reported:
                self.exited.discard(worker)
                continue
            if handle.process.exitcode is None:
                continue  # its sentinel closed a moment before the exit can be collected
            self.exited.discard(worker)
            handle.reported = True
            with contextlib.suppress(KeyError, ValueError):  # a zygote's: unwatched already
                self.selector.unregister(handle.process.sentinel)
            code = handle.process.exitcode
            cause = self.killed_for.pop(handle.worker_id, None) or (
                f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
            # Forget the process (its sentinel is a file descriptor): a run that replaces
            # workers for days must not hold one per worker it ever had.
            del self.handles[worker]
            handle.process.close()
            if not handle.final:  # it died: a frame it was still writing is no one's
                self.wire.sweep_unsent(handle.pid)
                self.marks.want(handle.stage)  # its stage's workers mark items from now on
                if self.local.spares:  # its stage keeps a spare from now on
                    self.spare_stages.add(handle.stage)
                    last = self.deaths.get(handle.stage, (-1e9, -1e9))[1]
                    self.deaths[handle.stage] = (last, self.clock())
            self.counts.ended(worker)  # what it held is counted where it runs again
            self.handle(Exited(handle.worker_id, clean=handle.final, now=self.clock(),
                               cause=cause, code=code,
                               died_in=None if handle.final else
                               self.marks.died_in(handle.worker_id)))

    def stop_workers(self) -> None:
        """Tell every worker to stop, collect their final counters, and wait for them."""
        self.let_spares_go()
        for handle in self.handles.values():
            if not handle.reported:
                self.channels[handle.stage].put_stop()
        deadline = self.clock() + 10
        while self.clock() < deadline:
            if all(h.reported for h in self.handles.values()):
                break
            self.wait()
            self.pump()
        for handle in self.handles.values():
            handle.process.join(timeout=2)

    def release(self) -> None:
        """Kill what still runs, remove shared memory, close channels."""
        self.let_spares_go()
        for handle in self.handles.values():
            if handle.process.exitcode is None:
                with contextlib.suppress(ProcessLookupError, OSError):
                    os.kill(handle.process.pid, signal.SIGKILL)
        for handle in self.handles.values():
            handle.process.join(timeout=5)
        for zygote in [*self.zygotes.values(), *self.old_zygotes]:  # their workers are gone
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(zygote.sock)
            zygote.close()
        self.zygotes, self.old_zygotes = {}, []
        self.pools.release()
        self.wire.sweep()
        self.selector.close()
        for channel in self.channels:
            channel.close()
        self.control_send.close()
        self.control_recv.close()
        self.marks.close()


def _selector() -> selectors.BaseSelector:
    """A poll set with no kernel object of its own (nothing for forked workers to inherit)."""
    return selectors.PollSelector() if hasattr(selectors, "PollSelector") \
        else selectors.SelectSelector()


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


__all__ = ["LocalEngine", "LocalRun", "visible_gpus"]
