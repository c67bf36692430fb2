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
import pickle
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

from fitwork.errors import FitworkError
from fitwork.forked import ChildFailed, run_forked
from fitwork.placement import allot
from fitwork.profiling.batch_timing import Timed, sweep_sizes, thread_gain, timed_runs
from fitwork.profiling.classes import MeasuredOn, measured_on
from fitwork.profiling.concurrent import measure_concurrent
from fitwork.profiling.counting import count_figures
from fitwork.profiling.dropped import DROPPED_MIN, as_dropped, time_dropping
from fitwork.profiling.fused import fused_memory
from fitwork.profiling.killers import killers_of
from fitwork.profiling.loaded import under_load
from fitwork.profiling.marked import marked
from fitwork.profiling.pools import hold_pools
from fitwork.profiling.ratios import counted_ratios
from fitwork.profiling.record import PipelineProfile, UnitProfile
from fitwork.profiling.rss import peak_since_start
from fitwork.profiling.shares import pipeline_duty, share_readings, yield_readings
from fitwork.profiling.wire_cost import LARGE_ITEM, wire_scale, wire_seconds_per_byte
from fitwork.telemetry.cputime import cpu_seconds
from fitwork.telemetry.host_speed import host_speed
from fitwork.version import __version__
from fitwork.workload.kernel import Kernel
from fitwork.workload.pipeline import Pipeline
from fitwork.workload.unit import Unit


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
                profile = under_load(unit, inputs, profile)
            profiles.append(profile)
            inputs = outputs[: max(samples, 1) * 4]
            if not inputs and unit is not pipeline.units[-1]:
                raise ProfileError(
                    f"profile: unit {unit.name!r} produced no outputs from {profile.samples} "
                    "samples, so the units after it cannot be measured; give more samples")
        profiles = counted_ratios(pipeline.units, profiles, source)
        fused = fused_memory(pipeline, first) if len(pipeline.units) > 1 else None
    duty = _duty(profiles)
    shares = share_readings(duty=duty) if loaded else {}
    yields = yield_readings(shares, duty) if loaded else {}
    scale, ns = _wire(profiles)
    return PipelineProfile(fitwork_version=__version__, pipeline=pipeline.name, units=profiles,
                           host_class=on.host_class, accelerator_class=on.accelerator_class,
                           classes_from=on.found_from, created_at=time.time(),
                           wire_scale=scale, wire_ns_per_byte=ns, fused_rss=fused,
                           host_speed=round(speed, 1), share_readings=shares,
                           yield_readings=yields)


def _wire(profiles: list[UnitProfile]) -> tuple[float, float | None]:
    """The wire's scale and its nanoseconds per byte, read where some unit's items are large
    (`LARGE_ITEM`); else 1 and ``None``."""
    large = max((max(u.bytes_in, u.bytes_out) for u in profiles), default=0) >= LARGE_ITEM
    # the scale is derived from the reading as stored, so a profile's two figures agree
    ns = round(wire_seconds_per_byte() * 1e9, 4) if large else None
    return (1.0 if ns is None else wire_scale(ns * 1e-9)), ns


def _duty(profiles: list[UnitProfile]) -> float:
    """The share of its time a replica running the units in turn works the CPU (each unit
    weighted by the items it takes per source item): what the share probe imitates."""
    m, stages = 1.0, []
    for u in profiles:
        stages.append((m * u.cpu_s, m * u.wall_s, m * u.queued_s))
        m *= u.output_ratio
    return pipeline_duty(stages)


def _measure_in_child(unit: Unit, inputs: list[Any], on: MeasuredOn,
                      notice: Callable[[str], None] = lambda line: None
                      ) -> tuple[UnitProfile, list[Any]]:
    """``measure_unit`` in a forked child; where the child dies, again without the samples
    that kill the unit's process when each is called alone (`killers_of`)."""
    try:
        return run_forked(measure_unit, unit, inputs, on)
    except ChildFailed as failure:
        if not failure.died:
            raise ProfileError(f"profile: unit {unit.name!r}: {failure}") from None
        death = str(failure)
    killers = killers_of(unit, inputs)
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


def _size(value: Any) -> int:
    try:
        return len(pickle.dumps(value, protocol=5))
    except Exception:
        return 0


