"""The profiler: runs each unit alone, in a forked process, on sample items.

Each unit runs in its own child process (so its peak memory is its own), after its
constructor, over the outputs the previous unit produced for the same samples.  Batched
units are measured at several batch sizes up to their declared one.  Per item it records
wall seconds, CPU seconds (their ratio tells I/O-bound from compute-bound), accelerator
seconds, FLOPs, bytes in and out, bytes through device memory, the output ratio, the peak
RSS above the process's starting point and the device memory one replica holds.

Each unit is measured under the conditions of a run: its BLAS, OpenMP and torch pools are
held to the threads a replica of it gets (its declared cores, rounded up:
`fitwork.profiling.pools`), so no spinning pool thread counts as its CPU and its rates are
the ones its replicas show.  A unit held to more than one thread is timed again at one, to
say whether its threads really run at once (``thread_speedup``); the cores one replica
keeps busy (``parallelism``) is 1 unless they do, or its own threads ran at once (CPU
seconds over wall), and its CPU per item is never more than one thread spent.

Every figure is measured on one device class (`fitwork.profiling.classes`): the host's CPU
class as discovery finds it (``cpu-x86``, ``cpu-arm``), or, for a unit that holds a GPU
share on a host with a GPU, that GPU's class; either can be given instead.  On an
accelerator, the pluggable timers of `fitwork.profiling.timers` measure its device time
(the unit's own clock, CUDA events, onnxruntime runs) and, where they can, its device
memory.  After the timing, one batch at the unit's batch size is counted without timing:
FLOPs by torch's FLOP counter, else by onnxruntime's profiler on a fresh replica
(`fitwork.profiling.onnx`), which also gives the bytes a unit on an accelerator moves
through device memory.  What the unit declares (``flops``, ``device_bytes``,
``device_memory``) wins over what is counted or measured.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from fitwork.errors import FitworkError
from fitwork.forked import ChildFailed, forked_ints, run_forked
from fitwork.hardware.discover import usable_cores
from fitwork.placement import allot
from fitwork.profiling.classes import MeasuredOn, measured_on
from fitwork.profiling.corun import loaded_factor, worth_measuring
from fitwork.profiling.in_turn import in_turn
from fitwork.profiling.marked import marked
from fitwork.profiling.onnx import Runs, watch_runs
from fitwork.profiling.pools import hold_pools
from fitwork.profiling.ratios import counted_ratios
from fitwork.profiling.record import (
    WAIT_THREADS,
    BatchMeasurement,
    OthersReadings,
    PipelineProfile,
    UnitProfile,
    call_spread,
    host_busy_seconds,
    host_load,
    others_share,
)
from fitwork.profiling.shares import pipeline_duty, share_readings
from fitwork.profiling.timers import Timers
from fitwork.profiling.torch_count import count as torch_count
from fitwork.profiling.wire_cost import LARGE_ITEM, wire_scale, wire_seconds_per_byte
from fitwork.telemetry.host_speed import host_speed
from fitwork.telemetry.schedstat import run_queue_seconds
from fitwork.version import __version__
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.pipeline import Pipeline
from fitwork.workload.unit import PerItem, Unit


class ProfileError(FitworkError, RuntimeError):
    """A unit could not be profiled (it failed on every sample, or its process died)."""


def profile_pipeline(
    pipeline: Pipeline,
    items: Iterable[Any],
    *,
    samples: int = 32,
    host_class: str | None = None,
    accelerator_class: str | None = None,
    progress: Callable[[str], None] | None = None,
    notice: Callable[[str], None] | None = None,
    loaded: bool = True,
) -> PipelineProfile:
    """Profile every unit of ``pipeline`` on the first ``samples`` items.  Where the input
    has more and the units up to its last filter or flat-map are cheap, their output ratios
    are counted over up to `fitwork.profiling.ratios.RATIO_ITEMS` items after those too.

    ``host_class`` (a CPU class) and ``accelerator_class`` name the classes the figures are
    measured on; each one not given is discovered on this host.

    A sample that kills the process measuring a unit (a segfault, the OOM killer, a
    ``SIGKILL``) is left out of that unit's figures, and of what the units after it are
    measured on: its ``samples`` still counts it, and its ``failures`` counts it as failed.
    ``notice`` (by default a line on stderr) is told which unit left out how many; only a
    unit that no sample survives fails the profile.

    With ``loaded`` (the default), a unit that works the CPU is also timed with a copy of
    it on every core at once (`fitwork.profiling.corun`): its ``loaded_factor``; and the
    share of the host several processes get at once is read (`fitwork.profiling.shares`).
    """
    source = iter(items)
    inputs = list(itertools.islice(source, samples))
    if not inputs:
        raise ProfileError("profile: the input has no items; give at least one sample")
    speed = host_speed()
    on = measured_on(host_class, accelerator_class,
                     discover_accelerator=any(u.resources.gpu > 0 for u in pipeline.units))
    profiles, first = [], inputs
    with pipeline.run_context(), marked():  # units may ask `profiling_now`
        for unit in pipeline.units:
            if progress:
                progress(unit.name)
            profile, outputs = _measure_in_child(unit, inputs, on, notice or _on_stderr)
            if loaded and not on.on_accelerator(unit):
                profile = _under_load(unit, inputs, profile)
            profiles.append(profile)
            inputs = outputs[: max(samples, 1) * 4]
            if not inputs and unit is not pipeline.units[-1]:
                raise ProfileError(
                    f"profile: unit {unit.name!r} produced no outputs from {profile.samples} "
                    "samples, so the units after it cannot be measured; give more samples")
        profiles = counted_ratios(pipeline.units, profiles, source)
        fused = _fused_memory(pipeline, first) if len(pipeline.units) > 1 else None
    shares = share_readings(duty=_duty(profiles)) if loaded else {}
    large = max((max(u.bytes_in, u.bytes_out) for u in profiles), default=0) >= LARGE_ITEM
    # the scale is derived from the reading as stored, so a profile's two figures agree
    ns = round(wire_seconds_per_byte() * 1e9, 4) if large else None
    return PipelineProfile(fitwork_version=__version__, pipeline=pipeline.name, units=profiles,
                           host_class=on.host_class, accelerator_class=on.accelerator_class,
                           classes_from=on.found_from, created_at=time.time(),
                           wire_scale=1.0 if ns is None else wire_scale(ns * 1e-9),
                           wire_ns_per_byte=ns, fused_rss=fused,
                           host_speed=round(speed, 1), share_readings=shares)


def _duty(profiles: list[UnitProfile]) -> float:
    """The share of its time a replica running the units in turn works the CPU (each unit
    weighted by the items it takes per source item): what the share probe imitates."""
    m, stages = 1.0, []
    for u in profiles:
        stages.append((m * u.cpu_s, m * u.wall_s, m * u.queued_s))
        m *= u.output_ratio
    return pipeline_duty(stages)


FUSED_TIMEOUT_S = 120.0
"""The most seconds the fused replica's memory pass may take before it is given up."""


