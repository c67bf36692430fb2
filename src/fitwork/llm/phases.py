"""Phase timings (CSV format and loaders), fitted latency models, roofline transfer, KV room.

fitwork's phase-timing CSV has one row per measured setting, with this header::

    model,device_class,tp,prompt_tokens,batch_size,context_tokens,output_tokens,prefill_ms,decode_ms

``device_class`` is a catalog class name; ``prefill_ms`` is one prefill of ``batch_size``
prompts of ``prompt_tokens`` each; ``decode_ms`` is one decode step (one token for each of
``batch_size`` sequences) at a mean context of ``context_tokens`` per sequence (left empty:
``prompt_tokens + output_tokens / 2``, the mean over a decode of ``output_tokens``).  Either
time may be empty where it was not measured.  Splitwise's ``perf_model.csv`` is read as well
(`load_splitwise`): the median of its repeats, ``h100-80gb`` as H100-SXM; its power-capped
rows name no catalog class and are left out.

Fitted per (model, class, TP), by non-negative least squares on relative error::

    prefill_ms(p, b) = a0 + a1 * b p + a2 * b p^2      (fixed cost, linear layers, attention)
    decode_ms(b, c)  = d0 + d1 * b + d2 * b c           (weights read, per-sequence, KV read)

An optional ``framework`` column names the serving stack a row was measured on (vLLM 0.6,
TensorRT-LLM 0.12, ...); rows without it take the stack `load_phase_csv` is told, else
`UNNAMED`.  Splitwise's rows are `SPLITWISE_STACK`.  A `PhaseBook` fits the rows of the stack
it is asked for (all rows when none is named) and every model says which stack its rows come
from (`PhaseModel.stack`).

A class with no rows for the model and TP is TRANSFERRED from a measured class at the same
TP: the measured fit times the ratio of the two datasheet rooflines of the same step (FLOPs
2N/TP per token, bytes (2N + kv * tokens)/TP; `fitwork.fit.calibration.ModelShape`).  With no
measured class at that TP, the roofline alone is used, at the pooled efficiencies the
splitwise calibration gives.  Every model says where it comes from (`PhaseModel.source`).
"""

from __future__ import annotations

import csv
import functools
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from fitwork.errors import InputError
from fitwork.fit.calibration import MODELS, SPLITWISE_CLASSES, SPLITWISE_FILE, ModelShape
from fitwork.fit.roofline import checked_bandwidth, checked_peak
from fitwork.hardware.catalog import Catalog, DeviceClass, UnknownDeviceClass, catalog

COLUMNS = ("model", "device_class", "tp", "prompt_tokens", "batch_size", "context_tokens",
           "output_tokens", "prefill_ms", "decode_ms")
TP_DEGREES = (1, 2, 4, 8)
SPLITWISE_STACK = "splitwise-2023"
"""The stack of the shipped rows: Splitwise's 2023 profiling of FP16 llama2-70b and bloom-176b
on DGX-A100 and DGX-H100 (Patel et al., ISCA 2024), served with vLLM of mid-2023.  Current
stacks run faster; plan with their rows (``--phase-data``, ``--framework``) to describe them."""
STACKS = {SPLITWISE_STACK: "vLLM of mid-2023, FP16, as Splitwise measured it (ISCA 2024)"}
"""Shipped stacks and what they are."""
UNNAMED = "unnamed"
"""The stack of rows that name none (no ``framework`` column and no ``--framework``)."""


def describe_stack(name: str) -> str:
    """``name`` with what it is, where fitwork knows (`STACKS`)."""
    return f"{name} ({STACKS[name]})" if name in STACKS else name


class LLMInputError(InputError):
    """LLM input (phase data, trace, model, SLO, plan) that cannot be used; one line."""


@dataclass(frozen=True)
class PhaseRow:
    """One measured setting: times in seconds (``None`` where not measured)."""

    model: str
    device_class: str
    tp: int
    prompt: int
    batch: int
    context: float
    output: int
    prefill_s: float | None
    decode_s: float | None
    framework: str = SPLITWISE_STACK


