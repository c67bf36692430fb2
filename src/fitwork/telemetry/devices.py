"""`DeviceSampler`: reads every visible NVIDIA GPU through NVML, in a background thread.

Each reading becomes a `DeviceSample` (``fitwork.telemetry.record``)::

    utilization    nvmlDeviceGetUtilizationRates().gpu / 100: the share of the last sample
                   period (1/6 s to 1 s, by GPU) in which at least one kernel ran
    memory_used    nvmlDeviceGetMemoryInfo().used, bytes
    memory_total   nvmlDeviceGetMemoryInfo().total, bytes
    power_w        nvmlDeviceGetPowerUsage() / 1000 (milliwatts to watts); None if unsupported
    sm_clock_mhz   nvmlDeviceGetClockInfo(NVML_CLOCK_SM); None if unsupported
    t_s            clock() - t0: seconds from the run's start on the caller's clock

The GPUs read are those this process may use: NVML's list restricted by
``CUDA_VISIBLE_DEVICES`` (else ``NVIDIA_VISIBLE_DEVICES``), as discovery restricts it;
``device`` is the NVML index.  The sampler reads once every ``interval`` seconds and once
more at `stop`, so even a run shorter than the interval gets a reading.  Without
nvidia-ml-py (``pip install 'fitwork[nvml]'``), without a driver or without a GPU it
reads nothing: `start` and `stop` still work and `stop` returns ``[]``; ``note`` says why.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from fitwork.telemetry.record import DeviceSample

DEFAULT_INTERVAL_S = 0.5


@dataclass(frozen=True)
class _Device:
    index: int
    name: str
    handle: Any


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class DeviceSampler:
    """Samples the visible GPUs every ``interval`` seconds between `start` and `stop`.

    ``t0`` is the run's start as read from ``clock`` (``time.monotonic`` by default); each
    sample's ``t_s`` is ``clock() - t0``; without ``t0`` the moment `start` is called.
    ``node`` is written into every sample (``None``: this host).  ``devices`` picks NVML
    indices instead of the visible ones; ``env`` replaces ``os.environ`` for that choice.
    ``nvml`` replaces the ``pynvml`` module (tests pass a fake one).
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL_S, t0: float | None = None, *,
                 node: str | None = None, devices: Sequence[int] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 env: Mapping[str, str] | None = None, nvml: Any = None) -> None:
        if interval <= 0:
            raise ValueError(f"sampling interval {interval} must be > 0 seconds")
        self.interval = interval
        self.t0 = t0
        self.node = node
        self.clock = clock
        self.note = "not started"
        self._wanted = list(devices) if devices is not None else None
        self._env = env
        self._nvml = nvml
        self._devices: list[_Device] = []
        self._samples: list[DeviceSample] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._initialized = False
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> DeviceSampler:
        """Open NVML and start the sampling thread (or note why there is nothing to sample)."""
        if self._thread is not None or self._initialized:
            return self
        if self.t0 is None:
            self.t0 = self.clock()
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                self.note = ("no device samples: no NVML (nvidia-ml-py is not installed; "
                             "pip install 'fitwork[nvml]')")
                return self
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError, or the driver library failing to load
            self.note = f"no device samples: NVML did not start ({_one_line(exc)})"
            return self
        self._nvml, self._initialized = nvml, True
        try:
            self._devices = self._visible(nvml)
        except Exception as exc:
            self.note = f"no device samples: NVML could not list the GPUs ({_one_line(exc)})"
            self._shutdown()
            return self
        if not self._devices:
            self.note = "no device samples: no visible GPU"
            self._shutdown()
            return self
        self.note = (f"sampling {len(self._devices)} GPUs every {self.interval:g} s: "
                     + ", ".join(f"{d.index} {d.name}" for d in self._devices))
        self._thread = threading.Thread(target=self._loop, name="fitwork-device-sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[DeviceSample]:
        """Stop sampling (one last reading first) and return every sample, oldest first."""
        if self._thread is not None and not self._stopped:
            self._stopping.set()
            self._thread.join()
            self._sample()
        if not self._stopped:
            self._stopped = True
            self._shutdown()
        return self.samples

    @property
    def samples(self) -> list[DeviceSample]:
        """The samples so far (a copy)."""
        with self._lock:
            return list(self._samples)

    @property
    def running(self) -> bool:
        """Whether the sampling thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> DeviceSampler:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    # -- NVML ------------------------------------------------------------------------------

    def _visible(self, nvml: Any) -> list[_Device]:
        from fitwork.hardware.discover import GpuInfo, select_visible

        listed: list[tuple[GpuInfo, Any]] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            info = GpuInfo(index, _text(nvml.nvmlDeviceGetName(handle)),
                           _text(nvml.nvmlDeviceGetUUID(handle)),
                           int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
            listed.append((info, handle))
        if self._wanted is not None:
            chosen = [info for info, _ in listed if info.index in self._wanted]
        else:
            env = os.environ if self._env is None else self._env
            chosen, _ = select_visible([info for info, _ in listed], env)
        handles = {info.index: handle for info, handle in listed}
        return [_Device(info.index, info.name, handles[info.index]) for info in chosen]

    def _shutdown(self) -> None:
        if self._initialized:
            self._initialized = False
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        assert self.t0 is not None
        now = self.clock() - self.t0
        taken = [sample for device in self._devices
                 if (sample := self._read(device, now)) is not None]
        with self._lock:
            self._samples.extend(taken)

    def _read(self, device: _Device, t_s: float) -> DeviceSample | None:
        nvml = self._nvml
        try:
            rates = nvml.nvmlDeviceGetUtilizationRates(device.handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(device.handle)
        except Exception:
            return None
        power: float | None = None
        with contextlib.suppress(Exception):
            power = nvml.nvmlDeviceGetPowerUsage(device.handle) / 1000.0
        clock: float | None = None
        with contextlib.suppress(Exception):
            clock = float(nvml.nvmlDeviceGetClockInfo(device.handle, nvml.NVML_CLOCK_SM))
        return DeviceSample(t_s=t_s, node=self.node, device=device.index, name=device.name,
                            utilization=rates.gpu / 100.0, memory_used=int(memory.used),
                            memory_total=int(memory.total), power_w=power,
                            sm_clock_mhz=clock)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
