"""Calibration of the cost model on measured pairs: class efficiencies and transfer errors.

Two public data sets ship in ``fitwork/fit/data/`` (see the README and licenses there):

- splitwise ``perf_model.csv`` (Mutinifni/splitwise-sim @ 8f99e7d, MIT): prefill time and
  mean per-token decode time of llama2-70b (tensor parallel 2, 4, 8) and bloom-176b (TP 8) on
  A100-80GB and H100-80GB (the DGX H100's SXM part: ``H100-SXM``), 19 settings per
  model and TP, five repeats each (their median is used).  The power-capped H100 rows
  (``h100-80gb-pcap``, cap not stated) are left out: no catalog class matches them.
- Gavel's single-job throughputs (stanford-futuredata/gavel @ c4fa400, MIT): 26 training
  jobs on K80, P100, V100 at scale 1.

What one LLM step moves, per GPU (divided by the tensor-parallel degree), in fp16::

    prefill (b prompts of p tokens):  F = 2 N b p      B = 2 N + kv b p
    decode  (one token for b seqs):   F = 2 N b        B = 2 N + kv b (p + n/2)

N parameters, kv = layers x 2 (K and V) x KV heads x head dim x 2 bytes per token of
context, n output tokens (the decode time is a mean over them, so the mean context is used).
Attention FLOPs are left out.

Efficiency (achieved / roofline) per class and bound: the median, over steps whose datasheet
roofline has that bound on that class, of roofline time / measured time.  A class with no
calibration takes the pooled median over all calibrated steps of that bound.  On Gavel (no
FLOPs or bytes known, FP32 training) only a per-class factor relative to V100 can be
calibrated: the median of (rate / FP32 peak) over (V100 rate / V100 FP32 peak).

Errors are of the RATE (items/s, what the plan uses): |predicted - measured| / measured,
with a p10-p90 range of measured / predicted built to hold on data it was not fitted on
(`heldout_range`: the spread within each held-out group and the spread between groups, added
in quadrature; ``bench/coverage.py`` checks it by cross-validation).  Calibrating on the rows
one tests on is circular, so the errors every estimate carries are HELD OUT: splitwise
leave-one-group-out (each of llama2-70b TP2, TP4, TP8 and bloom-176b TP8 predicted with
efficiencies calibrated on the other three), Gavel leave-one-job-out.  In-sample figures are
computed for the report only.

Classes of other vendors (AMD, Intel, ...) have no LLM step measured with FLOPs and bytes.
MLPerf closed results (``mlperf_vendor_rows.csv``, `fitwork.fit.vendors`) give each vendor an
ATTAINMENT per bound: the median, over its rows, of efficiency (rate per device over
bandwidth, or over FP16 peak) relative to NVIDIA's on the same benchmark; and a p10-p90 range
from leave-one-submission-out, wide where submissions or benchmarks are few.  A class of such
a vendor takes NVIDIA's pooled efficiency times that attainment, and its transfer range is
NVIDIA's held-out range combined with the vendor's.  A class without rows of its own takes
its vendor's attainment, its range widened by the cross-vendor spread ("not calibrated for
this class"); a vendor without rows for the bound takes the other vendors' median attainment
with a range spanning that spread ("not calibrated for this vendor").

The held-out statistics (`Residual`, `heldout_range`, `summarize`) live in
`fitwork.fit.heldout`, the MLPerf vendor factors in `fitwork.fit.vendors`.
"""

from __future__ import annotations

import functools
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel

from fitwork.fit.heldout import (
    Residual,
    TransferError,
    data_rows,
    summarize,
)
from fitwork.fit.roofline import (
    Bound,
    Precision,
    TransferKind,
    roofline_seconds,
)
from fitwork.fit.vendors import (
    REFERENCE_VENDOR,
    UNCALIBRATED_CLASS,
    VendorFit,
    attainment_spread,
    combined,
    mlperf_rows,
    vendor_fit,
)
from fitwork.hardware.catalog import Catalog, catalog

