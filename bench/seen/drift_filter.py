"""Held out: a filter whose keep ratio drifts along the input.

Item ``n`` sits at phase ``n % 10_000`` of its input (the benches profile on items 10,000
on and run on items 0 on, so both start at phase 0, as a profile of a file's head and a run
of the whole file do).  The filter keeps 80% of the items at phase 0, falling linearly to
20% at phase 3,000 and staying there; the stage after it costs about 2.5 ms per kept item.
"""

from __future__ import annotations

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

PERIOD = 10_000
DRIFT = 3_000  # items over which the keep ratio falls from EARLY to LATE
EARLY, LATE = 0.8, 0.2


def keep_ratio(number: int) -> float:
    """The share of items kept around item ``number``."""
    phase = number % PERIOD
    return EARLY + (LATE - EARLY) * min(phase, DRIFT) / DRIFT


@unit
def reading(number: int) -> tuple[int, np.ndarray]:
    """A 2,048-float sensor reading and its position."""
    return number, np.random.default_rng(number).standard_normal(2048)


@unit(kind="filter")
def worth_it(item: tuple[int, np.ndarray]) -> bool:
    """A cheap check (a spectrum's energy) and the drifting acceptance."""
    number, values = item
    energy = float(np.abs(np.fft.rfft(values[:256])).sum())
    draw = ((number * 2654435761 + int(energy)) % 2 ** 32) / 2 ** 32
    return draw < keep_ratio(number)


@unit
def refine(item: tuple[int, np.ndarray]) -> np.ndarray:
    """The expensive stage on kept readings: repeated smoothing (about 2.5 ms)."""
    values = item[1]
    for _ in range(150):
        values = np.tanh(np.convolve(values, np.ones(7) / 7.0, mode="same") * 1.5)
    return values


@unit
def level(values: np.ndarray) -> float:
    """The reading's mean level."""
    return float(values.mean())


SHAPE = Shape(Pipeline(reading, worth_it, refine, level, name="drift_filter"),
              "filter keep ratio drifting 80% -> 20% over 3,000 items, ~2.5 ms after it", 4000,
              (1, 2, 3, 4), {"reading": (1,), "worth_it": (1, 2), "refine": (1, 2, 3),
                             "level": (1,)})
