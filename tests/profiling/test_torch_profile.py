"""A PyTorch unit profiled end to end: its FLOPs and device bytes reach the profile."""

from __future__ import annotations

import pytest

from fitwork import Pipeline, unit
from fitwork.hardware import discover
from fitwork.hardware.discover import GpuInfo
from fitwork.profiling import profile_pipeline

IN, OUT = 64, 128


@unit(batch_size=4)
class TorchModel:
    def __init__(self) -> None:
        import torch

        torch.manual_seed(0)
        self.torch = torch
        self.layer = torch.nn.Linear(IN, OUT, bias=False)

    def __call__(self, batch: list[int]) -> list[float]:
        torch = self.torch
        with torch.no_grad():
            x = torch.stack([torch.full((IN,), float(v)) for v in batch])
            return self.layer(x).sum(dim=1).tolist()


GPU_TORCH = unit(TorchModel.fn, name="gpu_torch", gpu=1, batch_size=4)


def test_the_profiler_counts_flops_of_a_torch_unit() -> None:
    pytest.importorskip("torch")
    profile = profile_pipeline(Pipeline(TorchModel), range(8), samples=8, host_class="cpu-x86")
    [model] = profile.units
    assert model.flops == pytest.approx(2 * IN * OUT) and model.flops_source == "counted"
    # counted in the same pass: a quarter of the weights per item, with its input and output
    assert model.device_bytes is not None
    assert IN * OUT + (IN + OUT) * 4 <= model.device_bytes < IN * OUT * 4


def test_a_torch_unit_on_an_accelerator_gets_its_device_bytes_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(discover, "nvml_gpus", lambda: (
        [GpuInfo(0, "NVIDIA L4", "GPU-0f", 24 * 2**30)], "NVML lists 1 (faked)"))
    profile = profile_pipeline(Pipeline(GPU_TORCH), range(8), samples=8)
    [model] = profile.units
    assert model.device_class == "L4"
    assert model.flops == pytest.approx(2 * IN * OUT) and model.flops_source == "counted"
    weights = IN * OUT * 4
    # per item: a quarter of the weights (read once per call of 4), its input and its output
    assert model.device_bytes_source == "counted"
    assert model.device_bytes is not None
    assert model.device_bytes >= weights / 4 + (IN + OUT) * 4
    assert model.device_bytes < weights  # the weights are shared by the batch, not per item
