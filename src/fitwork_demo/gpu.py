"""GPU support for the demo, each part guarded by a check that it is there.

The models run on a GPU when ``onnxruntime-gpu`` is installed and the fleet discovered on
this host has a GPU (NVML, through ``fitwork[nvml]``); the check reads package metadata
only, so this process never starts CUDA before it forks workers.  What the GPUs did during
a run is in its record (``RunRecord.device_samples``, sampled by the engine through NVML);
`mean_busy` and `peak_memory` read those samples.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from typing import Protocol

from fitwork import Fleet


class DeviceSample(Protocol):
    """What is read of one GPU reading (an item of ``RunRecord.device_samples``)."""

    @property
    def utilization(self) -> float:
        """NVML's utilization rate, 0..1."""

    @property
    def memory_used(self) -> int:
        """Device memory in use, in bytes."""


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


def mean_busy(samples: Sequence[DeviceSample]) -> float | None:
    """Mean NVML utilization rate over ``samples`` (0..1), or ``None`` without samples."""
    if not samples:
        return None
    return sum(s.utilization for s in samples) / len(samples)


def peak_memory(samples: Sequence[DeviceSample]) -> int | None:
    """The most memory in use on one GPU over ``samples``, in bytes."""
    return max((s.memory_used for s in samples), default=None)
