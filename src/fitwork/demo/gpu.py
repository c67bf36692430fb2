"""GPU support for the demo, each part guarded by a check that it is there.

- The models run on a GPU when ``onnxruntime-gpu`` is installed and the fleet discovered on
  this host has a GPU (NVML, through ``fitwork[nvml]``); the check reads package metadata
  only, so this process never starts CUDA before it forks workers.
- `NvmlSampler` samples every visible GPU while a run goes on: NVML's utilization rate (the
  share of the last sample period in which at least one kernel ran, the nearest NVML has to
  "SM busy") and the memory in use.  Without NVML it samples nothing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import threading
import time
from types import TracebackType
from typing import Any

from pydantic import BaseModel, Field

from fitwork.hardware.fleet import Fleet

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


class GpuSample(BaseModel):
    """One reading of one GPU (seconds from the sampler's start)."""

    t_s: float
    gpu: int
    busy: float
    memory_used: int


class GpuSamples(BaseModel):
    """What the GPUs did during one run."""

    interval_s: float
    samples: list[GpuSample] = Field(default_factory=list)
    note: str = ""

    @property
    def mean_busy(self) -> float | None:
        """Mean utilization rate over all samples (0..1), or ``None`` without samples."""
        if not self.samples:
            return None
        return sum(s.busy for s in self.samples) / len(self.samples)

    @property
    def peak_memory(self) -> int | None:
        """The most memory in use on one GPU, in bytes."""
        return max((s.memory_used for s in self.samples), default=None)


class NvmlSampler:
    """A background thread sampling every GPU NVML sees, from enter to exit."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.result = GpuSamples(interval_s=interval_s)
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def __enter__(self) -> NvmlSampler:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                             for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:
            self.result.note = f"no GPU samples: NVML is not available ({exc})"
            return self
        if not self._handles:
            self.result.note = "no GPU samples: NVML sees no GPU"
            return self
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="fitwork-demo-nvml",
                                        daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.result.interval_s):
            now = time.monotonic() - self._t0
            for index, handle in enumerate(self._handles):
                with contextlib.suppress(Exception):
                    rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                    memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
                    self.result.samples.append(GpuSample(
                        t_s=now, gpu=index, busy=rates.gpu / 100.0,
                        memory_used=int(memory.used)))

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
