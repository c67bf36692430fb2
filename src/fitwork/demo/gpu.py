"""GPU support for the demo, each part guarded by a check that it is there.

- The models run on a GPU when ``onnxruntime-gpu`` is installed and the fleet discovered on
  this host has a GPU (NVML, through ``fitwork[nvml]``); the check reads package metadata
  only, so this process never starts CUDA before it forks workers.
- `NvmlSampler` samples every visible GPU while a run goes on, through the library's
  `fitwork.telemetry.devices.DeviceSampler`: NVML's utilization rate (the share of the last
  sample period in which at least one kernel ran, the nearest NVML has to "SM busy"), the
  memory in use, power and SM clock.  Without NVML it samples nothing.
"""

from __future__ import annotations

import importlib.metadata
from types import TracebackType

from pydantic import BaseModel, Field

from fitwork.hardware.fleet import Fleet
from fitwork.telemetry.devices import DeviceSampler
from fitwork.telemetry.record import DeviceSample

SAMPLE_INTERVAL_S = 0.2


def onnxruntime_gpu_installed() -> bool:
    """True when the ``onnxruntime-gpu`` distribution is installed."""
    try:
        importlib.metadata.distribution("onnxruntime-gpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def fleet_gpu_class(fleet: Fleet) -> str | None:
    """The first accelerator class the fleet's nodes hold, or ``None``."""
    for node in fleet.node_types:
        for name, count in node.devices.items():
            if count > 0:
                return name
    return None


def gpu_ready(fleet: Fleet) -> str | None:
    """The GPU class the models will run on, or ``None`` to run them on CPU cores."""
    found = fleet_gpu_class(fleet)
    return found if found and onnxruntime_gpu_installed() else None


class GpuSamples(BaseModel):
    """What the GPUs did during one run (sample times in seconds from the sampler's start)."""

    interval_s: float
    samples: list[DeviceSample] = Field(default_factory=list)
    note: str = ""

    @property
    def mean_busy(self) -> float | None:
        """Mean utilization rate over all samples (0..1), or ``None`` without samples."""
        if not self.samples:
            return None
        return sum(s.utilization for s in self.samples) / len(self.samples)

    @property
    def peak_memory(self) -> int | None:
        """The most memory in use on one GPU, in bytes."""
        return max((s.memory_used for s in self.samples), default=None)


class NvmlSampler:
    """A `DeviceSampler` from enter to exit; ``result`` holds what it read."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.result = GpuSamples(interval_s=interval_s)
        self._sampler = DeviceSampler(interval_s)

    def __enter__(self) -> NvmlSampler:
        self._sampler.start()
        self.result.note = self._sampler.note
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.result.samples = self._sampler.stop()
        self.result.note = self._sampler.note