Phase = Literal["prefill", "decode"]
PHASES: tuple[Phase, ...] = ("prefill", "decode")
SPLITWISE_FILE = "splitwise_perf_model.csv"
GAVEL_FILE = "gavel_throughputs_alone.csv"
SPLITWISE_SOURCE = "splitwise perf_model.csv (Mutinifni/splitwise-sim @ 8f99e7d)"
GAVEL_SOURCE = "Gavel single-job throughputs (stanford-futuredata/gavel @ c4fa400)"
SPLITWISE_CLASSES = {"a100-80gb": "A100-80GB", "h100-80gb": "H100-SXM"}
GAVEL_CLASSES = {"k80": "K80", "p100": "P100", "v100": "V100"}
GAVEL_REFERENCE = "V100"


@dataclass(frozen=True)
class ModelShape:
    """What a decoder-only LLM moves per token: parameters and KV cache."""

    params: float
    layers: int
    kv_heads: int
    head_dim: int

    @property
    def kv_bytes_per_token(self) -> float:
        """fp16 K and V of every layer for one token of context."""
        return self.layers * 2 * self.kv_heads * self.head_dim * 2


MODELS = {
    # llama2-70b: 70B parameters (the model's published size; Touvron et al., "Llama 2",
    # arXiv:2307.09288), grouped-query attention with 8 KV heads; meta-llama/Llama-2-70b-hf
    # config.json: num_hidden_layers 80, num_key_value_heads 8, hidden_size 8192 over
    # num_attention_heads 64 = head dim 128.
    "llama2-70b": ModelShape(params=70e9, layers=80, kv_heads=8, head_dim=128),
    # bloom-176b: 176B parameters (BigScience, "BLOOM", arXiv:2211.05100), multi-head
    # attention (every head keeps its own K and V); bigscience/bloom config.json: n_layer 70,
    # n_head 112, hidden_size 14336 = 112 heads x 128.
    "bloom-176b": ModelShape(params=176e9, layers=70, kv_heads=112, head_dim=128),
}


@dataclass(frozen=True)
class LLMSetting:
    """One splitwise setting: a model, its TP degree and load, timed on each class."""

    model: str
    tp: int
    prompt: int
    batch: int
    tokens: int
    seconds: dict[str, dict[Phase, float]]

    @property
    def group(self) -> str:
        """The model and TP degree: the unit held out together."""
        return f"{self.model} TP{self.tp}"

    def work(self, phase: Phase) -> tuple[float, float]:
        """FLOPs and device bytes of one step of ``phase`` on one of the TP GPUs."""
        shape = MODELS[self.model]
        weights = 2 * shape.params
        if phase == "prefill":
            tokens = self.batch * self.prompt
            flops, nbytes = 2 * shape.params * tokens, weights + shape.kv_bytes_per_token * tokens
        else:
            context = self.batch * (self.prompt + self.tokens / 2)
            flops = 2 * shape.params * self.batch
            nbytes = weights + shape.kv_bytes_per_token * context
        return flops / self.tp, nbytes / self.tp


class Efficiency(BaseModel):
    """Achieved / roofline of one class for one bound, and where the figure comes from."""

    device_class: str
    bound: Bound
    value: float
    n: int
    source: str


def splitwise_settings() -> list[LLMSetting]:
    """The splitwise settings timed on both A100-80GB and H100-SXM (median of repeats)."""
    runs: dict[tuple[str, int, int, int, int], dict[str, dict[Phase, list[float]]]] = {}
    for row in data_rows(SPLITWISE_FILE):
        name = SPLITWISE_CLASSES.get(row["hardware"])
        if name is None:
            continue
        key = (row["model"], int(row["tensor_parallel"]), int(row["prompt_size"]),
               int(row["batch_size"]), int(row["token_size"]))
        phases = runs.setdefault(key, {}).setdefault(name, {"prefill": [], "decode": []})
        phases["prefill"].append(float(row["prompt_time"]) / 1e3)
        phases["decode"].append(float(row["token_time"]) / 1e3)
    return [LLMSetting(*key, seconds={name: {p: statistics.median(v) for p, v in ph.items()}
                                      for name, ph in timed.items()})
            for key, timed in sorted(runs.items()) if len(timed) == len(SPLITWISE_CLASSES)]


