"""A monolithic image classifier, written the way people write one; ``fitwork.decompose`` splits it.

``classify(item)`` does everything for one image, in one function: fetch the PNG over HTTP
(I/O: the loopback server of ``thumbnails.py``, with its simulated storage latency), decode
and resize it (CPU), run a tiny convolutional network over the pixels (the model-like step,
NumPy on one core), and turn the scores into a label.  Run as a script, it decomposes the
function on a sample, fits the units to this host, and runs both the plan and the function
as one unit with the replicas the monolithic baseline gets::

    python examples/monolith.py [ITEMS]

On a host with a GPU, the model lines would be written in torch and marked
``# fitwork: gpu``; here they are measured, and found CPU-bound.
"""

from __future__ import annotations

import io
import itertools
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from PIL import Image

import fitwork

sys.path.insert(0, str(Path(__file__).resolve().parent))
from thumbnails import BASE_URL_ENV, LATENCY_ENV, read_items, serve_images

from fitwork.decomposition import DecomposedPipeline, decompose, with_context
from fitwork.workload import Pipeline, unit

SIZE = 96
LABELS = ["sky", "sea", "sand", "stone", "leaf", "fire", "snow", "dusk", "rust", "ink"]
_weights = np.random.default_rng(7)
KERNEL_1 = (_weights.standard_normal((8, 3, 3, 3)) / 5).astype(np.float32)
KERNEL_2 = (_weights.standard_normal((16, 8, 3, 3)) / 15).astype(np.float32)
DENSE = _weights.standard_normal((16, len(LABELS))).astype(np.float32)
BIAS = np.zeros(len(LABELS), dtype=np.float32)


def conv_relu(pixels: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """A 3x3 valid convolution (H, W, C) x (O, C, 3, 3) -> (H-2, W-2, O), then ReLU."""
    windows = sliding_window_view(pixels, (3, 3), axis=(0, 1))
    return np.maximum(np.einsum("hwcij,ocij->hwo", windows, kernel), 0.0)


@with_context(serve_images)
def classify(item: dict[str, Any]) -> dict[str, Any]:
    """Label one image: fetch, decode, run the model, post-process; all in one function."""
    url = f"{os.environ[BASE_URL_ENV]}/img/{item['name']}"
    with urllib.request.urlopen(url, timeout=30) as response:
        png = response.read()
    with Image.open(io.BytesIO(png)) as image:
        small = image.convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR)
        pixels = np.asarray(small, dtype=np.float32) / 255.0
    hidden = conv_relu(pixels, KERNEL_1)
    side = hidden.shape[0] // 2 * 2
    pooled = hidden[:side, :side].reshape(side // 2, 2, side // 2, 2, -1).mean(axis=(1, 3))
    features = conv_relu(pooled, KERNEL_2).mean(axis=(0, 1))
    logits = features @ DENSE + BIAS
    scores = np.exp(logits - logits.max())
    scores /= scores.sum()
    top = int(scores.argmax())
    return {"name": item["name"], "label": LABELS[top], "confidence": round(float(scores[top]), 4)}


def items(count: int) -> list[dict[str, Any]]:
    """``count`` items, cycling over the images the server holds."""
    names = read_items()
    return [dict(row) for row in itertools.islice(itertools.cycle(names), count)]


def monolithic(replicas: int, threads: int = 1) -> Pipeline:
    """The function as one unit, as people run it today: copies of the whole thing (each
    running ``threads`` calls at once where the plan's best monolith is threaded)."""
    io = {"io": threads} if threads > 1 else {}
    return Pipeline(unit(classify, name="classify", replicas=replicas, **io), name="classify",
                    context=serve_images)


def timed_run(pipeline: Pipeline, rows: list[dict[str, Any]],
              placement: Any = None) -> tuple[float, list[Any]]:
    """Realized items per second of one run (the run record's figure), and its outputs;
    ``placement`` a plan (which may run the units fused) or none (the units as declared)."""
    with fitwork.run(pipeline, rows, placement=placement, ordered=True) as result:
        outputs = list(result)
    return result.record.throughput, outputs


def compare(count: int = 300, samples: int = 12, latency_ms: float = 40.0) -> dict[str, Any]:
    """Decompose on a sample, fit to this host, run the plan and the monolithic baseline.

    ``latency_ms`` is the storage latency the image server adds to each request (a typical
    first-byte latency of an object store).
    """
    previous = os.environ.get(LATENCY_ENV)
    os.environ[LATENCY_ENV] = str(latency_ms)
    try:
        return _compare(count, samples)
    finally:
        if previous is None:
            os.environ.pop(LATENCY_ENV, None)
        else:
            os.environ[LATENCY_ENV] = previous


def _compare(count: int, samples: int) -> dict[str, Any]:
    from fitwork.fit.plan import plan_for
    from fitwork.hardware.discover import discover_local

    started = time.perf_counter()
    pipeline: DecomposedPipeline = decompose(classify, sample=items(samples))
    assert pipeline.profile is not None
    plan = plan_for(pipeline.profile, discover_local())
    workers = plan.placement().counts()
    mono = plan.monolithic.result.replicas
    mono_replicas = sum(p.replicas for p in mono)
    mono_threads = max((p.threads or 1 for p in mono if p.replicas), default=1)
    rows = items(count)
    fitted_rate, fitted_out = timed_run(pipeline, rows, plan)
    mono_rate, mono_out = timed_run(monolithic(mono_replicas, mono_threads), rows)
    return {"decomposition": pipeline.decomposition, "plan": plan, "workers": workers,
            "monolithic_replicas": mono_replicas, "monolithic_threads": mono_threads,
            "fitted_items_per_s": fitted_rate,
            "monolithic_items_per_s": mono_rate, "same_outputs": fitted_out == mono_out,
            "seconds": time.perf_counter() - started}


if __name__ == "__main__":
    from fitwork.decomposition.render import render

    figures = compare(int(sys.argv[1]) if len(sys.argv) > 1 else 300,
                      latency_ms=float(os.environ.get(LATENCY_ENV, 40.0)))
    print(render(figures["decomposition"]))
    plan = figures["plan"]
    print(f"plan: {figures['workers']} predicts {plan.fitted.throughput:,.1f} items/s; "
          f"monolithic baseline: {figures['monolithic_replicas']} replicas x "
          f"{figures['monolithic_threads']} threads, predicts "
          f"{plan.monolithic.throughput:,.1f} items/s")
    print(f"realized: fitted {figures['fitted_items_per_s']:,.1f} items/s, monolithic "
          f"{figures['monolithic_items_per_s']:,.1f} items/s "
          f"({figures['fitted_items_per_s'] / figures['monolithic_items_per_s']:.2f}x); "
          f"same outputs: {figures['same_outputs']}; {figures['seconds']:.1f} s in all")
