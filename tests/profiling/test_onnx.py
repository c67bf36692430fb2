"""onnxruntime in the profiler: counting from profiles, run timing, the profiler end to end."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from fitwork import Pipeline, unit
from fitwork.hardware import discover
from fitwork.hardware.discover import GpuInfo
from fitwork.profiling import profile_pipeline
from fitwork.profiling.onnx import (
    count_onnx,
    node_flops,
    profile_device_bytes,
    profile_device_seconds,
    profile_flops,
    runs_after,
)
from tests.profiling.onnx_model import matmul_model

ROWS, INNER, COLS = 4, 8, 3


def node(op: str, ts: float, provider: str = "CUDAExecutionProvider", **sizes: int) -> dict:
    args: dict[str, Any] = {"op_name": op, "provider": provider,
                            "input_type_shape": [{"float": [2, 3]}, {"float": [3, 5]}],
                            "output_type_shape": [{"float": [2, 5]}]}
    args.update({k: str(v) for k, v in sizes.items()})
    return {"cat": "Node", "name": f"{op}_kernel_time", "ts": ts, "dur": 5, "args": args}


def run(ts: float, dur: float) -> dict:
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur, "args": {}}


def test_counting_a_profile() -> None:
    assert node_flops("MatMul", [[2, 3], [3, 5]], [[2, 5]]) == 2 * 10 * 3
    assert node_flops("MatMul", [[2, 3]], [[2, 5]]) == 0.0  # prepacked weight: not counted
    events = [node("MatMul", 10, activation_size=24, parameter_size=60, output_size=40),
              node("Relu", 20, activation_size=40, output_size=40), run(5, 100),
              node("MatMul", 210, provider="CPUExecutionProvider", activation_size=24),
              run(200, 50)]
    assert profile_flops(events) == 2 * (2 * 10 * 3)
    assert profile_device_bytes(events) == 24 + 60 + 40 + 40 + 40  # CPU node left out
    assert profile_device_seconds(events) == pytest.approx(150e-6)
    assert profile_device_seconds([*events[3:4], run(200, 50)]) is None  # CPU only
    kernels = [*events, {"cat": "Kernel", "name": "gemm", "ts": 12, "dur": 30, "args": {}}]
    assert profile_device_seconds(kernels) == pytest.approx(30e-6)
    later = runs_after(events, 1)
    assert [e["ts"] for e in later if e["cat"] == "Node"] == [210]
    assert runs_after(events, 0) == events


def test_count_sessions_profiles_sessions_made_inside_it() -> None:
    import onnxruntime as ort

    x = np.ones((ROWS, INNER), np.float32)
    before = ort.InferenceSession(matmul_model(ROWS, INNER, COLS),
                                  providers=["CPUExecutionProvider"])
    with count_onnx() as count:
        session = ort.InferenceSession(matmul_model(ROWS, INNER, COLS),
                                       providers=["CPUExecutionProvider"])
        session.run(None, {"X": x})  # a constructor's warm-up run: left out
        count.mark()
        for _ in range(3):
            session.run(None, {"X": x})
        before.run(None, {"X": x})
        count.read()
    assert count.sessions == [session]
    assert count.flops == 3 * 2 * ROWS * COLS * INNER
    assert count.device_bytes == 0.0 and count.device_s is None  # it ran on the CPU
    assert not ort.InferenceSession(matmul_model(1, 2, 1)).get_session_options() \
        .enable_profiling


def test_run_timer_times_accelerated_runs_only() -> None:
    import onnxruntime as ort

    from fitwork.profiling.onnx import OnnxRunTimer

    session = ort.InferenceSession(matmul_model(ROWS, INNER, COLS),
                                   providers=["CPUExecutionProvider"])
    x = np.ones((ROWS, INNER), np.float32)
    timer = OnnxRunTimer()
    try:
        timer.start()
        session.run(None, {"X": x})
        assert timer.stop() is None  # a CPU session is not an accelerator's
    finally:
        timer.close()
    every = OnnxRunTimer(accelerated=lambda s: True)
    try:
        every.start()
        began = time.perf_counter()
        session.run(None, {"X": x})
        session.run(["Y"], {"X": x})
        took = time.perf_counter() - began
        seconds = every.stop()
    finally:
        every.close()
    assert seconds is not None and 0 < seconds <= took
    assert session.run.__qualname__.startswith("Session.")  # put back


@unit(batch_size=4)
class OnnxModel:
    def __init__(self) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(matmul_model(ROWS, INNER, COLS),
                                            providers=["CPUExecutionProvider"])
        self.session.run(None, {"X": np.zeros((ROWS, INNER), np.float32)})  # warm-up

    def __call__(self, batch: list[int]) -> list[float]:
        outputs = []
        for value in batch:
            x = np.full((ROWS, INNER), value, np.float32)
            outputs.append(float(self.session.run(None, {"X": x})[0].sum()))
        return outputs


GPU_ONNX = unit(OnnxModel.fn, name="gpu_onnx", gpu=1, batch_size=4)


def test_the_profiler_counts_flops_of_an_onnx_unit() -> None:
    pytest.importorskip("onnxruntime")
    profile = profile_pipeline(Pipeline(OnnxModel), range(8), samples=8, host_class="cpu-x86")
    [model] = profile.units
    assert model.flops == 2 * ROWS * COLS * INNER and model.flops_source == "counted"
    assert model.device_bytes is None  # not on an accelerator: no device bytes
    assert model.accel_s is None


def test_on_an_accelerator_the_profiler_times_runs_and_measures_device_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    from fitwork.profiling import onnx

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(discover, "nvml_gpus", lambda: (
        [GpuInfo(0, "NVIDIA L4", "GPU-0f", 24 * 2**30)], "NVML lists 1 (faked)"))
    # No GPU here: the CPU provider stands in for an accelerator's.
    monkeypatch.setattr(onnx, "CPU_PROVIDER", "NoSuchExecutionProvider")
    profile = profile_pipeline(Pipeline(GPU_ONNX), range(8), samples=8)
    [model] = profile.units
    assert model.device_class == "L4" and profile.accelerator_class == "L4"
    assert model.accel_source == "onnxruntime"
    assert model.accel_s is not None and 0 < model.accel_s <= model.wall_s
    assert all(b.accel_s for b in model.batches)
    per_run = (ROWS * INNER + INNER * COLS + ROWS * COLS) * 4  # input, weight, output
    assert model.device_bytes == per_run and model.device_bytes_source == "measured"
    assert model.flops == 2 * ROWS * COLS * INNER and model.flops_source == "counted"
    assert model.device_memory is None