def splitwise_efficiencies(settings: Iterable[LLMSetting], known: Catalog
                           ) -> dict[tuple[str, Bound], Efficiency]:
    """Median achieved / datasheet roofline per class and bound over ``settings``."""
    achieved: dict[tuple[str, Bound], list[float]] = defaultdict(list)
    groups: set[str] = set()
    for s in settings:
        groups.add(s.group)
        for phase in PHASES:
            flops, nbytes = s.work(phase)
            for name, timed in s.seconds.items():
                device = known.get(name)
                roof, bound = roofline_seconds(flops, nbytes, device, "fp16")
                achieved[name, bound].append(roof / timed[phase])
    where = f"{SPLITWISE_SOURCE}: {', '.join(sorted(groups))}"
    return {key: Efficiency(device_class=key[0], bound=key[1], value=statistics.median(v),
                            n=len(v), source=f"median achieved/roofline of {len(v)} "
                            f"{key[1]}-bound LLM steps, {where}")
            for key, v in sorted(achieved.items())}


def pooled(efficiencies: dict[tuple[str, Bound], Efficiency], settings: Iterable[LLMSetting],
           known: Catalog) -> dict[Bound, float]:
    """The median achieved / roofline over every calibrated step of each bound."""
    values: dict[Bound, list[float]] = defaultdict(list)
    for s in settings:
        for phase in PHASES:
            flops, nbytes = s.work(phase)
            for name, timed in s.seconds.items():
                roof, bound = roofline_seconds(flops, nbytes, known.get(name), "fp16")
                values[bound].append(roof / timed[phase])
    return {bound: statistics.median(v) for bound, v in values.items()}


class _Efficiencies:
    """Absolute efficiencies with the pooled fallback, as the cost model reads them.

    ``vendor`` gives a class's vendor fit for a bound (`Calibration.vendor_fit`, ``None`` for
    NVIDIA): a class of another vendor takes the pooled figure times its attainment.
    """

    def __init__(self, table: dict[tuple[str, Bound], Efficiency],
                 fallback: dict[Bound, float],
                 vendor: Callable[[str, Bound], VendorFit | None] | None = None) -> None:
        self.table, self.fallback, self.vendor = table, fallback, vendor

    def of(self, name: str) -> tuple[tuple[float, float], str]:
        values, why = [], []
        bounds: tuple[Bound, ...] = ("compute", "memory")
        for bound in bounds:
            found = self.table.get((name, bound))
            if found is not None:
                values.append(found.value)
                why.append(f"{name} {bound} efficiency {found.value:.2f} = {found.source}")
                continue
            value = self.fallback[bound]
            classes = sorted({k[0] for k in self.table})
            fit = self.vendor(name, bound) if self.vendor else None
            if fit is not None:
                values.append(value * fit.value)
                why.append(f"{name} {bound} efficiency: pooled median {value:.2f} of "
                           f"{', '.join(classes)} x {fit.basis} = {value * fit.value:.2f}")
            else:
                values.append(value)
                why.append(f"{name} {bound} efficiency not calibrated: pooled median "
                           f"{value:.2f} of {', '.join(classes)} used")
        return (values[0], values[1]), "; ".join(why)


