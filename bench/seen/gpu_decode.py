"""Held out: a GPU-style batched model behind CPU decoding.

Each frame arrives compressed (zlib over a 48 x 48 x 3 uint8 image); a CPU unit decodes and
filters it into a 512-float feature vector; the model pays a fixed cost per call (3 ms of a
core held, as a device's launch-and-synchronise spins the host thread) and a small one per
row (three 512 x 512 float32 layers), so it is far cheaper per item in batches of 32.
"""

from __future__ import annotations

import zlib

import numpy as np
from bench_shape import Shape, spin

from fitwork import Pipeline, unit

LAUNCH_S = 0.003  # the model's fixed CPU cost per call, whatever the batch
FEATURES = 512


@unit
def frame(number: int) -> bytes:
    """A compressed frame: a smooth random image, zlib level 1."""
    rng = np.random.default_rng(number)
    image = np.cumsum(rng.integers(-3, 4, (48, 48, 3)), axis=1) % 256
    return zlib.compress(image.astype(np.uint8).tobytes(), 1)


@unit
def decode(body: bytes) -> np.ndarray:
    """Decompress, blur a few times and pool to 512 features (about half a millisecond)."""
    image = np.frombuffer(zlib.decompress(body), dtype=np.uint8).reshape(48, 48, 3)
    pixels = image.astype(np.float32) / 255.0
    for _ in range(40):
        pixels[1:-1, 1:-1] = (pixels[:-2, 1:-1] + pixels[2:, 1:-1] + pixels[1:-1, :-2]
                              + pixels[1:-1, 2:] + pixels[1:-1, 1:-1]) / 5.0
    pooled = pixels.reshape(16, 3, 16, 3, 3).mean(axis=(1, 3)).ravel()  # 768 values
    return pooled[:FEATURES] - pooled[:FEATURES].mean()


class Model:
    """Three dense 512 x 512 float32 layers; a fixed cost per call, as on a device."""

    def __init__(self) -> None:
        rng = np.random.default_rng(11)
        self.layers = [rng.standard_normal((FEATURES, FEATURES)).astype(np.float32)
                       / FEATURES ** 0.5 for _ in range(3)]

    def __call__(self, batch: list[np.ndarray]) -> list[np.ndarray]:
        spin(LAUNCH_S)
        hidden = np.stack(batch)
        for weights in self.layers:
            hidden = np.maximum(hidden @ weights, 0.0)
        return list(hidden)


model = unit(batch_size=32, batch_wait=0.02, name="model")(Model)


@unit
def top_class(hidden: np.ndarray) -> float:
    """The winning class's share of the first 100 logits."""
    logits = hidden[:100] - hidden[:100].max()
    return float(np.exp(logits).max() / np.exp(logits).sum())


SHAPE = Shape(Pipeline(frame, decode, model, top_class, name="gpu_decode"),
              "GPU-style model (3 ms per call, batch_size=32) behind ~0.6 ms CPU decode", 6000,
              (1, 2, 3, 4), {"frame": (1,), "decode": (1, 2, 3), "model": (1, 2),
                             "top_class": (1,)})
