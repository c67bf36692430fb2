"""What a demo run is asked to do, and the defaults (light: the CLI imports it at start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ACCURACY_THRESHOLD = 0.8
"""Share of known lines each run must recognise exactly."""
DEFAULT_IMAGES = 240
DEFAULT_LATENCY_MS = 150.0
"""Per request: within the 100-200 ms first-byte latency AWS quotes for small S3 objects."""
DEFAULT_SAMPLES = 12
PRECISION = "fp32"
"""The models run in FP32 (ONNX FP32 weights), so MFU is against FP32 peaks."""


@dataclass(frozen=True)
class DemoConfig:
    """What to run: pages, store latency, monolithic processes, where files go, the seed."""

    images: int = DEFAULT_IMAGES
    latency_ms: float = DEFAULT_LATENCY_MS
    workers: int | None = None
    out: Path = Path("out/demo")
    seed: int = 0
    samples: int = DEFAULT_SAMPLES

    def __post_init__(self) -> None:
        if self.images < 1:
            raise ValueError(f"images={self.images}: run at least one page")
        if self.latency_ms < 0:
            raise ValueError(f"latency_ms={self.latency_ms}: must be >= 0")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers={self.workers}: run at least one process")
        if self.samples < 1:
            raise ValueError(f"samples={self.samples}: profile on at least one page")