def splitwise_residuals(train: Sequence[LLMSetting], test: Sequence[LLMSetting],
                        known: Catalog, *, check: str = "transfer",
                        calibrated: bool = True) -> list[Residual]:
    """Each test step predicted on each class: from the other class's time (``transfer``),
    from the roofline alone (``flops``), or by the FP16 peak ratio (``peak-ratio``).

    Efficiencies come from ``train`` (all 1 when not ``calibrated``).
    """
    table = splitwise_efficiencies(train, known) if calibrated else {}
    eff = _Efficiencies(table, pooled(table, train, known) if calibrated
                        else {"compute": 1.0, "memory": 1.0})
    out = []
    for s in test:
        for phase in PHASES:
            flops, nbytes = s.work(phase)
            for target, timed in s.seconds.items():
                dst = known.get(target)
                r_dst, bound = roofline_seconds(flops, nbytes, dst, "fp16", eff.of(target)[0])
                if check == "flops":
                    out.append(Residual(f"{phase} flops", target, target, bound, s.group,
                                        1 / r_dst, 1 / timed[phase]))
                    continue
                for source, other in s.seconds.items():
                    if source == target:
                        continue
                    src = known.get(source)
                    if check == "peak-ratio":
                        ratio = src.fp16_flops / dst.fp16_flops
                    else:
                        ratio = r_dst / roofline_seconds(flops, nbytes, src, "fp16",
                                                         eff.of(source)[0])[0]
                    out.append(Residual(f"{phase} transfer", source, target, bound, s.group,
                                        1 / (other[phase] * ratio), 1 / timed[phase]))
    return out


def leave_group_out(settings: Sequence[LLMSetting], known: Catalog,
                    check: str = "transfer") -> list[Residual]:
    """Every group predicted with efficiencies calibrated on the other groups only."""
    out = []
    for group in sorted({s.group for s in settings}):
        train = [s for s in settings if s.group != group]
        test = [s for s in settings if s.group == group]
        out.extend(splitwise_residuals(train, test, known, check=check))
    return out


def gavel_jobs(scale: int = 1) -> list[dict[str, float | str]]:
    """Gavel's jobs at ``scale``: name and steps/s per catalog class (0 = cannot run)."""
    return [{"job": row["job"], **{GAVEL_CLASSES[g]: float(row[g]) for g in GAVEL_CLASSES}}
            for row in data_rows(GAVEL_FILE) if int(row["scale"]) == scale]


def gavel_factors(jobs: Sequence[dict[str, float | str]], known: Catalog) -> dict[str, Efficiency]:
    """Per class: median of (rate / FP32 peak) over (V100 rate / V100 FP32 peak)."""
    ref = known.get(GAVEL_REFERENCE)
    out = {}
    for name in GAVEL_CLASSES.values():
        device = known.get(name)
        values = [(float(j[name]) / (device.fp32_flops or 1.0))
                  / (float(j[GAVEL_REFERENCE]) / (ref.fp32_flops or 1.0))
                  for j in jobs if float(j[name]) > 0 and float(j[GAVEL_REFERENCE]) > 0]
        out[name] = Efficiency(
            device_class=name, bound="compute", value=statistics.median(values), n=len(values),
            source=f"median (rate / FP32 peak) relative to {GAVEL_REFERENCE} over {len(values)} "
                   f"jobs, {GAVEL_SOURCE}")
    return out


def gavel_residuals(train: Sequence[dict[str, float | str]],
                    test: Sequence[dict[str, float | str]], known: Catalog, *,
                    calibrated: bool = True, bound: Bound = "compute") -> list[Residual]:
    """Each test job carried between every pair of classes by the FP32 roofline ratio."""
    factors = gavel_factors(train, known) if calibrated else {}
    out = []
    for job in test:
        for source in GAVEL_CLASSES.values():
            for target in GAVEL_CLASSES.values():
                have, want = float(job[source]), float(job[target])
                if source == target or have <= 0 or want <= 0:
                    continue
                src, dst = known.get(source), known.get(target)
                if bound == "compute":
                    ratio = (dst.fp32_flops or 1.0) / (src.fp32_flops or 1.0)
                else:
                    ratio = (dst.memory_bandwidth or 1.0) / (src.memory_bandwidth or 1.0)
                if factors:
                    ratio *= factors[target].value / factors[source].value
                out.append(Residual("gavel", source, target, bound, str(job["job"]),
                                    have * ratio, want))
    return out


