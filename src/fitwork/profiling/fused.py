"""The fused replica's memory: one process running every unit in turn, its peak RSS."""

from __future__ import annotations

from typing import Any

from fitwork.forked import forked_ints
from fitwork.profiling.in_turn import in_turn
from fitwork.profiling.rss import peak_since_start
from fitwork.workload.pipeline import Pipeline

FUSED_TIMEOUT_S = 120.0
"""The most seconds the fused replica's memory pass may take before it is given up."""


def fused_memory(pipeline: Pipeline, inputs: list[Any]) -> int | None:
    """Bytes one process running every unit in turn holds of its own (its peak RSS over
    its start), as a fused replica does: every unit built in a forked copy of this process,
    then each sample taken through them one item at a time, its outputs dropped; ``None``
    where the copy failed or took more than `FUSED_TIMEOUT_S`.

    The units' own figures do not add up to it: units in one process share its libraries
    and allocator (the OCR demo's two model units measured 112 and 164 MiB each, and a
    process running both held 145 MiB)."""
    found = forked_ints(FUSED_TIMEOUT_S, _fused_peak, pipeline, inputs)
    return found[0] if found else None


def _fused_peak(pipeline: Pipeline, inputs: list[Any]) -> tuple[int] | None:
    """`fused_memory`'s measurement, in this (forked) process."""
    peak = peak_since_start()
    for _ in in_turn(pipeline.units, inputs):
        pass
    return (peak(),)
