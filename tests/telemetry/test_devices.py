"""The NVML device sampler: against a fake NVML here, against a real GPU where there is one."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from fitwork.telemetry.devices import DeviceSampler


class NotSupported(Exception):
    """What NVML raises for a reading a GPU does not offer."""


class FakeNvml:
    """The part of pynvml the sampler uses, over made-up GPUs."""

    NVML_CLOCK_SM = 1

    def __init__(self, names: list[str], busy: list[float], power: bool = True) -> None:
        self.names, self.busy, self.power = names, busy, power
        self.started = self.stopped = 0
        self.fail_init: Exception | None = None

    def nvmlInit(self) -> None:
        if self.fail_init is not None:
            raise self.fail_init
        self.started += 1

    def nvmlShutdown(self) -> None:
        self.stopped += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.names[handle].encode()  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:04d}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=(handle + 1) << 30, free=0)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=round(self.busy[handle] * 100), memory=10)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if not self.power:
            raise NotSupported("Not Supported")
        return 350_500

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        assert kind == self.NVML_CLOCK_SM
        return 1980


def test_samples_every_visible_gpu_relative_to_t0() -> None:
    nvml = FakeNvml(["NVIDIA H100 80GB HBM3"] * 3, [0.5, 0.25, 1.0])
    sampler = DeviceSampler(0.01, t0=time.monotonic() - 100.0, node="n1",
                            env={"CUDA_VISIBLE_DEVICES": "2,0"}, nvml=nvml)
    assert sampler.start() is sampler and sampler.running
    time.sleep(0.08)
    samples = sampler.stop()
    assert not sampler.running and nvml.started == nvml.stopped == 1
    assert {s.device for s in samples} == {0, 2}
    assert len(samples) >= 4 and all(s.t_s >= 100.0 for s in samples)
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    first = next(s for s in samples if s.device == 2)
    assert (first.name, first.node, first.utilization) == ("NVIDIA H100 80GB HBM3", "n1", 1.0)
    assert (first.memory_used, first.memory_total) == (3 << 30, 80 << 30)
    assert (first.power_w, first.sm_clock_mhz) == (350.5, 1980.0)
    assert sampler.stop() == samples  # stopping again changes nothing
    assert "sampling 2 GPUs" in sampler.note


def test_a_run_shorter_than_the_interval_still_gets_a_reading() -> None:
    nvml = FakeNvml(["NVIDIA L4"], [0.3], power=False)
    with DeviceSampler(60.0, nvml=nvml, devices=[0], clock=lambda: 5.0) as sampler:
        pass
    [only] = sampler.samples
    assert only.t_s == 0.0  # t0 taken at start from the same clock
    assert only.power_w is None and only.utilization == pytest.approx(0.3)


def test_no_nvml_no_gpu_or_a_failing_driver_samples_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    missing = DeviceSampler(0.01).start()
    assert missing.stop() == [] and "nvidia-ml-py" in missing.note and "NVML" in missing.note
    none = FakeNvml([], [])
    empty = DeviceSampler(0.01, nvml=none).start()
    assert not empty.running and empty.stop() == [] and "no visible GPU" in empty.note
    assert none.started == none.stopped == 1
    hidden = DeviceSampler(0.01, nvml=FakeNvml(["NVIDIA T4"], [1.0]),
                           env={"CUDA_VISIBLE_DEVICES": ""}).start()
    assert hidden.stop() == []
    broken = FakeNvml(["NVIDIA T4"], [1.0])
    broken.fail_init = RuntimeError("Driver Not Loaded")
    failed = DeviceSampler(0.01, nvml=broken).start()
    assert failed.stop() == [] and "Driver Not Loaded" in failed.note
    with pytest.raises(ValueError, match="must be > 0"):
        DeviceSampler(0.0)


def _real_gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.skipif(_real_gpus() == 0, reason="no NVIDIA GPU (or no NVML) on this host")
def test_samples_a_real_gpu() -> None:
    sampler = DeviceSampler(0.05, time.monotonic()).start()
    time.sleep(0.3)
    samples = sampler.stop()
    assert samples, sampler.note
    assert all(0.0 <= s.utilization <= 1.0 for s in samples)
    assert all(0 <= s.memory_used <= s.memory_total and s.memory_total > 0 for s in samples)
    assert {s.name for s in samples} and all(s.t_s > 0 for s in samples)