def gavel_leave_one_out(jobs: Sequence[dict[str, float | str]],
                        known: Catalog) -> list[Residual]:
    """Every job carried with factors calibrated on the other jobs only."""
    out = []
    for i, job in enumerate(jobs):
        out.extend(gavel_residuals([*jobs[:i], *jobs[i + 1:]], [job], known))
    return out


def _pick(residuals: Iterable[Residual], keep: Callable[[Residual], bool]) -> list[Residual]:
    return [r for r in residuals if keep(r)]


class Calibration:
    """Efficiencies and held-out transfer errors, computed once from the shipped data."""

    def __init__(self, known: Catalog) -> None:
        self.known = known
        self.settings = splitwise_settings()
        self.efficiencies = splitwise_efficiencies(self.settings, known)
        self.vendor_rows = mlperf_rows(known)
        self.vendor_spread = attainment_spread(self.vendor_rows, known)
        self._fits: dict[tuple[str, Bound], VendorFit | None] = {}
        self._eff = _Efficiencies(self.efficiencies, pooled(self.efficiencies, self.settings,
                                                            known), self.vendor_fit)
        self.jobs = gavel_jobs()
        self.factors = gavel_factors(self.jobs, known)
        self.llm_heldout = leave_group_out(self.settings, known)
        self.flops_heldout = leave_group_out(self.settings, known, check="flops")
        self.gavel_heldout = gavel_leave_one_out(self.jobs, known)
        self.gavel_uncalibrated = gavel_residuals(self.jobs, self.jobs, known, calibrated=False)
        self.llm_pairs = {(a, b) for a in SPLITWISE_CLASSES.values()
                          for b in SPLITWISE_CLASSES.values() if a != b}

    def vendor_of(self, name: str) -> str:
        """The first word of class ``name``'s vendor (``AMD``, ``Intel``, ``NVIDIA``)."""
        return self.known.get(name).vendor.split(" ")[0] if name in self.known else ""

    def vendor_fit(self, name: str, bound: Bound) -> VendorFit | None:
        """Class ``name``'s vendor attainment for ``bound`` (``None``: NVIDIA, a CPU or an
        unknown class); a class the vendor's rows never measured has its range widened by the
        cross-vendor spread and says "not calibrated for this class"."""
        if (name, bound) not in self._fits:
            self._fits[name, bound] = self._fit(name, bound)
        return self._fits[name, bound]

    def _fit(self, name: str, bound: Bound) -> VendorFit | None:
        if name not in self.known or self.known.get(name).kind == "cpu" \
                or self.vendor_of(name) == REFERENCE_VENDOR:
            return None
        fit = vendor_fit(self.vendor_rows, self.vendor_of(name), bound, self.known)
        if not fit.calibrated or name in fit.classes:
            return fit
        half = float(np.exp(self.vendor_spread / 2))
        low, high = combined(fit.low, fit.high, 1 / half, half)
        return VendorFit(fit.vendor, bound, fit.value, low, high, fit.n, fit.groups, fit.classes,
                         f"{UNCALIBRATED_CLASS} ({name}): {fit.basis}; widened by the "
                         f"cross-vendor spread x{np.exp(self.vendor_spread):.2f}")

    def uncalibrated_vendor(self, *names: str) -> str | None:
        """The vendor of the first of ``names`` that is an accelerator of another vendor than
        NVIDIA (``None``: all NVIDIA or CPUs)."""
        for name in names:
            if name in self.known and self.known.get(name).kind != "cpu" \
                    and self.vendor_of(name) != REFERENCE_VENDOR:
                return self.vendor_of(name)
        return None

    def device_efficiency(self, name: str) -> tuple[tuple[float, float], str]:
        """(compute, memory) achieved / roofline of class ``name``, and where they come from."""
        return self._eff.of(name)

    def generation_factor(self, source: str, target: str,
                          precision: Precision) -> tuple[float, str]:
        """The rate factor target / source of a compute-assumed transfer: Gavel's at FP32
        between K80, P100 and V100; else the vendors' compute attainments (1 for NVIDIA)."""
        if precision == "fp32" and source in self.factors and target in self.factors:
            a, b = self.factors[source], self.factors[target]
            return b.value / a.value, (f"Gavel factor {b.value:.3g} ({target}) / {a.value:.3g} "
                                       f"({source}): {b.source}")
        fits = {n: self.vendor_fit(n, "compute") for n in (source, target)}
        if all(f is None for f in fits.values()):
            return 1.0, (f"no calibrated factor for {source} -> {target} at {precision} (Gavel "
                         "calibrates K80, P100, V100 at FP32 only): datasheet ratio")
        value = {n: 1.0 if f is None else f.value for n, f in fits.items()}
        said = "; ".join(f"{n}: {f.basis}" for n, f in fits.items() if f is not None)
        return value[target] / value[source], f"compute attainment {said}"

    @functools.cache  # noqa: B019 - one instance per process, kept for its lifetime
    def error(self, kind: TransferKind, source: str, target: str, bound: Bound | None,
              precision: Precision) -> TransferError:
        """The held-out error of a transfer of ``kind`` from ``source`` to ``target``; where
        either class is of another vendor than NVIDIA, combined with that vendor's attainment
        range for the bound (`vendor_fit`), its basis saying which, or "not calibrated"."""
        error = self._error(kind, source, target, bound, precision)
        if kind == "cpu":
            return error
        fits = [f for f in (self.vendor_fit(name, bound or "compute") for name in (target, source))
                if f is not None]
        if not fits:
            return error
        low, high = error.low, error.high
        for fit in fits:
            low, high = combined(low, high, fit.low, fit.high)
        return error.model_copy(update={
            "low": low, "high": high, "p90": max(error.p90, 1 - low, high - 1),
            "basis": f"{'; '.join(f.basis for f in fits)} on top of {error.basis}"})

    def _error(self, kind: TransferKind, source: str, target: str, bound: Bound | None,
               precision: Precision) -> TransferError:
        if kind == "bytes":
            steps = _pick(self.llm_heldout, lambda r: r.bound == bound)
            if (source, target) in self.llm_pairs:
                steps = _pick(steps, lambda r: (r.source, r.target) == (source, target))
                where = f"{source} -> {target}"
            else:
                where = (f"pooled over A100-80GB <-> H100-SXM ({source} -> {target} not "
                         "checked)")
            return summarize(steps, f"{bound}-bound LLM steps on the target, {where}, "
                                    f"held out by model/TP group; {SPLITWISE_SOURCE}")
        if kind == "flops":
            steps = _pick(self.flops_heldout, lambda r: r.bound == bound)
            return summarize(steps, f"roofline time alone vs measured, {bound}-bound LLM "
                                    f"steps on A100-80GB and H100-SXM, held out by model/TP "
                                    f"group; {SPLITWISE_SOURCE}")
        if kind == "assumed" and precision == "fp32" and source in self.factors \
                and target in self.factors:
            jobs = _pick(self.gavel_heldout, lambda r: (r.source, r.target) == (source, target))
            return summarize(jobs, f"{source} -> {target}, FP32 ratio with calibrated factors, "
                                   f"leave-one-job-out; {GAVEL_SOURCE}")
        stand_in = ("no CPU transfer data" if kind == "cpu" else
                    f"{source} -> {target} at {precision} not checked")
        return summarize(self.gavel_uncalibrated,
                         f"{stand_in}: Gavel's uncalibrated FP32-ratio transfers between K80, "
                         f"P100 and V100, all directions, stand in; {GAVEL_SOURCE}")


