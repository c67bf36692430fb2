"""Check fitwork's GPU paths on a host with an NVIDIA GPU and print what they measure.

Run from the repository root, on a host with an NVIDIA driver (about a minute; under five):

    pip install -e '.[nvml]'        # plus torch, or onnxruntime-gpu, for a load and a timer
    python bench/gpu_check.py [--seconds 10]

1. discovery: the host's CPU class and the GPU class a unit with a GPU share is profiled on;
2. the profiler's accelerator timer on a unit that holds a GPU: torch CUDA events (with
   torch), else onnxruntime's run timer and profile counts (with onnxruntime-gpu);
3. the NVML sampler for ``--seconds`` under a small load (torch matmuls, else onnxruntime
   MatMuls on CUDA, else idle), and the fleet-utilization figure those samples give.

The profiler runs before this process touches CUDA, since its units run in forked
children.  Without a GPU it says so and exits 0; it exits 1 when a GPU is there but a
check finds nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.profiling.onnx_model

from fitwork import Pipeline, unit  # noqa: E402
from fitwork.hardware.discover import discover_local  # noqa: E402
from fitwork.profiling import profile_pipeline  # noqa: E402
from fitwork.profiling.classes import measured_on  # noqa: E402
from fitwork.profiling.profiler import ProfileError  # noqa: E402
from fitwork.profiling.record import UnitProfile  # noqa: E402
from fitwork.telemetry.devices import DeviceSampler  # noqa: E402
from fitwork.telemetry.record import DeviceSample, QueueSeries, RunRecord, UnitRecord  # noqa: E402
from fitwork.telemetry.utilization import fleet_utilization  # noqa: E402

SIZE = 2048
"""Square matrices of this side for every load."""
PER_ITEM = 8
"""Matmuls per item in the profiled units."""

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    """Note a failed check (printed at the end)."""
    if not ok:
        failures.append(what)
        print(f"  CHECK FAILED: {what}")


@unit(gpu=1)
class TorchMatmuls:
    """Eight fp16 matmuls of SIZE x SIZE per item, on the GPU."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16)

    def __call__(self, item: int) -> float:
        x = self.a
        for _ in range(PER_ITEM):
            x = (x @ self.a) * 0.01
        return float(x[0, 0])


@unit(gpu=1)
class OnnxMatmuls:
    """Eight fp32 MatMul runs of SIZE x SIZE per item, on onnxruntime's CUDA provider."""

    def __init__(self) -> None:
        import numpy as np
        import onnxruntime as ort

        from tests.profiling.onnx_model import matmul_model

        self.session = ort.InferenceSession(matmul_model(SIZE, SIZE, SIZE, weight=0.001),
                                            providers=["CUDAExecutionProvider"])
        self.x = np.ones((SIZE, SIZE), np.float32)

    def __call__(self, item: int) -> float:
        for _ in range(PER_ITEM):
            out = self.session.run(None, {"X": self.x})[0]
        return float(out[0, 0])


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def ort_cuda() -> bool:
    if not has("onnxruntime"):
        return False
    import onnxruntime as ort  # no session, so no CUDA context

    return "CUDAExecutionProvider" in ort.get_available_providers()


def step_discovery() -> str | None:
    print("1. discovery")
    node = discover_local().node_types[0]
    notes = node.discovered_from or {}
    print(f"  cpu class      {node.cpu_class} ({notes.get('cpu_class', '')})")
    print(f"  devices        {node.devices or 'none'} ({notes.get('devices', '')})")
    on = measured_on()
    print(f"  profile on     {on.found_from}")
    return on.accelerator_class


def step_profiler(gpu_class: str) -> None:
    print("2. profiler accelerator timer")
    candidates = [u for u, usable in ((TorchMatmuls, has("torch")), (OnnxMatmuls, ort_cuda()))
                  if usable]
    if not candidates:
        print("  skipped: neither torch nor onnxruntime-gpu (CUDA provider) is installed")
        return
    for candidate in candidates:
        began = time.perf_counter()
        try:
            profile = profile_pipeline(Pipeline(candidate), range(8), samples=8)
        except ProfileError as exc:
            print(f"  {candidate.name}: could not run ({exc})")
            continue
        show_profile(profile.units[0], gpu_class, time.perf_counter() - began)
        return
    check(False, "no GPU unit could be profiled")


