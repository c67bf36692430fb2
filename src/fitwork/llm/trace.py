"""LLM request traces: arrivals, prompt and output tokens; Azure loader, rate scaling, summary."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import numpy as np

from fitwork.llm.phases import LLMInputError

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SHIPPED = ("conv", "code")


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival: ``arrival`` seconds from the first, token counts (>= 1)."""

    name: str
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    scale: float = 1.0
    """How many times the source trace's rate this one runs at (`scaled` multiplies it)."""

    def __post_init__(self) -> None:
        if not (len(self.arrival) == len(self.prompt) == len(self.output)):
            raise LLMInputError(f"trace {self.name}: arrival, prompt and output differ in length")
        if len(self.arrival) == 0:
            raise LLMInputError(f"trace {self.name}: no requests")

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def duration(self) -> float:
        """Seconds from the first arrival to the last (at least 1 s)."""
        return max(1.0, float(self.arrival[-1] - self.arrival[0]))

    @property
    def rate(self) -> float:
        """Requests per second over the trace."""
        return len(self) / self.duration

    def scaled(self, factor: float) -> Trace:
        """The same requests arriving ``factor`` times as fast (inter-arrival gaps / factor)."""
        if not factor > 0:
            raise LLMInputError(f"rate factor {factor}: must be > 0")
        return Trace(f"{self.name} x{factor:g}", self.arrival / factor, self.prompt, self.output,
                     self.scale * factor)

    def superposed(self, copies: int, seed: int = 0) -> Trace:
        """``copies`` copies of the trace over the same span, each shifted by a random offset
        (wrapping around): ``copies`` times the rate with the same duration and length mix."""
        if copies < 1:
            raise LLMInputError(f"copies {copies}: must be >= 1")
        rng = np.random.default_rng(seed)
        span = self.duration
        shifts = np.concatenate([[0.0], rng.uniform(0, span, copies - 1)])
        arrival = np.concatenate([(self.arrival + s) % span for s in shifts])
        order = np.argsort(arrival, kind="stable")
        tile = np.tile
        return Trace(f"{self.name} +{copies}", arrival[order] - arrival[order][0],
                     tile(self.prompt, copies)[order], tile(self.output, copies)[order],
                     self.scale * copies)

    def head(self, n: int) -> Trace:
        """The first ``n`` requests."""
        return Trace(self.name, self.arrival[:n], self.prompt[:n], self.output[:n], self.scale)

    def burstiness(self, window: float = 60.0, q: float = 0.99) -> float:
        """The ``q``-quantile, over requests, of the rate in the ``window``-second window each
        arrives in, over the mean rate (1 for a steady rate; the Azure conv trace: 1.53, code:
        4.10).  The planner provisions for this much above the mean."""
        if len(self) < 2 or self.duration <= window:
            return 1.0
        index = ((self.arrival - self.arrival[0]) // window).astype(int)
        seen = np.bincount(index)[index]
        mean = len(self) / (self.duration / window)
        return max(1.0, float(np.quantile(seen, q)) / mean)

    def summary(self) -> dict[str, float]:
        """Count, duration, rate, and the length distributions (mean and quantiles)."""
        out: dict[str, float] = {"requests": float(len(self)), "duration_s": self.duration,
                                 "rate_per_s": self.rate, "burstiness": self.burstiness()}
        for name, values in (("prompt", self.prompt), ("output", self.output)):
            out[f"{name}_mean"] = float(values.mean())
            for q in (50, 90, 99):
                out[f"{name}_p{q}"] = float(np.percentile(values, q))
            out[f"{name}_max"] = float(values.max())
        return out


def load_azure(path: Path | str) -> Trace:
    """An Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    A malformed row raises `LLMInputError` naming ``file:line``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise LLMInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header[:3]) != AZURE_COLUMNS:
        raise LLMInputError(f"{path}:1: header must be {','.join(AZURE_COLUMNS)} (found "
                            f"{','.join(header or [])!r})")
    times, prompts, outputs = [], [], []
    for row in reader:
        if not row:
            continue
        place = f"{path}:{reader.line_num}"
        if len(row) != 3:
            raise LLMInputError(f"{place}: {len(row)} fields, expected 3 "
                                f"({','.join(AZURE_COLUMNS)})")
        try:
            stamp = datetime.fromisoformat(row[0].strip()[:26])
        except ValueError:
            raise LLMInputError(f"{place}: TIMESTAMP {row[0]!r} is not a date and time "
                                "(YYYY-MM-DD HH:MM:SS.ffffff)") from None
        try:
            p, o = int(row[1]), int(row[2])
        except ValueError:
            raise LLMInputError(f"{place}: token counts {row[1]!r}, {row[2]!r} are not "
                                "integers") from None
        if p < 1 or o < 1:
            raise LLMInputError(f"{place}: token counts must be >= 1 (got {p}, {o})")
        times.append(stamp.replace(tzinfo=UTC).timestamp())
        prompts.append(p)
        outputs.append(o)
    if not times:
        raise LLMInputError(f"{path}: no requests after the header")
    t = np.array(times)
    order = np.argsort(t, kind="stable")
    return Trace(Path(path).stem, t[order] - t.min(), np.array(prompts)[order],
                 np.array(outputs)[order])


def shipped_trace(name: str) -> Trace:
    """One of the Azure 2023 traces shipped in ``fitwork/llm/data`` (``conv`` or ``code``)."""
    if name not in SHIPPED:
        raise LLMInputError(f"no shipped trace {name!r}; shipped: {', '.join(SHIPPED)}")
    with resources.as_file(resources.files("fitwork.llm").joinpath("data", f"{name}.csv")) as p:
        trace = load_azure(p)
    return Trace(name, trace.arrival, trace.prompt, trace.output)


def load_trace(ref: str) -> Trace:
    """A shipped trace by name (``conv``, ``code``) or an Azure-format CSV by path."""
    return shipped_trace(ref) if ref in SHIPPED else load_azure(ref)


def poisson_trace(rate: float, n: int, prompt: int, output: int, seed: int = 0) -> Trace:
    """``n`` requests of fixed sizes arriving as a Poisson process of ``rate`` per second."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, n)
    arrival = np.cumsum(gaps) - gaps[0]
    return Trace(f"poisson {rate:g}/s", arrival, np.full(n, prompt), np.full(n, output))