@functools.cache
def calibration() -> Calibration:
    """The calibration of the shipped catalog, computed once per process."""
    return Calibration(catalog())


class CheckRow(BaseModel):
    """One line of the transfer-error table: a check, a split, a kind of transfer."""

    data: Literal["splitwise", "gavel"]
    split: str
    kind: str
    n: int
    median: float
    p90: float
    worst: float
    bias: float


def _row(data: Literal["splitwise", "gavel"], split: str, kind: str,
         residuals: Sequence[Residual]) -> CheckRow:
    summary = summarize(residuals, kind)
    bias = float(np.median([r.predicted / r.actual for r in residuals]))
    return CheckRow(data=data, split=split, kind=kind, n=summary.n, median=summary.median,
                    p90=summary.p90, worst=summary.worst, bias=bias)


SPLITS = {
    "held-out": "held out: each model/TP group predicted with efficiencies from the others",
    "bloom": "held out: calibrated on llama2-70b only, tested on bloom-176b",
    "in-sample": "in-sample: calibrated on all rows it is tested on (circular)",
    "datasheet": "datasheet roofline with device bytes, no efficiency (e = 1)",
    "before": "before this change: compute-bound assumed, FP16 peak ratio",
    "flops": "roofline time alone (no measurement to carry), held out by group",
    "gavel-held-out": "FP32 ratio with per-class factors, leave-one-job-out",
    "gavel-in-sample": "FP32 ratio with per-class factors from all jobs (circular)",
    "gavel-compute": "FP32 peak ratio, uncalibrated",
    "gavel-memory": "bandwidth ratio, uncalibrated",
}