def _pickled(values: list[Any], per: int) -> tuple[float, float]:
    """Pickled bytes of ``values``, and this thread's CPU seconds to pickle and unpickle them,
    each over ``per`` (items of the unit's input): what crossing between processes costs
    them beyond the bytes (a dictionary of 400 short keys is 8 KB pickled but 120-170 us to
    pickle and unpickle here, where the bytes' charge says 3).  A value that cannot be
    pickled counts nothing."""
    size = cpu = 0.0
    for value in values:
        start = time.thread_time()
        try:
            data = pickle.dumps(value, protocol=5)
            pickle.loads(data)
        except Exception:
            continue
        cpu += time.thread_time() - start
        size += len(data)
    return size / max(per, 1), cpu / max(per, 1)


def _device_memory(unit: Unit, timed: Timed
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
    peak = peak_since_start()
    threads = allot(unit, None).threads
    hold_pools(threads)  # as a replica is held, before the unit builds (torch reads it)
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    kernel = Kernel(unit)
    call = kernel.caller()
    warm: list[Any] = []
    with contextlib.suppress(Exception):
        warm, _ = call([inputs[0]])  # warm-up: imports, caches, CUDA context
    build = (cpu_seconds() - cpu0, time.perf_counter() - wall0)
    pools = hold_pools(threads)  # again, for the pools the unit or its warm-up loaded
    accelerated = on.on_accelerator(unit)
    dropped = None
    if not accelerated and sum(map(_size, warm)) >= DROPPED_MIN:
        warm = []  # first, while no output is kept: the allocator as a replica has it
        dropped = time_dropping(call, inputs, sweep_sizes(unit, len(inputs))[-1])
    timed, alone, onnx_runs = timed_runs(unit, kernel, inputs, accelerated, threads, pools,
                                         peak)
    if not timed.batches:
        raise ProfileError(f"failed on all {len(inputs)} samples; run it serially to see why")
    concurrent = measure_concurrent(call, inputs)
    before = timed.batches[-1]
    speedup, parallelism = thread_gain(timed, alone, threads)
    timed.batches[-1] = chosen = as_dropped(timed.batches[-1], before, dropped)
    peak_rss = peak()  # before counting, which may build a second replica
    counted = count_figures(unit, call, inputs, accelerated, onnx_runs.count > 0)
    memory, memory_source = _device_memory(unit, timed)
    bytes_in, wire_in = _pickled(inputs, len(inputs))
    bytes_out, wire_out = _pickled(timed.outputs, len(inputs))
    profile = UnitProfile(
        name=unit.name, kind=unit.kind.value,
        resources=unit.demand(),
        batch_size=unit.batch_size, device_class=on.of(unit), samples=len(inputs),
        failures=timed.failures, wall_s=chosen.wall_s, cpu_s=chosen.cpu_s,
        queued_s=chosen.queued_s, accel_s=chosen.accel_s, accel_source=timed.accel_source,
        flops=counted.flops, flops_source=counted.flops_source,
        device_bytes=counted.device_bytes, device_bytes_source=counted.device_bytes_source,
        device_memory=memory, device_memory_source=memory_source,
        bytes_in=bytes_in, bytes_out=bytes_out,
        wire_in_s=round(wire_in, 9), wire_out_s=round(wire_out, 9),
        output_ratio=len(timed.outputs) / chosen.items,
        peak_rss=peak_rss, call_memory=concurrent.call_memory, batches=timed.batches,
        lock_share=concurrent.lock_share, concurrent_cpu=concurrent.cpu_factor,
        threaded_cpu=round(concurrent.threaded_cpu_s / chosen.cpu_s, 3)
        if concurrent.threaded_cpu_s and chosen.cpu_s > 0 else None,
        reserve=unit.reserve,
        max_concurrency=unit.max_concurrency, rate_limit=unit.rate_limit,
        threads=threads, parallelism=parallelism, thread_speedup=speedup,
        # building it and its first call, beyond that call's share of the work, and the
        # warm-up its first calls showed (`batch_timing.warm_up`)
        build_cpu_s=round(max(0.0, build[0] - timed.batches[0].cpu_s)
                          + (chosen.warmup_cpu_s or 0.0), 6),
        build_wall_s=round(max(0.0, build[1] - timed.batches[0].wall_s)
                           + (chosen.warmup_wall_s or 0.0), 6))
    return profile, timed.outputs
