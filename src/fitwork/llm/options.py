"""What one replica of a phase can carry on one (class, TP) under the SLOs, at a trace's mix."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fitwork.llm.phases import LLMInputError, PhaseModel
from fitwork.llm.queueing import QUANTILE, max_utilization, mg1_wait_quantile
from fitwork.llm.trace import Trace

Phase = Literal["prefill", "decode", "colocated"]
MAX_BATCH = 512
"""Most sequences one replica decodes at once (what serving engines commonly cap it at)."""
FILL = 0.9
"""Share of its full-batch rate a decode (or colocated) replica is planned to carry: batch
occupancy fluctuates under Poisson arrivals, and a full batch makes new requests wait."""
MIX_SAMPLE = 20_000


@dataclass(frozen=True)
class SLO:
    """90th-percentile targets: time to first token and time per output token, seconds."""

    ttft_p90: float
    tpot_p90: float

    @classmethod
    def parse(cls, text: str) -> SLO:
        """``ttft_p90=2s,tpot_p90=100ms`` (units s or ms; a bare number is seconds)."""
        found: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            m = re.fullmatch(r"\s*([0-9.]+(?:e-?[0-9]+)?)\s*(ms|s)?\s*", value)
            if not sep or key.strip() not in ("ttft_p90", "tpot_p90") or m is None:
                raise LLMInputError(f"--slo {text!r}: {part!r} is not KEY=VALUE with KEY "
                                    "ttft_p90 or tpot_p90 and VALUE like 2s or 150ms")
            found[key.strip()] = float(m.group(1)) / (1e3 if m.group(2) == "ms" else 1.0)
        missing = [k for k in ("ttft_p90", "tpot_p90") if k not in found]
        if missing:
            raise LLMInputError(f"--slo {text!r}: give {' and '.join(missing)}, e.g. "
                                "ttft_p90=2s,tpot_p90=150ms")
        if min(found.values()) <= 0:
            raise LLMInputError(f"--slo {text!r}: targets must be > 0")
        return cls(found["ttft_p90"], found["tpot_p90"])

    def text(self) -> str:
        """The SLO as ``--slo`` takes it."""
        return f"ttft_p90={self.ttft_p90 * 1e3:g}ms,tpot_p90={self.tpot_p90 * 1e3:g}ms"


@dataclass(frozen=True)
class Mix:
    """A trace's length mix, as the planner reads it (every k-th request past ``MIX_SAMPLE``)."""

    prompt: np.ndarray
    output: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> Mix:
        step = max(1, math.ceil(len(trace) / MIX_SAMPLE))
        return cls(trace.prompt[::step].astype(float), trace.output[::step].astype(float))

    @property
    def mean_prompt(self) -> float:
        return float(self.prompt.mean())

    @property
    def mean_output(self) -> float:
        return float(self.output.mean())

    @property
    def reserve_tokens(self) -> float:
        """KV tokens a decoding sequence holds, averaged over decode time (prompt + output
        reserved at admission, held for ``output`` steps)."""
        return float((self.output * (self.prompt + self.output)).sum() / self.output.sum())

    @property
    def mean_context(self) -> float:
        """Context of a sequence in a decode step, averaged over every step of every request."""
        return float((self.output * (self.prompt + (self.output - 1) / 2)).sum()
                     / self.output.sum())


@dataclass(frozen=True)
class Option:
    """One replica of ``phase`` on ``model.device_class`` at ``model.tp``: its planned rate
    (requests/s), largest batch, and what limits it (``rate`` 0: cannot meet the SLO)."""

    phase: Phase
    model: PhaseModel
    rate: float
    max_batch: int
    limit: str
    best_ttft: float
    best_tpot: float
    transfer_s: float = 0.0


def transfer_seconds(model: PhaseModel, prompt: np.ndarray, network: float | None) -> np.ndarray:
    """Seconds to send each prompt's KV cache over a link of ``network`` bytes/s (0: none)."""
    if not network:
        return np.zeros_like(prompt)
    return prompt * model.shape.kv_bytes_per_token / network


def prefill_option(model: PhaseModel, mix: Mix, slo: SLO, servers: int = 1) -> Option:
    """Prompts one at a time from one FCFS queue over ``servers`` replicas: the highest
    utilization whose M/G/c TTFT p90 meets the SLO."""
    service = model.prefill_s(mix.prompt, 1.0)
    best = float(np.quantile(service, QUANTILE))
    rho = max_utilization(service, slo.ttft_p90, servers=servers)
    if rho <= 0:
        return Option("prefill", model, 0.0, 1, f"TTFT SLO: prefill alone takes {best:.3g}s at "
                      f"p90 > {slo.ttft_p90:g}s", best, math.inf)
    return Option("prefill", model, rho / float(service.mean()), 1,
                  f"TTFT SLO holds each replica to {rho:.0%} busy (M/G/{servers} p90 wait)",
                  best,
                  math.inf)