def _fused_memory(pipeline: Pipeline, inputs: list[Any]) -> int | None:
    """Bytes one process running every unit in turn holds of its own (its peak RSS over
    its start), as a fused replica does: every unit built in a forked copy of this process,
    then each sample taken through them one item at a time, its outputs dropped; ``None``
    where the copy failed or took more than `FUSED_TIMEOUT_S`.

    The units' own figures do not add up to it: units in one process share its libraries
    and allocator (the OCR demo's two model units measured 112 and 164 MiB each, and a
    process running both held 145 MiB)."""
    found = forked_ints(FUSED_TIMEOUT_S, _fused_peak, pipeline, inputs)
    return found[0] if found else None


def _fused_peak(pipeline: Pipeline, inputs: list[Any]) -> tuple[int] | None:
    """`_fused_memory`'s measurement, in this (forked) process."""
    peak = _peak_since_start()
    for _ in in_turn(pipeline.units, inputs):
        pass
    return (peak(),)


def _rss_now() -> int:
    """This process's resident bytes now."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _under_load(unit: Unit, inputs: list[Any], profile: UnitProfile) -> UnitProfile:
    """``profile`` with its ``loaded_factor``, where the unit works the CPU enough to tell."""
    chosen = profile.batches[-1] if profile.batches else None
    if chosen is None or not worth_measuring(chosen.cpu_s, chosen.wall_s):
        return profile
    import psutil

    # a full host, as replicas fill it, and no more copies than its free memory holds
    room = psutil.virtual_memory().available // max(profile.peak_rss, 1)
    copies = int(min(usable_cores() // max(1.0, profile.replica_parallelism()), room))
    found = loaded_factor(unit, inputs, chosen.batch_size, copies, chosen.wall_s)
    if found is None:
        return profile
    loaded = profile.model_copy(update={"loaded_copies": found.copies,
                                        "loaded_factor": round(found.factor, 4)})
    return _pooled(loaded, found.alone)


def _pooled(profile: UnitProfile, later: tuple[float, ...]) -> UnitProfile:
    """``profile`` with its CPU per item the mean of its own timing and ``later`` ones (CPU
    seconds per item alone, at its batch, from the co-run copies' passes alone), every batch
    size's CPU and wall time scaled alike; as it was where its pools run several threads
    (a copy's CPU there counts the pools' spinning, which its own timing took out).

    One timing is one moment of the host: on this repository's 2-core host four profiles of
    the same BLAS unit read 1.64-3.16 ms per item (cv 0.29), and that timing pooled with its
    three later ones 2.08-2.93 (cv 0.15); a numpy unit's cv went from 0.16 to 0.06 (the
    co-run measurement now passes alone four times, so five timings are pooled)."""
    chosen = profile.batches[-1] if profile.batches else None
    if not later or chosen is None or chosen.cpu_s <= 0 or (profile.threads or 1) > 1:
        return profile
    scale = statistics.mean([chosen.cpu_s, *later]) / chosen.cpu_s
    return profile.cpu_scaled(scale, pooled_timings=len(later) + 1,
                              pooled_factor=round(scale, 4))


def _measure_in_child(unit: Unit, inputs: list[Any], on: MeasuredOn,
                      notice: Callable[[str], None] = lambda line: None
                      ) -> tuple[UnitProfile, list[Any]]:
    """``measure_unit`` in a forked child; where the child dies, again without the samples
    that kill the unit's process when each is called alone (`_killers`)."""
    try:
        return run_forked(measure_unit, unit, inputs, on)
    except ChildFailed as failure:
        if not failure.died:
            raise ProfileError(f"profile: unit {unit.name!r}: {failure}") from None
        death = str(failure)
    killers = _killers(unit, inputs)
    kept = [item for i, item in enumerate(inputs) if i not in killers]
    if not kept:
        raise ProfileError(f"profile: unit {unit.name!r} killed its process on every one of "
                           f"the {len(inputs)} samples ({death}); check its memory use and "
                           "native code, or give samples it survives")
    try:
        profile, outputs = run_forked(measure_unit, unit, kept, on)
    except ChildFailed as failure:
        if not failure.died:
            raise ProfileError(f"profile: unit {unit.name!r}: {failure}") from None
        without = f" without the {len(killers)} samples that kill it alone" if killers else \
            ", and no sample kills it when called alone"
        raise ProfileError(f"profile: unit {unit.name!r} killed its process ({failure}) "
                           f"again{without}; check its memory use and native code (at its "
                           "batch sizes too)") from None
    if killers:
        profile = profile.model_copy(update={"samples": len(inputs),
                                             "failures": profile.failures + len(killers)})
        rows = ", ".join(str(i) for i in sorted(killers)[:5])
        more = ", ..." if len(killers) > 5 else ""
        notice(f"profile: unit {unit.name!r} killed its process ({death}) on "
               f"{len(killers)} of {len(inputs)} samples (numbers {rows}{more}): measured "
               f"on the other {len(kept)}, and the units after it too")
    else:
        notice(f"profile: unit {unit.name!r} killed its process once ({death}), and on no "
               f"sample again when each ran alone: measured on all {len(inputs)}")
    return profile, outputs