def _num(value: str, kind: type, place: str, column: str) -> float | int | None:
    if value.strip() == "":
        return None
    try:
        out = kind(value)
    except ValueError:
        raise LLMInputError(f"{place}: {column}={value!r} is not a number; fix that row") from None
    if out < 0:
        raise LLMInputError(f"{place}: {column}={value} is negative; fix that row")
    return out


def load_phase_csv(path: Path | str, known: Catalog | None = None,
                   framework: str | None = None) -> list[PhaseRow]:
    """The rows of a phase-timing CSV in fitwork's format (see the module docstring); a row
    without a ``framework`` value takes ``framework`` (None: `UNNAMED`)."""
    known = known or catalog()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LLMInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise LLMInputError(f"{path}:1: header lacks {', '.join(missing)}; the header is "
                            f"{','.join(COLUMNS)}")
    rows = []
    for row in reader:
        place = f"{path}:{reader.line_num}"
        try:
            name = known.get(row["device_class"]).name
        except UnknownDeviceClass as exc:
            raise LLMInputError(f"{place}: {exc}") from None
        ints = {c: _num(row[c] or "", int, place, c)
                for c in ("tp", "prompt_tokens", "batch_size", "output_tokens")}
        if any(ints[c] is None or ints[c] == 0 for c in ("tp", "batch_size")) \
                or ints["prompt_tokens"] is None:
            raise LLMInputError(f"{place}: tp, batch_size (>= 1) and prompt_tokens are required")
        output = int(ints["output_tokens"] or 0)
        ctx = _num(row["context_tokens"] or "", float, place, "context_tokens")
        pre = _num(row["prefill_ms"] or "", float, place, "prefill_ms")
        dec = _num(row["decode_ms"] or "", float, place, "decode_ms")
        rows.append(PhaseRow(
            model=row["model"].strip(), device_class=name, tp=int(ints["tp"] or 0),
            prompt=int(ints["prompt_tokens"] or 0), batch=int(ints["batch_size"] or 0),
            context=float(ctx) if ctx is not None else int(ints["prompt_tokens"] or 0) + output / 2,
            output=output, prefill_s=None if pre is None else float(pre) / 1e3,
            decode_s=None if dec is None else float(dec) / 1e3,
            framework=(row.get("framework") or "").strip() or framework or UNNAMED))
    return rows


def write_phase_csv(rows: Iterable[PhaseRow], path: Path | str) -> None:
    """Write ``rows`` in fitwork's phase-timing format (times in ms)."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle)
        out.writerow((*COLUMNS, "framework"))
        for r in rows:
            out.writerow([r.model, r.device_class, r.tp, r.prompt, r.batch, f"{r.context:g}",
                          r.output, "" if r.prefill_s is None else f"{r.prefill_s * 1e3:.6g}",
                          "" if r.decode_s is None else f"{r.decode_s * 1e3:.6g}", r.framework])


def load_splitwise(path: Path | str | None = None) -> list[PhaseRow]:
    """Splitwise's ``perf_model.csv`` (the copy shipped in ``fitwork/fit/data`` by default)."""
    if path is None:
        from importlib import resources

        text = resources.files("fitwork.fit").joinpath("data", SPLITWISE_FILE).read_text(
            encoding="utf-8")
        place = f"fitwork/fit/data/{SPLITWISE_FILE}"
    else:
        place = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise LLMInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    runs: dict[tuple[str, str, int, int, int, int], list[tuple[float, float]]] = defaultdict(list)
    reader = csv.DictReader(text.splitlines())
    for row in reader:
        name = SPLITWISE_CLASSES.get(row.get("hardware", ""))
        if name is None:
            continue
        try:
            key = (row["model"], name, int(row["tensor_parallel"]), int(row["prompt_size"]),
                   int(row["batch_size"]), int(row["token_size"]))
            runs[key].append((float(row["prompt_time"]), float(row["token_time"])))
        except (KeyError, TypeError, ValueError):
            raise LLMInputError(f"{place}:{reader.line_num}: not a splitwise perf_model row "
                                "(model, hardware, tensor_parallel, prompt_size, batch_size, "
                                "token_size, prompt_time, token_time)") from None
    return [PhaseRow(model=m, device_class=d, tp=tp, prompt=p, batch=b, context=p + n / 2,
                     output=n, prefill_s=statistics.median(t[0] for t in times) / 1e3,
                     decode_s=statistics.median(t[1] for t in times) / 1e3)
            for (m, d, tp, p, b, n), times in sorted(runs.items())]