def _kv_bound(model: PhaseModel, mix: Mix) -> tuple[int, str]:
    tokens = model.kv_tokens()
    if tokens <= 0:
        return 0, (f"weights {model.weight_bytes / 2**30:.0f} GiB exceed {model.tp} x "
                   f"{model.device.memory_bytes / 2**30:.0f} GiB")
    return min(MAX_BATCH, int(tokens // mix.reserve_tokens)), f"KV memory ({tokens:,} tokens)"


def decode_option(model: PhaseModel, mix: Mix, slo: SLO, network: float | None) -> Option:
    """Continuous batching of up to B sequences: the largest B whose KV fits and whose TPOT
    p90 (step at B, plus each request's KV transfer spread over its output) meets the SLO."""
    kv_batch, kv_why = _kv_bound(model, mix)
    xfer = transfer_seconds(model, mix.prompt, network)
    many = mix.output > 1
    spread = float(np.quantile(xfer[many] / (mix.output[many] - 1), QUANTILE)) if many.any() \
        else 0.0
    best_tpot = float(model.decode_s(1, mix.mean_context)) + spread
    if kv_batch < 1:
        return Option("decode", model, 0.0, 0, f"no room for KV: {kv_why}", math.inf, best_tpot)
    batches = np.arange(1, kv_batch + 1, dtype=float)
    step = model.decode_s(batches, mix.mean_context)
    ok = np.flatnonzero(step + spread <= slo.tpot_p90)
    if len(ok) == 0:
        return Option("decode", model, 0.0, 0, f"TPOT SLO: one sequence alone takes "
                      f"{best_tpot * 1e3:.3g}ms > {slo.tpot_p90 * 1e3:g}ms", math.inf, best_tpot)
    b = int(ok[-1]) + 1
    if b == kv_batch:
        why = f"batch {b} bounded by {kv_why}" if kv_batch < MAX_BATCH else \
            f"batch {b}, the cap"
    else:
        why = f"batch {b} bounded by the TPOT SLO (KV room for {kv_batch})"
    rate = FILL * b / (float(step[b - 1]) * mix.mean_output)
    return Option("decode", model, rate, b, why, math.inf, best_tpot, float(np.mean(xfer)))


STALL_SAMPLE = 2000


def colocated_tpot(step: np.ndarray, lam: np.ndarray, p_mean: float, output: np.ndarray,
                   q: float = QUANTILE) -> np.ndarray:
    """The ``q``-quantile over requests of TPOT on a colocated replica, per (step, lambda).

    A request decoding ``o - 1`` tokens lasts about (o - 1) step / (1 - rho); the prefills
    that pause it in that time are Poisson at lambda, each E[P] long; its TPOT is step plus
    their time over o - 1.  Drawn (seed 0) for up to ``STALL_SAMPLE`` requests of the mix.
    """
    many = output[output > 1][:STALL_SAMPLE]
    if len(many) == 0:
        return step.copy()
    rho = np.minimum(lam * p_mean, 0.999)
    span = (many[None, :] - 1) * (step / (1 - rho))[:, None]
    stalls = np.random.default_rng(0).poisson(lam[:, None] * span)
    tpot = step[:, None] + stalls * p_mean / (many[None, :] - 1)
    return np.quantile(tpot, q, axis=1)


def colocated_option(model: PhaseModel, mix: Mix, slo: SLO) -> Option:
    """Each replica runs both phases, a prefill pausing the decode batch (prefill first).

    At N sequences in the batch a replica carries lambda = N / (E[o] step(N) + N E[P])
    requests/s; its share of time in prefill is rho = lambda E[P]; TPOT p90 from the
    prefills that pause each request (`colocated_tpot`); TTFT p90 = P p90 + M/G/1 wait at
    rho + one decode step.  The N with the highest lambda
    that meets both SLOs is chosen.
    """
    kv_batch, kv_why = _kv_bound(model, mix)
    service = model.prefill_s(mix.prompt, 1.0)
    p_mean, p_q = float(service.mean()), float(np.quantile(service, QUANTILE))
    second = float((service ** 2).mean())
    best_tpot = float(model.decode_s(1, mix.mean_context))
    if kv_batch < 1:
        return Option("colocated", model, 0.0, 0, f"no room for KV: {kv_why}", p_q, best_tpot)
    batches = np.arange(1, kv_batch + 1, dtype=float)
    step = model.decode_s(batches, mix.mean_context)
    lam = batches / (mix.mean_output * step + batches * p_mean)
    rho = lam * p_mean
    tpot = colocated_tpot(step, lam, p_mean, mix.output)
    ttft = np.array([p_q + mg1_wait_quantile(float(r), p_mean, second) + float(s)
                     for r, s in zip(rho, step, strict=True)])
    ok = np.flatnonzero((tpot <= slo.tpot_p90) & (ttft <= slo.ttft_p90))
    if len(ok) == 0:
        return Option("colocated", model, 0.0, 0,
                      f"SLO: best TTFT p90 {p_q:.3g}s, TPOT {best_tpot * 1e3:.3g}ms alone",
                      p_q, best_tpot)
    i = int(ok[np.argmax(lam[ok])])
    b = i + 1
    bound = "TPOT" if tpot[min(i + 1, kv_batch - 1)] > slo.tpot_p90 else \
        "TTFT" if ttft[min(i + 1, kv_batch - 1)] > slo.ttft_p90 else kv_why
    why = (f"batch {b} ({rho[i]:.0%} of the time in prefill) bounded by "
           f"{bound if b < kv_batch else kv_why}")
    return Option("colocated", model, FILL * float(lam[i]), b, why, p_q, best_tpot)
