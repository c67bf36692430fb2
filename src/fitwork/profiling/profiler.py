"""The profiler: runs each unit alone, in a forked process, on sample items.

Each unit runs in its own child process (so its peak memory is its own), after its
constructor, over the outputs the previous unit produced for the same samples.  Batched
units are measured at several batch sizes up to their declared one.  Per item it records
wall seconds, CPU seconds (their ratio tells I/O-bound from compute-bound), accelerator
seconds (CUDA events, when torch sees a GPU), FLOPs (declared on the unit, or counted by
torch's FLOP counter for torch code), bytes in and out, the output ratio and the peak RSS
above the process's starting point.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import resource
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from fitwork.errors import FitworkError
from fitwork.forked import ChildFailed, run_forked
from fitwork.profiling.record import BatchMeasurement, PipelineProfile, UnitProfile
from fitwork.version import __version__
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.pipeline import Pipeline
from fitwork.workload.unit import Unit


class ProfileError(FitworkError, RuntimeError):
    """A unit could not be profiled (it failed on every sample, or its process died)."""


def profile_pipeline(
    pipeline: Pipeline,
    items: Iterable[Any],
    *,
    samples: int = 32,
    host_class: str = "cpu-x86",
    progress: Callable[[str], None] | None = None,
) -> PipelineProfile:
    """Profile every unit of ``pipeline`` on the first ``samples`` items."""
    inputs = list(itertools.islice(items, samples))
    if not inputs:
        raise ProfileError("profile: the input has no items; give at least one sample")
    profiles = []
    with pipeline.run_context():
        for unit in pipeline.units:
            if progress:
                progress(unit.name)
            profile, outputs = _measure_in_child(unit, inputs, host_class)
            profiles.append(profile)
            inputs = outputs[: max(samples, 1) * 4]
            if not inputs and unit is not pipeline.units[-1]:
                raise ProfileError(
                    f"profile: unit {unit.name!r} produced no outputs from {profile.samples} "
                    "samples, so the units after it cannot be measured; give more samples")
    return PipelineProfile(fitwork_version=__version__, pipeline=pipeline.name, units=profiles,
                           host_class=host_class, created_at=time.time())


def _measure_in_child(unit: Unit, inputs: list[Any], host_class: str
                      ) -> tuple[UnitProfile, list[Any]]:
    try:
        profile, outputs = run_forked(measure_unit, unit, inputs, host_class)
    except ChildFailed as failure:
        if failure.died:
            raise ProfileError(f"profile: unit {unit.name!r} killed its process ({failure}); "
                               "check its memory use and native code") from None
        raise ProfileError(f"profile: unit {unit.name!r}: {failure}") from None
    return profile, outputs


def _sizes(unit: Unit, count: int) -> list[int]:
    if not unit.batch_size:
        return [1]
    sizes = {1, unit.batch_size}
    size = 2
    while size < unit.batch_size:
        sizes.add(size)
        size *= 4
    return sorted(s for s in sizes if s <= max(count, 1)) or [1]


def _caller(kernel: Kernel) -> Callable[[list[Any]], tuple[list[Any], int]]:
    """Raw results of a batch of inputs, and how many failed, whatever the unit's shape."""
    if kernel.unit.batch_size:
        return kernel.call_batch
    return kernel.results


def _accelerator_timer() -> Callable[[Callable[[], Any]], tuple[Any, float | None]]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return lambda call: (call(), None)

    def timed(call: Callable[[], Any]) -> tuple[Any, float | None]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = call()
        end.record()
        torch.cuda.synchronize()
        return result, start.elapsed_time(end) / 1000.0

    return timed


def _count_flops(unit: Unit, call: Callable[[list[Any]], tuple[list[Any], int]],
                 sample: Any) -> tuple[float | None, str | None]:
    if unit.flops is not None:
        value = unit.flops(sample) if callable(unit.flops) else unit.flops
        return float(value), "declared"
    torch = sys.modules.get("torch")
    if torch is None:
        return None, None
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        call([sample])
    total = counter.get_total_flops()
    return (float(total), "counted") if total else (None, None)


def _size(value: Any) -> int:
    try:
        return len(pickle.dumps(value, protocol=5))
    except Exception:
        return 0


def run_queue_seconds() -> float:
    """Seconds this process has waited in the kernel's run queue (0 where not reported)."""
    try:
        with open("/proc/self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_unit(unit: Unit, inputs: list[Any], host_class: str
                 ) -> tuple[UnitProfile, list[Any]]:
    """Measure ``unit`` on ``inputs`` in this process; returns its profile and its outputs."""
    import psutil

    start_rss = psutil.Process().memory_info().rss
    kernel = Kernel(unit)
    call = _caller(kernel)
    timer = _accelerator_timer()
    with contextlib.suppress(Exception):
        call([inputs[0]])  # warm-up: imports, caches, CUDA context
    batches: list[BatchMeasurement] = []
    outputs: list[Any] = []
    failures = 0
    for size in _sizes(unit, len(inputs)):
        wall = cpu = accel = queued = 0.0
        measured = 0
        produced: list[Any] = []
        for i in range(0, len(inputs), size):
            batch = inputs[i:i + size]
            wall0, cpu0, queue0 = time.perf_counter(), time.process_time(), run_queue_seconds()
            (results, failed), accel_s = timer(lambda b=batch: call(b))
            if failed == len(batch):
                failures += len(batch) if size == (unit.batch_size or 1) else 0
                continue
            wall += time.perf_counter() - wall0
            cpu += time.process_time() - cpu0
            queued += run_queue_seconds() - queue0
            accel += accel_s or 0.0
            measured += len(batch) - failed
            for item, result in zip(batch, results, strict=True):
                if type(result) is Failed:
                    failures += 1 if size == (unit.batch_size or 1) else 0
                else:
                    produced.extend(kernel.outputs(item, result))
        if not measured:
            continue
        batches.append(BatchMeasurement(batch_size=size, items=measured, wall_s=wall / measured,
                                        cpu_s=cpu / measured, queued_s=queued / measured,
                                        accel_s=accel / measured if accel else None))
        outputs = produced
    if not batches:
        raise ProfileError(f"failed on all {len(inputs)} samples; run it serially to see why")
    chosen = batches[-1]
    flops, flops_source = _count_flops(unit, call, inputs[0])
    profile = UnitProfile(
        name=unit.name, kind=unit.kind.value,
        resources={k: float(v) for k, v in unit.resources.as_dict().items()},
        batch_size=unit.batch_size, device_class=host_class, samples=len(inputs),
        failures=failures, wall_s=chosen.wall_s, cpu_s=chosen.cpu_s, queued_s=chosen.queued_s,
        accel_s=chosen.accel_s,
        flops=flops, flops_source=flops_source,
        bytes_in=sum(map(_size, inputs)) / len(inputs),
        bytes_out=sum(map(_size, outputs)) / len(inputs),
        output_ratio=len(outputs) / chosen.items,
        peak_rss=max(0, _rss() - start_rss), batches=batches)
    return profile, outputs
