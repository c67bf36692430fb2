"""Held out: a unit whose cost depends on the item's size.

Documents have a lognormal number of tokens (median 600, sigma 1.1: one in ten is past
2,400, a few past 10,000); tokenising and counting them is pure Python, so the cost per
document follows its length, and long ones also cost more to move between processes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

MEDIAN_TOKENS = 600
SIGMA = 1.1
MOST_TOKENS = 40_000
WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa",
         "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon")


def tokens_of(number: int) -> int:
    """Document ``number``'s length in tokens."""
    draw = np.random.default_rng(number).lognormal(math.log(MEDIAN_TOKENS), SIGMA)
    return int(min(MOST_TOKENS, max(8, draw)))


@unit
def document(number: int) -> str:
    """A document of `tokens_of` words."""
    picks = np.random.default_rng(number + 1).integers(0, len(WORDS), tokens_of(number))
    return " ".join(WORDS[k] for k in picks)


@unit
def count(text: str) -> dict[str, int]:
    """Word and bigram counts (pure Python: its cost follows the document's length)."""
    words = text.split()
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    for first, second in itertools.pairwise(words):
        key = first + "_" + second
        counts[key] = counts.get(key, 0) + 1
    return counts


@unit
def salience(counts: dict[str, int]) -> float:
    """The top term's share."""
    return max(counts.values()) / sum(counts.values())


SHAPE = Shape(Pipeline(document, count, salience, name="sized_items"),
              "cost by item size: lognormal tokens (median 600, sigma 1.1), pure Python", 8000,
              (1, 2, 3, 4), {"document": (1, 2), "count": (1, 2, 3), "salience": (1,)})
