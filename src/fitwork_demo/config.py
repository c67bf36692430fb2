"""What a demo run is asked to do, and the defaults (light: the CLI imports it at start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

ACCURACY_THRESHOLD = 0.8
"""Share of known lines each run must recognise exactly."""
DEFAULT_IMAGES = 24
"""Pages each trial reads (every trial at a latency reads the same ones)."""
DEFAULT_LATENCIES_MS = (30.0, 150.0)
"""Per request: a near store, and the 100-200 ms first-byte latency AWS quotes for small S3
objects."""
DEFAULT_REPEATS = 3
"""Trials of every layout at each latency: a median and a spread, so a comparison whose
trials cannot be told apart says "too noisy to call" (see `fitwork_demo.verdict`)."""
DEFAULT_IO_THREADS = (4, 8)
DEFAULT_HAND: tuple[tuple[int, int, int | None], ...] = (
    (1, 1, None), (1, 2, None), (1, 2, 1), (2, 2, 1))
"""(detect, recognise, recognition batch) of the hand layouts (batch ``None``: the unit's
declared one); fetch and store get one replica each."""
DEFAULT_CAP_S = 20.0
DEFAULT_SAMPLES = 8
PRECISION: Final = "fp32"
"""The models run in FP32 (ONNX FP32 weights), so MFU is against FP32 peaks."""
AIM_MONOLITH = 1.25
"""Fitted items/s over the best monolithic layout's that the demo aims for."""
AIM_HAND = 1.0
"""Fitted items/s over the best hand layout's that the demo aims for."""


@dataclass(frozen=True)
class DemoConfig:
    """What to run.

    ``images`` pages per trial; ``latencies_ms`` the store latencies swept; ``repeats``
    trials of every layout at each latency, in alternating order; ``max_processes`` the
    most monolith processes swept (``None``: four per core, or the plan's monolithic
    replicas if more); ``io_threads`` the threads per process of the threaded monolith (one
    process per core); ``hand`` the (detect replicas, recognise replicas, recognition batch
    size or ``None`` for the declared one) of the hand layouts;
    ``cap_s`` the seconds after which a trial stops feeding pages; ``samples`` pages the
    profiler measures each unit on.
    """

    images: int = DEFAULT_IMAGES
    latencies_ms: tuple[float, ...] = DEFAULT_LATENCIES_MS
    repeats: int = DEFAULT_REPEATS
    max_processes: int | None = None
    io_threads: tuple[int, ...] = DEFAULT_IO_THREADS
    hand: tuple[tuple[int, int, int | None], ...] = DEFAULT_HAND
    cap_s: float = DEFAULT_CAP_S
    out: Path = Path("out/demo")
    seed: int = 0
    samples: int = DEFAULT_SAMPLES

    def __post_init__(self) -> None:
        if self.images < 1:
            raise ValueError(f"images={self.images}: run at least one page")
        if not self.latencies_ms or any(v < 0 for v in self.latencies_ms):
            raise ValueError(f"latencies_ms={self.latencies_ms}: give one or more, each >= 0")
        if len(set(self.latencies_ms)) != len(self.latencies_ms):
            raise ValueError(f"latencies_ms={self.latencies_ms}: each latency once")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats}: run every layout at least once")
        if self.max_processes is not None and self.max_processes < 1:
            raise ValueError(f"max_processes={self.max_processes}: sweep at least one process")
        if any(n < 1 for n in self.io_threads):
            raise ValueError(f"io_threads={self.io_threads}: each must be >= 1")
        if any(d < 1 or r < 1 or (b is not None and b < 1) for d, r, b in self.hand):
            raise ValueError(f"hand={self.hand}: every unit needs a replica, a batch >= 1")
        if self.cap_s <= 0:
            raise ValueError(f"cap_s={self.cap_s}: must be > 0 seconds")
        if self.samples < 1:
            raise ValueError(f"samples={self.samples}: profile on at least one page")