def _on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _killers(unit: Unit, inputs: list[Any]) -> set[int]:
    """The positions of the samples that kill the unit's process when called alone.

    A forked child builds the unit and calls it on one sample at a time from a position
    on, saying which before each call: where it dies, that sample is a killer, and the
    next child goes on after it.  One child per killer, plus one; no timing.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    killers: set[int] = set()
    start = 0
    while start < len(inputs):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_call_each, args=(unit, inputs, start, send), daemon=True)
        child.start()
        send.close()
        at: int | None = None
        try:
            while (said := receive.recv()) is not None:
                at = said
        except EOFError:  # it died calling sample ``at`` (None: before any sample)
            child.join()
            if at is None:
                return killers  # its constructor died: no sample is to blame
            killers.add(at)
            start = at + 1
            continue
        finally:
            receive.close()
        child.join()
        break
    return killers


def _call_each(unit: Unit, inputs: list[Any], start: int, send: Any) -> None:
    """In a forked child: the unit on ``inputs[start:]`` one at a time, each position sent
    before its call and ``None`` after the last (or when the unit cannot be built)."""
    try:
        call = Kernel(unit).caller()
    except Exception:
        send.send(None)
        return
    for index in range(start, len(inputs)):
        send.send(index)
        with contextlib.suppress(Exception):
            call([inputs[index]])
    send.send(None)


def _sizes(unit: Unit, count: int) -> list[int]:
    if not unit.batch_size:
        return [1]
    sizes = {1, unit.batch_size}
    size = 2
    while size < unit.batch_size:
        sizes.add(size)
        size *= 4
    return sorted(s for s in sizes if s <= max(count, 1)) or [1]



def _declared(value: PerItem, inputs: list[Any]) -> float | None:
    """A per-item declaration as a number: itself, or its mean over ``inputs``."""
    if value is None:
        return None
    if callable(value):
        return sum(float(value(item)) for item in inputs) / len(inputs)
    return float(value)


@dataclass
class Counted:
    """FLOPs and device bytes per item, and where each came from (``None``: unknown)."""

    flops: float | None = None
    flops_source: Literal["declared", "counted"] | None = None
    device_bytes: float | None = None
    device_bytes_source: Literal["measured", "declared", "counted"] | None = None


def _onnx_runs() -> contextlib.AbstractContextManager[Runs]:
    """Counts onnxruntime session runs, where the unit's process has imported onnxruntime."""
    return watch_runs() if "onnxruntime" in sys.modules else contextlib.nullcontext(Runs())