def show_profile(u: UnitProfile, gpu_class: str, took: float) -> None:
    print(f"  unit {u.name}: measured on {u.device_class} in {took:.1f} s")
    print(f"  wall {u.wall_s * 1e3:.3f} ms/item, accelerator {_ms(u.accel_s)} ms/item "
          f"({u.accel_source or 'no timer'}), bound {u.bound}")
    flops_s = u.flops / u.accel_s if u.flops and u.accel_s else None
    print(f"  FLOPs {u.flops or 0:.4g}/item ({u.flops_source}), "
          f"{(flops_s or 0) / 1e12:.2f} TFLOP/s on the device")
    memory = "-" if u.device_memory is None else \
        f"{u.device_memory / 2**20:,.1f} MiB ({u.device_memory_source})"
    nbytes = "-" if u.device_bytes is None else \
        f"{u.device_bytes:.4g}/item ({u.device_bytes_source})"
    print(f"  device bytes {nbytes}, device memory {memory}")
    check(u.device_class == gpu_class, f"unit measured on {u.device_class}, not {gpu_class}")
    check(bool(u.accel_s), "no accelerator time measured")
    check(u.accel_s is None or u.accel_s <= u.wall_s * 1.05, "accelerator time above wall")
    expected = 2.0 * SIZE**3 * PER_ITEM
    check(u.flops is not None and abs(u.flops / expected - 1) < 0.05,
          f"FLOPs {u.flops} per item, expected {expected:.4g}")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def load(seconds: float) -> tuple[str, float]:
    """Keep the GPU busy for ``seconds``; what ran, and the FLOPs it did."""
    deadline = time.perf_counter() + seconds
    done = 0
    if has("torch"):
        import torch

        if torch.cuda.is_available():
            a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16)
            while time.perf_counter() < deadline:
                for _ in range(16):
                    a = (a @ a) * 0.01
                torch.cuda.synchronize()
                done += 16
            return "torch fp16 matmuls", 2.0 * SIZE**3 * done
    if ort_cuda():
        import numpy as np
        import onnxruntime as ort

        from tests.profiling.onnx_model import matmul_model

        session = ort.InferenceSession(matmul_model(SIZE, SIZE, SIZE, weight=0.001),
                                       providers=["CUDAExecutionProvider"])
        x = np.ones((SIZE, SIZE), np.float32)
        while time.perf_counter() < deadline:
            session.run(None, {"X": x})
            done += 1
        return "onnxruntime fp32 MatMuls (CUDA)", 2.0 * SIZE**3 * done
    time.sleep(seconds)
    return "idle (neither torch nor onnxruntime-gpu)", 0.0


def step_sampler(seconds: float, gpu_class: str | None) -> None:
    print("3. NVML sampler" + (f" for {seconds:g} s under load" if gpu_class else ""))
    t0 = time.monotonic()
    sampler = DeviceSampler(0.2, t0).start()
    print(f"  {sampler.note}")
    what, flops = load(seconds) if gpu_class else ("nothing", 0.0)
    samples = sampler.stop()
    wall = time.monotonic() - t0
    print(f"  load: {what}, {flops / max(wall, 1e-9) / 1e12:.2f} TFLOP/s achieved over "
          f"{wall:.1f} s; {len(samples)} samples")
    for device in sorted({(s.node, s.device) for s in samples}, key=str):
        _print_device(device[1], [s for s in samples if (s.node, s.device) == device])
    if not gpu_class:
        return
    check(bool(samples), f"a GPU but no samples: {sampler.note}")
    record = RunRecord(
        fitwork_version="check", run_id="gpu-check", pipeline="load", engine="none",
        started_at=time.time() - wall, wall_s=wall, items_in=1, items_completed=1, outputs=1,
        failures=0, poisoned=0, retries=0, worker_restarts=0, throughput=1 / wall,
        latency_p50_s=None, latency_p95_s=None, resources=[], workers=[], queue=QueueSeries(),
        units=[UnitRecord(name="load", kind="map", replicas=1,
                          resources={"cpu": 1.0, "gpu": 1.0}, busy_s=wall, cpu_s=wall)],
        device_samples=samples)
    for row in fleet_utilization(record):
        print(f"  fleet utilization {row.device_class}: {row.utilization:.1%} of "
              f"{row.allocated:g} allocated ({row.basis})")
    if what.startswith(("torch", "onnxruntime")):
        busy = statistics.fmean(s.utilization for s in samples) if samples else 0.0
        check(busy > 0.1, f"a load ran but mean utilization is {busy:.1%}")


def _print_device(index: int, samples: list[DeviceSample]) -> None:
    busy = statistics.fmean(s.utilization for s in samples)
    powers = [s.power_w for s in samples if s.power_w is not None]
    clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None]
    memory = max(s.memory_used for s in samples)
    print(f"  GPU {index} {samples[0].name}: utilization mean {busy:.1%}, "
          f"max {max(s.utilization for s in samples):.0%}; memory peak "
          f"{memory / 2**30:.2f} of {samples[0].memory_total / 2**30:.1f} GiB; power "
          + (f"mean {statistics.fmean(powers):.0f} W, max {max(powers):.0f} W" if powers
             else "not reported")
          + "; SM clock "
          + (f"{min(clocks):.0f}-{max(clocks):.0f} MHz" if clocks else "not reported"))


def main() -> int:
    """Run the three checks; 1 if one failed on a host with a GPU."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="how long the sampler runs under load")
    args = parser.parse_args()
    started = time.perf_counter()
    gpu_class = step_discovery()
    if gpu_class is None:
        print("  no NVIDIA GPU found")
        print("2. profiler accelerator timer: skipped, no GPU to time")
    else:
        step_profiler(gpu_class)
    step_sampler(args.seconds, gpu_class)
    print(f"done in {time.perf_counter() - started:.1f} s"
          + (f"; {len(failures)} checks failed" if failures else ""))
    return 1 if failures and gpu_class else 0


if __name__ == "__main__":
    sys.exit(main())