def transfer_table(known: Catalog | None = None) -> list[CheckRow]:
    """The transfer check: splitwise per phase and direction, Gavel per direction.

    ``bias`` is the median predicted / measured rate (1.67 would be "predictions come out
    1.67x the measured rate").
    """
    known = known or catalog()
    settings = splitwise_settings()
    llama = [s for s in settings if s.model == "llama2-70b"]
    bloom = [s for s in settings if s.model == "bloom-176b"]
    runs = {
        "held-out": leave_group_out(settings, known),
        "bloom": splitwise_residuals(llama, bloom, known),
        "in-sample": splitwise_residuals(settings, settings, known),
        "datasheet": splitwise_residuals(settings, settings, known, calibrated=False),
        "before": splitwise_residuals(settings, settings, known, check="peak-ratio",
                                      calibrated=False),
    }
    rows = []
    for split, residuals in runs.items():
        for phase in PHASES:
            for source, target in sorted({(r.source, r.target) for r in residuals}):
                picked = [r for r in residuals if r.check == f"{phase} transfer"
                          and (r.source, r.target) == (source, target)]
                rows.append(_row("splitwise", split, f"{phase} {source} -> {target}", picked))
    flops = leave_group_out(settings, known, check="flops")
    for phase in PHASES:
        for name in SPLITWISE_CLASSES.values():
            picked = [r for r in flops if r.check == f"{phase} flops" and r.target == name]
            rows.append(_row("splitwise", "flops", f"{phase} on {name}", picked))
    jobs = gavel_jobs()
    gavel = {
        "gavel-held-out": gavel_leave_one_out(jobs, known),
        "gavel-in-sample": gavel_residuals(jobs, jobs, known),
        "gavel-compute": gavel_residuals(jobs, jobs, known, calibrated=False),
        "gavel-memory": gavel_residuals(jobs, jobs, known, calibrated=False, bound="memory"),
    }
    for split, residuals in gavel.items():
        for source, target in sorted({(r.source, r.target) for r in residuals}):
            picked = [r for r in residuals if (r.source, r.target) == (source, target)]
            rows.append(_row("gavel", split, f"{source} -> {target}", picked))
    return rows
