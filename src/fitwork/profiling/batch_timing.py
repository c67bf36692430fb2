"""The timing loop: wall, CPU, queued and accelerator seconds per item at each batch size."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import median_high
from typing import Any

from fitwork.profiling.onnx import Runs, watch_runs
from fitwork.profiling.pools import hold_pools
from fitwork.profiling.record import (
    BatchMeasurement,
    OthersReadings,
    call_spread,
    host_busy_seconds,
    host_load,
    others_share,
)
from fitwork.profiling.timers import Timers
from fitwork.telemetry.cputime import children_seconds
from fitwork.telemetry.schedstat import run_queue_seconds
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.unit import Unit


def sweep_sizes(unit: Unit, count: int) -> list[int]:
    if not unit.batch_size:
        return [1]
    sizes = {1, unit.batch_size}
    size = 2
    while size < unit.batch_size:
        sizes.add(size)
        size *= 4
    return sorted(s for s in sizes if s <= max(count, 1)) or [1]


def _onnx_runs() -> contextlib.AbstractContextManager[Runs]:
    """Counts onnxruntime session runs, where the unit's process has imported onnxruntime."""
    return watch_runs() if "onnxruntime" in sys.modules else contextlib.nullcontext(Runs())


@dataclass
class Timed:
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
WARM_FACTOR = 0.7
"""A unit warms up (`warm_up`) where its calls on samples seen before, and its calls on new
samples late in the pass, take under this share of its first calls' median."""
WARM_CALLS = 8
"""The fewest calls on samples seen before, and on new ones in each half of the pass, that
`warm_up` reads."""


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


def time_batches(unit: Unit, kernel: Kernel, inputs: list[Any], timers: Timers,
                 sizes: list[int] | None = None, steady: bool = True,
                 peak: Callable[[], int] | None = None) -> Timed:
    """Wall, CPU, queued and accelerator seconds per item at each batch size (``sizes``, or
    the sweep `sweep_sizes` makes); above size 1, after one untimed call at that size (its
    buffers and caches warm, as in a replica that has run a while), on `_batches`.  With
    ``steady``, the largest size is timed for `STEADY_SECONDS` (a replica's own batch).
    With ``peak`` (the replica's peak RSS so far), each size's as its pass ends."""
    call = kernel.caller()
    batches: list[BatchMeasurement] = []
    outputs: list[Any] = []
    failures = 0
    chosen_source: str | None = None
    sizes = sizes or sweep_sizes(unit, len(inputs))
    longest = max(sizes) if steady else None  # the unit's own batch where the samples fill it
    for size in sizes:
        window = (STEADY_SECONDS, STEADY_CYCLES) if size == longest else (TIMED_SECONDS, CYCLES)
        measurement, produced, failed, source = _time_size(unit, kernel, call, inputs, timers,
                                                           size, window, peak)
        failures += failed
        if measurement is None:
            continue
        batches.append(measurement)
        outputs = produced
        chosen_source = source
    memory, _ = timers.peak_memory()
    return Timed(batches, outputs, failures, chosen_source, memory)


def _time_size(unit: Unit, kernel: Kernel, call: Callable[[list[Any]], tuple[list[Any], int]],
               inputs: list[Any], timers: Timers, size: int, window: tuple[float, int],
               peak: Callable[[], int] | None
               ) -> tuple[BatchMeasurement | None, list[Any], int, str | None]:
    """`time_batches` at one batch size, for ``window`` (least seconds, most cycles): its
    measurement (``None`` where every call failed), the outputs of the samples' first
    visits, the failures counted (at the unit's own batch size only) and the accelerator
    timer that read it (``None`` where no accelerator time was read)."""
    wall = cpu = accel = queued = 0.0
    measured = distinct = failures = 0  # items timed, and of them the samples' first visits
    calls: list[float] = []  # wall seconds per item of each call: the rate's spread
    visits: list[tuple[bool, float, float]] = []  # one item a call: (new, CPU, wall)
    if size > 1 and inputs:
        with contextlib.suppress(Exception):
            call([inputs[j % len(inputs)] for j in range(size)])
    children0 = children_seconds()  # tools the unit ran: read once a pass, not a call
    host0, own0, start = host_busy_seconds(), time.process_time() + children0, \
        time.perf_counter()
    windows = OthersReadings()
    produced: list[Any] = []
    source: str | None = None
    own = size == (unit.batch_size or 1)
    for batch, fresh in _batches(inputs, size, lambda: wall, *window):  # noqa: B023 (grows)
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
            failures += fresh if own else 0
            continue
        wall, cpu, queued = wall + took, cpu + used, queued + waited
        calls.append(took / max(len(batch) - failed, 1))
        if size == 1:
            visits.append((fresh > 0, used, took))
        accel += accel_s or 0.0
        source = source or timer
        measured += len(batch) - failed
        distinct += fresh - sum(type(r) is Failed for r in results[:fresh])
        for item, result in zip(batch[:fresh], results[:fresh], strict=True):
            if type(result) is Failed:
                failures += 1 if own else 0
            else:
                produced.extend(kernel.outputs(item, result))
    if not measured:
        return None, produced, failures, None
    children = children_seconds() - children0
    per_cpu, per_wall, warm = _per_item(call, inputs, visits, (cpu, children, wall), measured)
    return BatchMeasurement(batch_size=size, items=max(distinct, 1), wall_s=per_wall,
                            cpu_s=per_cpu, queued_s=queued / measured,
                            accel_s=accel / measured if accel else None,
                            host_load=host_load(),
                            others_share=others_share(host0, own0, start),
                            others_readings=windows.readings,
                            peak_rss=peak() if peak is not None else None,
                            warmup_cpu_s=None if warm is None else round(warm[0], 6),
                            warmup_wall_s=None if warm is None else round(warm[1], 6),
                            **call_spread(calls)), produced, failures, source if accel else None