def _count(unit: Unit, call: Callable[[list[Any]], tuple[list[Any], int]], inputs: list[Any],
           accelerated: bool, used_onnx: bool) -> Counted:
    """Declared figures, else FLOPs and device bytes counted on one batch (no timing).

    A unit that imported torch is counted by torch (`fitwork.profiling.torch_count`: its
    FLOP counter, and the bytes its operators read and write, weights included) where it
    demands a GPU or lacks FLOPs; onnxruntime's counting builds a fresh replica, so it runs
    only for a unit whose timed calls ran onnxruntime sessions.
    """
    counted = Counted()
    flops = _declared(unit.flops, inputs)
    if flops is not None:
        counted.flops, counted.flops_source = flops, "declared"
    nbytes = _declared(unit.device_bytes, inputs)
    if nbytes is not None:
        counted.device_bytes, counted.device_bytes_source = nbytes, "declared"
    batch = inputs[: unit.batch_size or 1]
    wants_bytes = accelerated and counted.device_bytes is None
    if counted.flops is None or (counted.device_bytes is None and unit.resources.gpu > 0):
        flops, nbytes = torch_count(call, batch)  # (None, None) where torch is not loaded
        if counted.flops is None and flops:
            counted.flops, counted.flops_source = flops, "counted"
        if counted.device_bytes is None and nbytes:
            counted.device_bytes, counted.device_bytes_source = nbytes, "counted"
            wants_bytes = False
    if (counted.flops is None or wants_bytes) and used_onnx:
        flops, nbytes = _onnx_counts(unit, batch)
        if counted.flops is None and flops:
            counted.flops, counted.flops_source = flops, "counted"
        if wants_bytes and nbytes:
            counted.device_bytes, counted.device_bytes_source = nbytes, "measured"
    return counted


def _onnx_counts(unit: Unit, batch: list[Any]) -> tuple[float | None, float | None]:
    """FLOPs and accelerator device bytes per item from onnxruntime's profiler, on a fresh
    replica (its sessions profiled as created); ``None`` for what it could not count."""
    from fitwork.profiling.onnx import count_onnx

    try:
        with count_onnx() as count:
            fresh = Kernel(unit).caller()
            count.mark()
            fresh(batch)
            count.read()
    except Exception:
        return None, None
    if not count.sessions:
        return None, None
    return count.flops / len(batch) or None, count.device_bytes / len(batch) or None


def _size(value: Any) -> int:
    try:
        return len(pickle.dumps(value, protocol=5))
    except Exception:
        return 0


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _peak_since_start() -> Callable[[], int]:
    """Starts counting this process's peak RSS from now; the returned call gives the bytes
    it rose to above where it was.  A forked child starts with its parent's high-water
    mark, so the mark is lowered first (``ru_maxrss`` where the kernel refuses: an
    overcount by whatever the parent once held beyond what it held at the fork)."""
    start = _rss_now()
    reset = _reset_high_water()

    def peak() -> int:
        high = _high_water() if reset else None
        return max(0, (high if high is not None else _rss()) - start)

    return peak


def _status_bytes(field: str) -> int | None:
    """A ``kB`` figure of /proc/self/status (``VmHWM``) in bytes; ``None``
    where there is no such file (not Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_high_water() -> bool:
    """Lower this process's peak RSS to its RSS now (Linux's ``clear_refs`` 5); whether the
    kernel let it (where not, no call memory is measured)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _high_water() -> int | None:
    """This process's peak RSS since the last `_reset_high_water`."""
    return _status_bytes("VmHWM")


@dataclass
class _Timed:
    """What the timing loop measured."""

    batches: list[BatchMeasurement]
    outputs: list[Any]
    failures: int
    accel_source: str | None
    device_memory: int | None


BATCH_CALLS = 4
"""The fewest timed calls at a batch size over 1: the samples are cycled to fill them, so no
batch size is timed on one call or on a partial last batch (a unit with a set-up per call
costs more per item in a short batch)."""
TIMED_SECONDS = 0.05
"""The least wall time a batch size is timed for, the samples cycled (`CYCLES` times at most)
until it is: a unit of 40 us per item timed on 48 samples alone is 2 ms of measurement, which
one scheduler tick or cache miss moves by half."""
CYCLES = 16
"""The most times the samples are cycled at one batch size."""
STEADY_SECONDS = 0.5
"""The least wall time the batch size a replica runs (the sweep's largest: the unit's own
where the samples fill it, else 1) is timed for, the samples cycled (`STEADY_CYCLES` times
at most) until it is. This host's speed moves from one moment to the next: a numpy unit
timed in 50 ms windows for 12 s read 0.33-0.88 ms per item (cv 0.25), in 0.5 s windows
0.38-0.70 (cv 0.17), in 1 s windows 0.49-0.68 (cv 0.10), against 0.58 over the 12 s; a
profile of 50 ms read 0.376, and the runs planned from it went at 0.68x the prediction."""
STEADY_CYCLES = 64
"""The most times the samples are cycled at the batch size a replica runs."""


