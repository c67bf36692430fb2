"""Accelerator timers: pluggable ways to measure a unit's seconds on an accelerator.

The profiler asks each timer factory in `TIMERS`, in order, for a timer for the replica it
is about to measure (after the warm-up call, so the unit has imported what it uses); a
factory returns ``None`` where it does not apply.  Around every measured batch each timer
is started and stopped, and the first figure in factory order is the batch's accelerator
time (the profile's ``accel_source`` names the timer).  Timers run only for a unit
measured on an accelerator class (it holds a GPU share and the host has one).

=================  ==========================================================================
``declared``       the unit's own clock (see below)
``onnxruntime``    the runs of onnxruntime sessions on an accelerator provider
                   (`fitwork.profiling.onnx.OnnxRunTimer`); no figure when none ran
``torch-cuda``     CUDA events around the call, when torch is imported and sees a GPU; the
                   peak of ``torch.cuda.max_memory_allocated`` is the replica's device memory
=================  ==========================================================================

onnxruntime comes before torch because it gives a figure only when a session ran on the
device, while CUDA events always give one: on an idle stream they measure the host's time
between the two events, so a unit that imports torch but runs its model in onnxruntime
would otherwise get its wall time.  A unit that runs both on the device gets the
onnxruntime part only; it should declare its own clock.

A unit declares its own clock with a method ``accelerator_seconds(self) -> float`` on its
class, or, for a function unit, with `accelerator_clock`::

    @unit(gpu=1)
    class Generate:
        def __init__(self): self.engine = load(); self.busy = 0.0
        def __call__(self, prompt): ...            # adds its device time to self.busy
        def accelerator_seconds(self) -> float:    # seconds on the device so far
            return self.busy

    @unit(gpu=1)
    @accelerator_clock(lambda: STATS.device_seconds)
    def embed(text): ...

The clock is cumulative (seconds since the replica started); the timer takes differences,
so batches, retries and calls split after a failure all count.  Another kind of timer is
added with `register_timer` (a factory taking the replica's callable).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from fitwork.workload.unit import Unit

DECLARED_METHOD = "accelerator_seconds"
"""The name of a unit's own clock: a method of a class unit, an attribute of a function."""

F = TypeVar("F", bound=Callable[..., Any])


class AcceleratorTimer(Protocol):
    """Measures accelerator seconds between `start` and `stop`."""

    source: str
    """Names the timer in a profile's ``accel_source``."""

    def start(self) -> None:
        """Begin a window."""

    def stop(self) -> float | None:
        """Accelerator seconds since `start`, or ``None`` when nothing was measured."""

    def peak_memory(self) -> int | None:
        """The most device memory the replica held so far, in bytes, or ``None``."""

    def close(self) -> None:
        """Undo whatever the timer changed."""


TimerFactory = Callable[[Any], "AcceleratorTimer | None"]
"""Makes a timer for a replica's callable (the instance of a class unit, else the
function), or returns ``None`` where it does not apply."""


def accelerator_clock(clock: Callable[[], float]) -> Callable[[F], F]:
    """Declare the accelerator clock of a function unit (put it under ``@unit``)."""

    def declare(fn: F) -> F:
        target = fn.fn if isinstance(fn, Unit) else fn  # under @unit: on its function
        setattr(target, DECLARED_METHOD, clock)
        return fn

    return declare


class DeclaredTimer:
    """Differences of the unit's own cumulative clock."""

    source = "declared"

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._began = 0.0

    def start(self) -> None:
        """Read the clock."""
        self._began = float(self.clock())

    def stop(self) -> float | None:
        """Seconds the clock moved since `start`."""
        return max(0.0, float(self.clock()) - self._began)

    def peak_memory(self) -> int | None:
        """Not known to a clock."""
        return None

    def close(self) -> None:
        """Nothing to undo."""


def declared_timer(replica: Any) -> DeclaredTimer | None:
    """A timer over the replica's ``accelerator_seconds``, where it declares one."""
    clock = getattr(replica, DECLARED_METHOD, None)
    return DeclaredTimer(clock) if callable(clock) else None


class TorchCudaTimer:
    """CUDA events around the measured calls; torch's peak allocated device memory."""

    source = "torch-cuda"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self._start: Any = None
        torch.cuda.reset_peak_memory_stats()

    def start(self) -> None:
        """Record a start event on the current stream."""
        self._start = self.torch.cuda.Event(enable_timing=True)
        self._start.record()

    def stop(self) -> float | None:
        """Record an end event, wait for the device, and return the seconds between them."""
        end = self.torch.cuda.Event(enable_timing=True)
        end.record()
        self.torch.cuda.synchronize()
        return float(self._start.elapsed_time(end)) / 1000.0

    def peak_memory(self) -> int | None:
        """``torch.cuda.max_memory_allocated`` since this timer was made (weights included)."""
        return int(self.torch.cuda.max_memory_allocated())

    def close(self) -> None:
        """Nothing to undo."""


def torch_cuda_timer(replica: Any) -> TorchCudaTimer | None:
    """A CUDA-event timer when the unit imported torch and torch sees a GPU."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return TorchCudaTimer(torch)


def onnxruntime_timer(replica: Any) -> AcceleratorTimer | None:
    """An onnxruntime run timer when the unit imported onnxruntime."""
    if "onnxruntime" not in sys.modules:
        return None
    from fitwork.profiling.onnx import OnnxRunTimer

    return OnnxRunTimer()


TIMERS: list[TimerFactory] = [declared_timer, onnxruntime_timer, torch_cuda_timer]
"""The timer factories the profiler asks, in order of preference."""


def register_timer(factory: TimerFactory, *, first: bool = False) -> None:
    """Add a timer factory: last in preference, or ``first``."""
    if factory in TIMERS:
        TIMERS.remove(factory)
    TIMERS.insert(0 if first else len(TIMERS), factory)


class Timers:
    """The timers that apply to one replica, started and stopped together."""

    def __init__(self, replica: Any, factories: list[TimerFactory] | None = None) -> None:
        self.timers: list[AcceleratorTimer] = []
        for factory in TIMERS if factories is None else factories:
            timer = factory(replica)
            if timer is not None:
                self.timers.append(timer)

    def start(self) -> None:
        """Start every timer."""
        for timer in self.timers:
            timer.start()

    def stop(self) -> tuple[float | None, str | None]:
        """Stop every timer; the first figure measured, and which timer measured it."""
        found: tuple[float | None, str | None] = (None, None)
        for timer in reversed(self.timers):
            seconds = timer.stop()
            if seconds is not None:
                found = (seconds, timer.source)
        return found

    def peak_memory(self) -> tuple[int | None, str | None]:
        """The first peak device memory a timer knows, and which timer knew it."""
        for timer in self.timers:
            peak = timer.peak_memory()
            if peak is not None:
                return peak, timer.source
        return None, None

    def close(self) -> None:
        """Close every timer."""
        for timer in self.timers:
            timer.close()