def _prefill_terms(p: np.ndarray, b: np.ndarray) -> np.ndarray:
    tokens = b * p
    return np.stack([np.ones_like(tokens), tokens / 1e3, tokens * p / 1e6], axis=-1)


def _decode_terms(b: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(b), b, b * ctx / 1e3], axis=-1)


OUTLIER = 0.5
"""A row a fit misses by more than this relative error is left out, worst first."""
MOST_LEFT_OUT = 2


def _fit(terms: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative coefficients minimising the relative error, and the rows left out.

    While the fit misses a row by more than ``OUTLIER`` (at most ``MOST_LEFT_OUT`` times),
    the row whose removal leaves the smallest squared relative error is left out and the fit
    redone: splitwise's llama2-70b TP2 A100 prefill at batch 64, 794 ms after 6,633 ms at
    batch 32, is one.
    """
    def solve(keep: np.ndarray) -> tuple[np.ndarray, float]:
        coef, res = nnls(terms[keep] / y[keep, None], np.ones(int(keep.sum())))
        return coef, float(res)

    keep = np.ones(len(y), dtype=bool)
    coef, _ = solve(keep)
    for _ in range(MOST_LEFT_OUT):
        if (np.abs(terms[keep] @ coef - y[keep]) / y[keep]).max() <= OUTLIER:
            break
        if keep.sum() <= terms.shape[1] + 2:
            break
        trials = []
        for i in np.flatnonzero(keep):
            trial = keep.copy()
            trial[i] = False
            trials.append((solve(trial)[1], int(i)))
        keep[min(trials)[1]] = False
        coef, _ = solve(keep)
    return coef, keep


@dataclass(frozen=True)
class FitError:
    """Relative errors |fit - measured| / measured of a phase, one per row, and which rows
    the fit kept (the rest are outliers it left out, see ``_fit``)."""

    errors: tuple[float, ...]
    kept: tuple[bool, ...]

    @property
    def n(self) -> int:
        """Rows."""
        return len(self.errors)

    @property
    def excluded(self) -> int:
        """Rows the fit left out as outliers."""
        return self.kept.count(False)

    @property
    def median(self) -> float:
        """Median relative error over every row."""
        return float(np.median(self.errors))

    @property
    def worst(self) -> float:
        """Worst relative error over the rows the fit kept."""
        return float(max(e for e, k in zip(self.errors, self.kept, strict=True) if k))

    @property
    def worst_all(self) -> float:
        """Worst relative error over every row, outliers included."""
        return float(max(self.errors))

    def __add__(self, other: FitError) -> FitError:
        return FitError(self.errors + other.errors, self.kept + other.kept)

    def line(self) -> str:
        """One line: rows, median, worst (and with the outliers)."""
        out = f"n={self.n} median {self.median:.1%} worst {self.worst:.1%}"
        if self.excluded:
            out += (f" ({self.excluded} outlier row(s) left out; worst with them "
                    f"{self.worst_all:.0%})")
        return out


def _error(pred: np.ndarray, y: np.ndarray, kept: np.ndarray | None = None) -> FitError:
    err = np.abs(pred - y) / y
    keep = np.ones(len(y), dtype=bool) if kept is None else kept
    return FitError(tuple(float(e) for e in err), tuple(bool(k) for k in keep))


@dataclass(frozen=True)
class PhaseModel:
    """Prefill and decode-step latency of one model on one class at one TP degree.

    ``source`` is ``measured`` (fitted on rows of this class), ``transferred from CLASS``
    (the measured fit on CLASS carried by the roofline ratio) or ``roofline`` (no
    measurement of this model at this TP; datasheet roofline at pooled efficiencies);
    ``stack`` the serving stack(s) of the rows behind it.
    """

    model: str
    device_class: str
    tp: int
    shape: ModelShape
    device: DeviceClass
    source: str
    prefill_coef: np.ndarray | None = None
    decode_coef: np.ndarray | None = None
    base: PhaseModel | None = None
    efficiency: tuple[float, float] = (1.0, 1.0)
    prefill_error: FitError | None = None
    decode_error: FitError | None = None
    left_out: tuple[tuple[PhaseRow, str], ...] = ()
    stack: str = SPLITWISE_STACK

    @property
    def transferred(self) -> bool:
        """Whether no row of this class was measured (transferred or roofline)."""
        return self.source != "measured"

    @property
    def weight_bytes(self) -> float:
        """fp16 weights of the whole model (split over the TP GPUs)."""
        return 2.0 * self.shape.params

    def kv_capacity(self, memory_fraction: float = 1.0) -> float:
        """KV-cache bytes one replica holds: device memory x TP (x fraction) - weights."""
        return self.device.memory_bytes * self.tp * memory_fraction - self.weight_bytes

    def kv_tokens(self, memory_fraction: float = 1.0) -> int:
        """Tokens of context one replica's KV cache holds (0: the weights do not fit)."""
        room = self.kv_capacity(memory_fraction)
        return max(0, int(room // self.shape.kv_bytes_per_token))

    def prefill_work(self, p: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FLOPs and device bytes of a prefill, per GPU."""
        n, kv = self.shape.params, self.shape.kv_bytes_per_token
        return 2 * n * b * p / self.tp, (2 * n + kv * b * p) / self.tp

    def decode_work(self, b: np.ndarray, ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FLOPs and device bytes of one decode step (``ctx`` mean context), per GPU."""
        n, kv = self.shape.params, self.shape.kv_bytes_per_token
        return 2 * n * b / self.tp, (2 * n + kv * b * ctx) / self.tp

    def _roof(self, work: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        peak = checked_peak(self.device, "fp16") * self.efficiency[0]
        bw = checked_bandwidth(self.device) * self.efficiency[1]
        return np.maximum(work[0] / peak, work[1] / bw)

    def prefill_s(self, p: np.ndarray | float, b: np.ndarray | float = 1.0) -> np.ndarray:
        """Seconds of one prefill of ``b`` prompts of ``p`` tokens."""
        p, b = np.asarray(p, dtype=float), np.asarray(b, dtype=float)
        if self.prefill_coef is not None:
            return _prefill_terms(p, b) @ self.prefill_coef / 1e3
        own = self._roof(self.prefill_work(p, b))
        if self.base is None:
            return own
        return self.base.prefill_s(p, b) * own / self.base._roof(self.base.prefill_work(p, b))

    def decode_s(self, b: np.ndarray | float, ctx: np.ndarray | float) -> np.ndarray:
        """Seconds of one decode step for ``b`` sequences at mean context ``ctx``."""
        b, ctx = np.asarray(b, dtype=float), np.asarray(ctx, dtype=float)
        if self.decode_coef is not None:
            return _decode_terms(b, ctx) @ self.decode_coef / 1e3
        own = self._roof(self.decode_work(b, ctx))
        if self.base is None:
            return own
        return self.base.decode_s(b, ctx) * own / self.base._roof(self.base.decode_work(b, ctx))

    def decode_linear(self, ctx: float) -> tuple[float, float, float]:
        """(d0, d1, d2) in seconds with step(b, c) = d0 + d1 b + d2 b c near context ``ctx``.

        Exact for a measured fit; for a transferred one, the line through the model at
        batch 1 and 2 (context ``ctx``) and at batch 1 with twice the context.
        """
        if self.decode_coef is not None:
            d0, d1, d2 = self.decode_coef / 1e3
            return float(d0), float(d1), float(d2 / 1e3)
        s11 = float(self.decode_s(1, ctx))
        s21 = float(self.decode_s(2, ctx))
        s12 = float(self.decode_s(1, 2 * ctx))
        d2 = max(0.0, (s12 - s11) / ctx)
        d1 = max(0.0, s21 - s11 - d2 * ctx)
        return max(0.0, s11 - d1 - d2 * ctx), d1, d2


def fit_model(rows: Sequence[PhaseRow], shape: ModelShape, device: DeviceClass) -> PhaseModel:
    """The fitted latency model of the rows of one (model, class, TP)."""
    pre = [r for r in rows if r.prefill_s]
    dec = [r for r in rows if r.decode_s]
    first = rows[0]
    if len(pre) < 3 or len(dec) < 3:
        raise LLMInputError(f"{first.model} on {first.device_class} TP{first.tp}: "
                            f"{len(pre)} prefill and {len(dec)} decode rows; a fit needs 3 of each")
    p = np.array([r.prompt for r in pre], dtype=float)
    b = np.array([r.batch for r in pre], dtype=float)
    y = np.array([r.prefill_s for r in pre], dtype=float) * 1e3
    a, out_a = _fit(_prefill_terms(p, b), y)
    bd = np.array([r.batch for r in dec], dtype=float)
    cd = np.array([r.context for r in dec], dtype=float)
    yd = np.array([r.decode_s for r in dec], dtype=float) * 1e3
    d, out_d = _fit(_decode_terms(bd, cd), yd)
    return PhaseModel(first.model, device.name, first.tp, shape, device, "measured",
                      prefill_coef=a, decode_coef=d,
                      stack=" + ".join(sorted({r.framework for r in rows})),
                      prefill_error=_error(_prefill_terms(p, b) @ a, y, out_a),
                      decode_error=_error(_decode_terms(bd, cd) @ d, yd, out_d),
                      left_out=tuple([(r, "prefill") for r, k in zip(pre, out_a, strict=True)
                                      if not k] + [(r, "decode") for r, k in
                                                   zip(dec, out_d, strict=True) if not k]))


class PhaseBook:
    """Fitted phase models for every (model, class, TP) the rows measure, and transfers.

    ``framework`` keeps only the rows of that serving stack (case-insensitive; None: every
    row, and a model fitted on rows of two stacks names both)."""

    def __init__(self, rows: Sequence[PhaseRow], known: Catalog | None = None,
                 shapes: dict[str, ModelShape] | None = None,
                 framework: str | None = None) -> None:
        self.known = known or catalog()
        self.shapes = dict(MODELS if shapes is None else shapes)
        self.framework = framework
        if framework is not None:
            have = sorted({r.framework for r in rows})
            rows = [r for r in rows if r.framework.lower() == framework.lower()]
            if not rows:
                raise LLMInputError(f"--framework {framework!r}: no phase rows of that stack "
                                    f"(rows name: {', '.join(have) or 'none'}); give your "
                                    "rows with --phase-data, or name one of those")
        self.rows = list(rows)
        groups: dict[tuple[str, str, int], list[PhaseRow]] = defaultdict(list)
        for r in self.rows:
            groups[r.model, r.device_class, r.tp].append(r)
        self.fitted: dict[tuple[str, str, int], PhaseModel] = {}
        for (model, name, _tp), group in sorted(groups.items()):
            shape = self.shapes.get(model)
            if shape is None:
                raise LLMInputError(f"phase rows for model {model!r} but no model shape (params, "
                                    "layers, kv_heads, head_dim): give it in shapes")
            self.fitted[model, name, _tp] = fit_model(group, shape, self.known.get(name))

    def models(self) -> list[str]:
        """Models with phase rows or a shape."""
        return sorted({k[0] for k in self.fitted} | set(self.shapes))

    def get(self, model: str, device_class: str, tp: int) -> PhaseModel:
        """The phase model of ``model`` on ``device_class`` at ``tp``: measured, transferred
        from a measured class at the same TP, or the roofline at pooled efficiencies."""
        name = self.known.get(device_class).name
        found = self.fitted.get((model, name, tp))
        if found is not None:
            return found
        shape = self.shapes.get(model)
        if shape is None:
            have = ", ".join(self.models()) or "none"
            raise LLMInputError(
                f"model {model!r}: no phase rows and no model shape to transfer from (needs "
                f"parameter count, layers, KV heads and head dim); phase data covers {have}; "
                "add measured rows (fitwork phase CSV) or the model's shape")
        device = self.known.get(name)
        if device.memory_bandwidth is None:
            raise LLMInputError(f"model {model!r} on {name}: the catalog has no memory "
                                "bandwidth for it, so decode cannot be transferred; measure it")
        sources = [k[1] for k in self.fitted if k[0] == model and k[2] == tp]
        if sources:  # the measured class nearest in peak FLOP/s and bandwidth
            def distance(other: str) -> float:
                o = self.known.get(other)
                return (abs(np.log(o.fp16_flops / device.fp16_flops))
                        + abs(np.log((o.memory_bandwidth or 1.0) / device.memory_bandwidth)))

            source = min(sorted(sources), key=distance)
            base = self.fitted[model, source, tp]
            return PhaseModel(model, name, tp, shape, device, f"transferred from {source}",
                              base=base, stack=base.stack)
        from fitwork.fit.calibration import calibration

        eff, _ = calibration().device_efficiency(name)
        return PhaseModel(model, name, tp, shape, device, "roofline", efficiency=eff,
                          stack=f"datasheet roofline at {SPLITWISE_STACK}'s pooled efficiencies")

    def stack_of(self, model: str, pools: Iterable[tuple[str, int]]) -> str:
        """The serving stack(s) the rates of ``model`` on these (class, TP) describe."""
        names = sorted({self.get(model, c, tp).stack for c, tp in pools})
        return "; ".join(describe_stack(n) for n in names)

    def fit_errors(self) -> dict[str, FitError]:
        """Pooled in-sample fit error per phase over every fitted (model, class, TP)."""
        empty = FitError((), ())
        models = list(self.fitted.values())
        return {"prefill": sum((m.prefill_error or empty for m in models), empty),
                "decode": sum((m.decode_error or empty for m in models), empty)}


def leave_class_out(rows: Sequence[PhaseRow], known: Catalog | None = None
                    ) -> dict[tuple[str, str, str], FitError]:
    """Each class predicted from the others through the roofline transfer, against its rows.

    Keys are (held-out class, source class, phase); pooled over models and TP degrees.  Rows
    the class's own fit leaves out as outliers count in the median, not in ``worst``.
    """
    known = known or catalog()
    classes = sorted({r.device_class for r in rows})
    outliers = {key for m in PhaseBook(rows, known).fitted.values() for key in m.left_out}
    out = {}
    for target in classes:
        book = PhaseBook([r for r in rows if r.device_class != target], known)
        errs: dict[tuple[str, str], list[tuple[float, bool]]] = defaultdict(list)
        for r in rows:
            if r.device_class != target:
                continue
            m = book.get(r.model, target, r.tp)
            src = m.base.device_class if m.base is not None else m.source
            if r.prefill_s:
                errs[src, "prefill"].append((abs(float(m.prefill_s(r.prompt, r.batch))
                                                 - r.prefill_s) / r.prefill_s,
                                             (r, "prefill") not in outliers))
            if r.decode_s:
                errs[src, "decode"].append((abs(float(m.decode_s(r.batch, r.context))
                                                - r.decode_s) / r.decode_s,
                                            (r, "decode") not in outliers))
        for (src, phase), e in errs.items():
            out[target, src, phase] = FitError(tuple(x for x, _ in e), tuple(k for _, k in e))
    return out


@functools.cache
def default_book() -> PhaseBook:
    """The phase models of the shipped splitwise data, built once per process."""
    return PhaseBook(load_splitwise())