def _batches(inputs: list[Any], size: int, timed: Callable[[], float],
             seconds: float = TIMED_SECONDS, cycles: int = CYCLES
             ) -> Iterable[tuple[list[Any], int]]:
    """(batch, how many of its items are first visits) of ``inputs`` at ``size``: every
    sample once, in full batches above size 1 (the samples cycled, `BATCH_CALLS` at least),
    then more cycles while ``timed()`` is under ``seconds``, ``cycles`` at most."""
    n, size = len(inputs), max(1, size)
    least = n if size == 1 else max(BATCH_CALLS, -(-n // size)) * size
    most = max(least, -(-cycles * n // size) * size)
    i = 0
    while i < least or (i < most and timed() < seconds):
        yield [inputs[j % n] for j in range(i, i + size)], max(0, min(size, n - i))
        i += size


def _time_batches(unit: Unit, kernel: Kernel, inputs: list[Any], timers: Timers,
                  sizes: list[int] | None = None, steady: bool = True,
                  peak: Callable[[], int] | None = None) -> _Timed:
    """Wall, CPU, queued and accelerator seconds per item at each batch size (``sizes``, or
    the sweep `_sizes` makes); above size 1, after one untimed call at that size (its
    buffers and caches warm, as in a replica that has run a while), on `_batches`.  With
    ``steady``, the largest size is timed for `STEADY_SECONDS` (a replica's own batch).
    With ``peak`` (the replica's peak RSS so far), each size's as its pass ends."""
    call = kernel.caller()
    batches: list[BatchMeasurement] = []
    outputs: list[Any] = []
    failures = 0
    chosen_source: str | None = None
    sizes = sizes or _sizes(unit, len(inputs))
    longest = max(sizes) if steady else None  # the unit's own batch where the samples fill it
    for size in sizes:
        seconds, cycles = (STEADY_SECONDS, STEADY_CYCLES) if size == longest else \
            (TIMED_SECONDS, CYCLES)
        wall = cpu = accel = queued = 0.0
        measured = distinct = 0  # items timed, and of them the samples' first visits
        calls: list[float] = []  # wall seconds per item of each call: the rate's spread
        if size > 1 and inputs:
            with contextlib.suppress(Exception):
                call([inputs[j % len(inputs)] for j in range(size)])
        host0, own0, start = host_busy_seconds(), time.process_time(), time.perf_counter()
        windows = OthersReadings()
        produced: list[Any] = []
        source: str | None = None
        for batch, fresh in _batches(inputs, size, lambda: wall,  # noqa: B023 (read as it grows)
                                     seconds, cycles):
            # the host and run-queue readings (file reads, ~16 us of CPU each) stay outside
            # the timed window
            windows.tick()
            queue0 = run_queue_seconds()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            timers.start()
            results, failed = call(batch)
            accel_s, timer = timers.stop()
            used, took = time.process_time() - cpu0, time.perf_counter() - wall0
            waited = run_queue_seconds() - queue0
            if failed == len(batch):
                failures += fresh if size == (unit.batch_size or 1) else 0
                continue
            wall += took
            calls.append(took / max(len(batch) - failed, 1))
            cpu += used
            queued += waited
            accel += accel_s or 0.0
            source = source or timer
            measured += len(batch) - failed
            distinct += fresh - sum(type(r) is Failed for r in results[:fresh])
            for item, result in zip(batch[:fresh], results[:fresh], strict=True):
                if type(result) is Failed:
                    failures += 1 if size == (unit.batch_size or 1) else 0
                else:
                    produced.extend(kernel.outputs(item, result))
        if not measured:
            continue
        batches.append(BatchMeasurement(batch_size=size, items=max(distinct, 1),
                                        wall_s=wall / measured, cpu_s=cpu / measured,
                                        queued_s=queued / measured,
                                        accel_s=accel / measured if accel else None,
                                        host_load=host_load(),
                                        others_share=others_share(host0, own0, start),
                                        others_readings=windows.readings,
                                        peak_rss=peak() if peak is not None else None,
                                        **call_spread(calls)))
        outputs = produced
        chosen_source = source if accel else None
    memory, _ = timers.peak_memory()
    return _Timed(batches, outputs, failures, chosen_source, memory)


MEMORY_THREADS = 4
"""Calls at once `_concurrent` runs, in threads of one process."""
MEMORY_ROUNDS = 2
"""Calls each of those threads makes, one item each."""
MEMORY_TIMEOUT_S = 60.0
"""The most seconds the call-memory pass may take before it is given up."""
WAIT_ROUNDS = 4
"""Calls each of those threads makes."""


@dataclass(frozen=True)
class _Concurrent:
    """What calls at once cost a replica (see `_concurrent`); ``None``: not measured."""

    call_memory: int | None = None
    lock_share: float | None = None
    cpu_factor: float | None = None
    threaded_cpu_s: float | None = None


LOCK_BUSY = 0.8
"""One thread's calls must keep this much of a core busy for the lock share to be read: a
unit that mostly waits meets few others on the cores whatever it holds."""


def _concurrent(call: Callable[[list[Any]], Any], inputs: list[Any]) -> _Concurrent:
    """What a replica running several calls at once (``io`` threads, a threaded fused
    replica) meets, from `MEMORY_THREADS` threads calling the unit at once against one
    thread making the same calls, in a forked copy of this replica (so a unit that crashes
    or hangs when called from several threads costs these figures only):

    - ``call_memory``: the peak RSS over the one thread's, per further thread.  It counts
      what a call lets go of after (numpy temporaries) and what a library keeps per
      concurrent call (an allocator's arena grown for each run at once, as onnxruntime's).
    - ``lock_share``: the share of a call's CPU that holds the interpreter lock, from the
      cores the threads kept busy: ``k`` of them where no call holds it (a native library
      that lets go of it, as onnxruntime and BLAS do), one where every call does, ``k``
      the cores the copy may use, at most `MEMORY_THREADS`; read only where one thread's
      calls kept `LOCK_BUSY` of a core busy and the copy has two cores or more.
    - ``cpu_factor``: CPU seconds of the threads' calls over the one thread's (calls that
      share caches and cores, and hand the lock on, spend more each).
    - ``threaded_cpu_s``: for a unit whose calls mostly wait (the one thread's CPU under
      half its wall time), its CPU per call with `WAIT_THREADS` threads calling it at once.
      Alone, each call wakes from its wait to caches others have since filled; threads of
      one process calling the same code keep them warm: a call that sleeps 30 ms and then
      draws 16 KiB with numpy spent 0.37 ms of CPU alone, 0.13 ms among 16 threads.
    """
    if not inputs or sys.platform != "linux":
        return _Concurrent()
    found = forked_ints(MEMORY_TIMEOUT_S, _threads_measured, call, inputs)
    if found is None or len(found) != 4:
        return _Concurrent()
    memory, lock, factor, waiting = found
    return _Concurrent(memory if memory >= 0 else None,
                       lock / 1000 if lock >= 0 else None,
                       factor / 1000 if factor > 0 else None,
                       waiting / 1e9 if waiting > 0 else None)


def _threads_measured(call: Callable[[list[Any]], Any],
                      inputs: list[Any]) -> tuple[int, int, int, int] | None:
    """`_concurrent`'s measurement itself, in this process: (call memory in bytes, lock
    share and CPU factor in thousandths, a waiting unit's CPU per call among threads in
    nanoseconds), -1 for a figure it could not read."""
    items = [inputs[i % len(inputs)] for i in range(MEMORY_THREADS * MEMORY_ROUNDS)]

    def calls(mine: list[Any], start: threading.Barrier | None = None) -> None:
        if start is not None:
            start.wait()
        for item in mine:
            with contextlib.suppress(Exception):
                call([item])

    reset = _reset_high_water()
    cpu1, wall1 = _at_once(calls, items, 1)
    alone = _high_water() if reset else None
    _reset_high_water()
    cpu4, wall4 = _at_once(calls, items, MEMORY_THREADS)
    together = _high_water() if reset else None
    memory = -1 if alone is None or together is None else \
        max(0, together - alone) // (MEMORY_THREADS - 1)
    cores = min(MEMORY_THREADS, len(os.sched_getaffinity(0)))
    lock = -1
    if cores >= 2 and wall1 > 0 and wall4 > 0 and cpu1 >= LOCK_BUSY * wall1:
        busy = cpu4 / wall4  # cores the threads kept busy at once
        lock = round(1000 * min(1.0, max(0.0, (cores - busy) / (cores - 1))))
    factor = round(1000 * cpu4 / cpu1) if cpu1 > 0 and cpu4 > 0 else -1
    return memory, lock, factor, \
        _waiting_cpu(calls, inputs, max(memory, 0)) if cpu1 < wall1 / 2 else -1


def _waiting_cpu(calls: Callable[..., None], inputs: list[Any], call_memory: int) -> int:
    """Nanoseconds of CPU per call with `WAIT_THREADS` threads calling at once, each
    `WAIT_ROUNDS` times (see `_concurrent`); -1 where that many calls at once would hold
    more than half the memory free (``call_memory`` bytes each)."""
    import psutil

    if WAIT_THREADS * call_memory > psutil.virtual_memory().available // 2:
        return -1
    items = [inputs[i % len(inputs)] for i in range(WAIT_THREADS * WAIT_ROUNDS)]
    used, _ = _at_once(calls, items, WAIT_THREADS)
    return round(1e9 * used / len(items)) if used > 0 else -1


def _at_once(calls: Callable[..., None], items: list[Any], threads: int
             ) -> tuple[float, float]:
    """(CPU, wall) seconds of ``items`` called by ``threads`` threads started together
    (one: in this thread, in turn)."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if threads == 1:
        calls(items)
    else:
        start = threading.Barrier(threads)
        running = [threading.Thread(target=calls, args=(items[k::threads], start),
                                    daemon=True) for k in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
    return time.process_time() - cpu0, time.perf_counter() - wall0


DROPPED_MIN = 64 * 1024
"""Pickled bytes of output per item from which `measure_unit` also times a unit dropping each
output as soon as it is made (a replica's way); below it, keeping them costs nothing much."""


@dataclass
class _Dropped:
    """A pass over the samples with each call's results dropped at once."""

    batch_size: int
    wall_s: float
    cpu_s: float
    queued_s: float = 0.0


def _time_dropping(call: Callable[[list[Any]], tuple[list[Any], int]], inputs: list[Any],
                   size: int) -> _Dropped | None:
    """Wall and CPU seconds per item over ``inputs`` in batches of ``size``, each call's
    results dropped before the next call, as a replica drops them once sent on.

    The timing loop keeps every output (the next unit is measured on them), so each of its
    calls faults in fresh pages for what it returns, where a replica's allocator reuses the
    pages it freed or gives them back and faults them in again, as this pass's does when it
    runs first, before any output is kept.  A unit making a 1.2 MB array measured 2.0 ms of
    CPU per item keeping its outputs and 1.4 ms dropping them; one normalising such an array
    0.87 and 1.16 ms; a run spent about the latter in each.  Its run-queue wait is timed
    too, so wall, CPU and queued seconds come from the same calls.
    """
    wall = cpu = queued = 0.0
    measured = 0
    for i in range(0, len(inputs), size):
        batch = inputs[i:i + size]
        queue0 = run_queue_seconds()  # outside the window, as `_time_batches` keeps it
        wall0, cpu0 = time.perf_counter(), time.process_time()
        results, failed = call(batch)
        del results
        cpu += time.process_time() - cpu0
        wall += time.perf_counter() - wall0
        queued += run_queue_seconds() - queue0
        measured += len(batch) - failed
    return _Dropped(size, wall / measured, cpu / measured,
                    queued / measured) if measured else None


def _as_dropped(chosen: BatchMeasurement, before: BatchMeasurement,
                dropped: _Dropped | None) -> BatchMeasurement:
    """``chosen`` (``before`` the pools' spinning was taken out of it) with the wall, CPU and
    run-queue seconds the pass dropping outputs measured, less the same share of spinning.
    (The run-queue wait was once kept from the other pass: a profile taken as the host's
    load changed said big_array sat 15.0 ms queued in a 13.8 ms call, and the plan's core
    ceiling fell to 0.10.)"""
    if dropped is None or dropped.batch_size != chosen.batch_size:
        return chosen
    worked = chosen.cpu_s / before.cpu_s if before.cpu_s else 1.0
    return chosen.model_copy(update={"wall_s": dropped.wall_s,
                                     "cpu_s": dropped.cpu_s * worked,
                                     "queued_s": dropped.queued_s})


def _timed_runs(unit: Unit, kernel: Kernel, inputs: list[Any], accelerated: bool,
                threads: int, pools: bool, peak: Callable[[], int] | None = None
                ) -> tuple[_Timed, list[BatchMeasurement] | None, Runs]:
    """The timed sweep (each size's peak RSS read going up, with ``peak``), its largest
    batch again on one thread, and the onnxruntime runs."""
    with _onnx_runs() as onnx_runs:
        timers = Timers(kernel.fn, None if accelerated else [])
        try:
            timed = _time_batches(unit, kernel, inputs, timers, peak=peak)
            if len(timed.batches) > 1:  # a sweep: again from the next largest batch down
                # (the largest was just timed for STEADY_SECONDS: the faster of it and
                # another timing at the same moment of the host would only read it fast)
                again = _time_batches(unit, kernel, inputs, timers,
                                      [b.batch_size for b in reversed(timed.batches[:-1])],
                                      steady=False)
                timed.batches = _steadier(timed.batches, again.batches)
            alone = None
            if threads > 1 and pools and timed.batches:  # do the threads really help?
                hold_pools(1)
                alone = _time_batches(unit, kernel, inputs, timers,
                                      [timed.batches[-1].batch_size]).batches
                hold_pools(threads)
        finally:
            timers.close()
    return timed, alone, onnx_runs


def _steadier(first: list[BatchMeasurement], again: list[BatchMeasurement]
              ) -> list[BatchMeasurement]:
    """Per batch size, its timing in the sweep down where it has one, else the sweep up's:
    each size's calls once warm, and each size timed once.

    Batch sizes timed in turn meet the unit and the host as they change: the first calls
    on shapes not seen before, a host slower or quicker from one second to the next.  A
    sweep run once, smallest batch first, credits all of that to the larger batches: the
    OCR demo's ``recognise`` read 176, 129 and 104 ms per page at batches 1, 2 and 8 on one
    profile, and 100, 95 and 105 on another of the same pages, and the first profile planned
    batch 8, which did 6 pages/s per replica against 10 at batch 1.  The sweep down starts
    below the largest size (timed last going up, for `STEADY_SECONDS`), so every size is
    read after all have run.  The faster of two timings, the rule before, read each size
    fast by the host's noise (the least of two 50 ms windows on this repository's 2-core
    host: about 0.56 of their spread of 25%, some 14%)."""
    down = {b.batch_size: b for b in again}
    # a size's peak memory is the sweep up's: going down, every size meets the largest's
    return [down[b.batch_size].model_copy(update={"peak_rss": b.peak_rss})
            if b.batch_size in down else b for b in first]


def _thread_gain(timed: _Timed, alone: list[BatchMeasurement] | None, threads: int
                 ) -> tuple[float | None, float]:
    """The threads' speedup and parallelism; the pools' spinning taken out of the last batch."""
    chosen = timed.batches[-1]
    speedup, parallelism = None, max(1.0, chosen.cpu_s / chosen.wall_s if chosen.wall_s else 1.0)
    if alone:
        # Threads that really run at once shorten the call; CPU beyond what one thread
        # spent on the same items is the pool's spinning and overhead, not the unit's work.
        speedup = alone[0].wall_s / chosen.wall_s if chosen.wall_s else 1.0
        parallelism = min(float(threads), max(1.0, speedup))
        worked = min(chosen.cpu_s, alone[0].cpu_s)
        if worked < chosen.cpu_s:
            timed.batches[-1] = chosen.model_copy(update={"cpu_s": worked})
    return speedup, parallelism


def _device_memory(unit: Unit, timed: _Timed
                   ) -> tuple[int | None, Literal["measured", "declared"] | None]:
    """The unit's device memory and its source: declared, else measured, else unknown."""
    memory: int | None = unit.device_memory
    memory_source: Literal["measured", "declared"] | None = "declared" \
        if memory is not None else None
    if memory is None and timed.device_memory is not None:
        memory, memory_source = timed.device_memory, "measured"
    return memory, memory_source


def measure_unit(unit: Unit, inputs: list[Any], on: MeasuredOn
                 ) -> tuple[UnitProfile, list[Any]]:
    """Measure ``unit`` on ``inputs`` in this process; returns its profile and its outputs."""
    peak = _peak_since_start()
    threads = allot(unit, None).threads
    hold_pools(threads)  # as a replica is held, before the unit builds (torch reads it)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    kernel = Kernel(unit)
    call = kernel.caller()
    warm: list[Any] = []
    with contextlib.suppress(Exception):
        warm, _ = call([inputs[0]])  # warm-up: imports, caches, CUDA context
    build = (time.process_time() - cpu0, time.perf_counter() - wall0)
    pools = hold_pools(threads)  # again, for the pools the unit or its warm-up loaded
    accelerated = on.on_accelerator(unit)
    dropped = None
    if not accelerated and sum(map(_size, warm)) >= DROPPED_MIN:
        warm = []  # first, while no output is kept: the allocator as a replica has it
        dropped = _time_dropping(call, inputs, _sizes(unit, len(inputs))[-1])
    timed, alone, onnx_runs = _timed_runs(unit, kernel, inputs, accelerated, threads, pools,
                                          peak)
    if not timed.batches:
        raise ProfileError(f"failed on all {len(inputs)} samples; run it serially to see why")
    concurrent = _concurrent(call, inputs)
    before = timed.batches[-1]
    speedup, parallelism = _thread_gain(timed, alone, threads)
    timed.batches[-1] = chosen = _as_dropped(timed.batches[-1], before, dropped)
    peak_rss = peak()  # before counting, which may build a second replica
    counted = _count(unit, call, inputs, accelerated, onnx_runs.count > 0)
    memory, memory_source = _device_memory(unit, timed)
    profile = UnitProfile(
        name=unit.name, kind=unit.kind.value,
        resources=unit.demand(),
        batch_size=unit.batch_size, device_class=on.of(unit), samples=len(inputs),
        failures=timed.failures, wall_s=chosen.wall_s, cpu_s=chosen.cpu_s,
        queued_s=chosen.queued_s, accel_s=chosen.accel_s, accel_source=timed.accel_source,
        flops=counted.flops, flops_source=counted.flops_source,
        device_bytes=counted.device_bytes, device_bytes_source=counted.device_bytes_source,
        device_memory=memory, device_memory_source=memory_source,
        bytes_in=sum(map(_size, inputs)) / len(inputs),
        bytes_out=sum(map(_size, timed.outputs)) / len(inputs),
        output_ratio=len(timed.outputs) / chosen.items,
        peak_rss=peak_rss, call_memory=concurrent.call_memory, batches=timed.batches,
        lock_share=concurrent.lock_share, concurrent_cpu=concurrent.cpu_factor,
        threaded_cpu=round(concurrent.threaded_cpu_s / chosen.cpu_s, 3)
        if concurrent.threaded_cpu_s and chosen.cpu_s > 0 else None,
        reserve=unit.reserve,
        max_concurrency=unit.max_concurrency, rate_limit=unit.rate_limit,
        threads=threads, parallelism=parallelism, thread_speedup=speedup,
        # building it and its first call, beyond that call's share of the work
        build_cpu_s=round(max(0.0, build[0] - timed.batches[0].cpu_s), 6),
        build_wall_s=round(max(0.0, build[1] - timed.batches[0].wall_s), 6))
    return profile, timed.outputs
