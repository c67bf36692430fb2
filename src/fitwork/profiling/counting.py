"""FLOPs and device bytes per item: declared by the unit, else counted on one batch (no timing)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fitwork.profiling.torch_count import count as torch_count
from fitwork.workload.kernel import Kernel
from fitwork.workload.unit import PerItem, Unit


def _declared(value: PerItem, inputs: list[Any]) -> float | None:
    """A per-item declaration as a number: itself, or its mean over ``inputs``."""
    if value is None:
        return None
    if callable(value):
        return sum(float(value(item)) for item in inputs) / len(inputs)
    return float(value)


@dataclass
class Counted:
    """FLOPs and device bytes per item, and where each came from (``None``: unknown)."""

    flops: float | None = None
    flops_source: Literal["declared", "counted"] | None = None
    device_bytes: float | None = None
    device_bytes_source: Literal["measured", "declared", "counted"] | None = None


def count_figures(unit: Unit, call: Callable[[list[Any]], tuple[list[Any], int]],
                  inputs: list[Any], accelerated: bool, used_onnx: bool) -> Counted:
    """Declared figures, else FLOPs and device bytes counted on one batch (no timing).

    A unit that imported torch is counted by torch (`fitwork.profiling.torch_count`: its
    FLOP counter, and the bytes its operators read and write, weights included) where it
    demands a GPU or lacks FLOPs; onnxruntime's counting builds a fresh replica, so it runs
    only for a unit whose timed calls ran onnxruntime sessions.
    """
    counted = Counted()
    flops = _declared(unit.flops, inputs)
    if flops is not None:
        counted.flops, counted.flops_source = flops, "declared"
    nbytes = _declared(unit.device_bytes, inputs)
    if nbytes is not None:
        counted.device_bytes, counted.device_bytes_source = nbytes, "declared"
    batch = inputs[: unit.batch_size or 1]
    wants_bytes = accelerated and counted.device_bytes is None
    if counted.flops is None or (counted.device_bytes is None and unit.resources.gpu > 0):
        flops, nbytes = torch_count(call, batch)  # (None, None) where torch is not loaded
        if counted.flops is None and flops:
            counted.flops, counted.flops_source = flops, "counted"
        if counted.device_bytes is None and nbytes:
            counted.device_bytes, counted.device_bytes_source = nbytes, "counted"
            wants_bytes = False
    if (counted.flops is None or wants_bytes) and used_onnx:
        flops, nbytes = _onnx_counts(unit, batch)
        if counted.flops is None and flops:
            counted.flops, counted.flops_source = flops, "counted"
        if wants_bytes and nbytes:
            counted.device_bytes, counted.device_bytes_source = nbytes, "measured"
    return counted


def _onnx_counts(unit: Unit, batch: list[Any]) -> tuple[float | None, float | None]:
    """FLOPs and accelerator device bytes per item from onnxruntime's profiler, on a fresh
    replica (its sessions profiled as created); ``None`` for what it could not count."""
    from fitwork.profiling.onnx import count_onnx

    try:
        with count_onnx() as count:
            fresh = Kernel(unit).caller()
            count.mark()
            fresh(batch)
            count.read()
    except Exception:
        return None, None
    if not count.sessions:
        return None, None
    return count.flops / len(batch) or None, count.device_bytes / len(batch) or None