def _per_item(call: Callable[[list[Any]], tuple[list[Any], int]], inputs: list[Any],
              visits: list[tuple[bool, float, float]], spent: tuple[float, float, float],
              measured: int) -> tuple[float, float, tuple[float, float] | None]:
    """CPU and wall seconds per item of a pass that ``spent`` (its calls' CPU, its tools'
    CPU, wall) on ``measured`` items, and the warm-up a replica pays once (CPU, wall;
    ``None`` where it shows none): where the calls warm up (`warm_up`), the calls once warm
    are the rate and the first calls' excess is the warm-up."""
    cpu, children, wall = spent
    if late_quicker(visits) and sum(not new for new, _, _ in visits) < WARM_CALLS:
        visits = visits + _again(call, inputs[:2 * WARM_CALLS])  # enough seen-before calls
    warm = warm_up(visits)
    if warm is None:
        return (cpu + children) / measured, wall / measured, None
    steady_cpu, steady_wall = warm
    first = [(c, w) for new, c, w in visits if new]
    return steady_cpu + children / measured, steady_wall, (
        max(0.0, sum(c for c, _ in first) - steady_cpu * len(first)),
        max(0.0, sum(w for _, w in first) - steady_wall * len(first)))


def warm_up(visits: list[tuple[bool, float, float]]) -> tuple[float, float] | None:
    """The CPU and wall seconds per call once the unit is warm, where its one-item calls
    (``visits``: whether the sample was new, CPU, wall; in order) show a warm-up, else
    ``None``.

    A unit that compiles a kernel per input shape, fills a cache or loads lazily pays it in
    its first calls: the warmup bench shape (24 kernels of 12 ms) read 5.9 ms an item over a
    pass where its calls took about 3 ms once warm, and its plans ran 1.35-1.9x their
    prediction.  The calls on samples seen before are the steady cost only where the unit,
    not the sample, got faster: new samples late in the pass must be quicker too
    (`late_quicker`; a unit that caches each input's answer is as slow on a new input late
    as early).  So: that, and at least `WARM_CALLS` calls on samples seen before, their
    median under `WARM_FACTOR` of the early new ones'.  The steady figures are then the
    seen-before calls' means.  A host that quickens by a third or more within one pass (its
    other work ending) reads the same way: the unit is then timed at the quicker moment and
    charged the difference once per replica."""
    again = [(c, w) for new, c, w in visits if not new]
    if len(again) < WARM_CALLS or not late_quicker(visits):
        return None
    if median_high([w for _, w in again]) >= WARM_FACTOR * _early(visits):
        return None
    return sum(c for c, _ in again) / len(again), sum(w for _, w in again) / len(again)


def late_quicker(visits: list[tuple[bool, float, float]]) -> bool:
    """Whether the calls on new samples in the later half of the pass took under
    `WARM_FACTOR` of the earlier half's median (at least `WARM_CALLS` in each half)."""
    first = [w for new, _, w in visits if new]
    half = len(first) // 2
    return half >= WARM_CALLS and median_high(first[half:]) < WARM_FACTOR * _early(visits)


def _early(visits: list[tuple[bool, float, float]]) -> float:
    """The median wall seconds of the calls on new samples in the pass's first half."""
    first = [w for new, _, w in visits if new]
    return median_high(first[:max(1, len(first) // 2)]) if first else 0.0


def _again(call: Callable[[list[Any]], tuple[list[Any], int]], items: list[Any]
           ) -> list[tuple[bool, float, float]]:
    """``items`` called again one at a time, each as a seen-before visit (CPU, wall); calls
    that failed left out."""
    found = []
    for item in items:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        _, failed = call([item])
        if not failed:
            found.append((False, time.process_time() - cpu0, time.perf_counter() - wall0))
    return found


def timed_runs(unit: Unit, kernel: Kernel, inputs: list[Any], accelerated: bool,
               threads: int, pools: bool, peak: Callable[[], int] | None = None
               ) -> tuple[Timed, list[BatchMeasurement] | None, Runs]:
    """The timed sweep (each size's peak RSS read going up, with ``peak``), its largest
    batch again on one thread, and the onnxruntime runs."""
    with _onnx_runs() as onnx_runs:
        timers = Timers(kernel.fn, None if accelerated else [])
        try:
            timed = time_batches(unit, kernel, inputs, timers, peak=peak)
            if len(timed.batches) > 1:  # a sweep: again from the next largest batch down
                # (the largest was just timed for STEADY_SECONDS: the faster of it and
                # another timing at the same moment of the host would only read it fast)
                again = time_batches(unit, kernel, inputs, timers,
                                     [b.batch_size for b in reversed(timed.batches[:-1])],
                                     steady=False)
                timed.batches = _steadier(timed.batches, again.batches)
            alone = None
            if threads > 1 and pools and timed.batches:  # do the threads really help?
                hold_pools(1)
                alone = time_batches(unit, kernel, inputs, timers,
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


def thread_gain(timed: Timed, alone: list[BatchMeasurement] | None, threads: int
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
