"""Held out: a three-way fan-out.

Each source image (96 x 96 float32) is split into three views (a flat-map yielding three
outputs per input): a thumbnail, a medium and a full-size rendition, whose per-output work
differs (about 0.3, 1 and 3-4 ms of numpy), then each view gets a checksum.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

VIEWS = ((24, 8), (48, 22), (96, 35))  # (side, passes) of each view


@unit
def image(number: int) -> np.ndarray:
    """A 96 x 96 float32 image from a seed."""
    return np.random.default_rng(number).random((96, 96), dtype=np.float32)


@unit
def views(picture: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """The fan-out: three views of the image, each with its number of passes."""
    for side, passes in VIEWS:
        step = picture.shape[0] // side
        yield passes, picture[::step, ::step].copy()


@unit
def render(view: tuple[int, np.ndarray]) -> np.ndarray:
    """Per-output work: sharpen and renormalise, as many passes as the view asks."""
    passes, pixels = view
    for _ in range(passes):
        spectrum = np.fft.rfft2(pixels)
        pixels = np.fft.irfft2(spectrum * 1.01, s=pixels.shape).astype(np.float32)
        pixels = np.clip(pixels * 1.2 - 0.1, 0.0, 1.0)
    return pixels


@unit
def checksum(pixels: np.ndarray) -> float:
    """A checksum of the rendition."""
    return float(pixels[::3, ::3].sum())


SHAPE = Shape(Pipeline(image, views, render, checksum, name="fanout3"),
              "three-way fan-out: 3 views per image, ~0.3/1/3.5 ms of numpy each", 1200,
              (1, 2, 3, 4), {"image": (1,), "views": (1,), "render": (1, 2, 3),
                             "checksum": (1,)})
