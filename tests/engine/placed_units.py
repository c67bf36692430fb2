"""Units for the multi-node Ray test: a CPU step, a GPU-class step, a CPU step."""

from __future__ import annotations

from fitwork import unit


@unit(cpu=1)
def prepare(x: int) -> int:
    return x * 3


@unit(cpu=0.5, gpu=0.5)
def model(x: int) -> int:
    return x + 1


@unit(cpu=1)
def finish(x: int) -> int:
    return x
