"""The demo: the same OCR work run monolithic and fitted on this host, checked and compared.

::

    pages ──▶ store (loopback HTTP, latency per request) ◀──── GET page / PUT text ────┐
      │                                                                                  │
      ├─ FLOPs counted from the ONNX graphs (forked child)                              │
      ├─ each layout of ``layouts.LAYOUTS`` that fits the host: profiled, fitted ─▶ plan │
      ├─ monolithic: ``ocr_document`` x N processes (N: the plan's monolithic replicas) ─┤
      └─ fitted: the best plan's units and replicas ─────────────────────────────────────┘
                 │
                 ▼
    checks (same text both ways, accuracy, the store holds every page) ─▶ figures ─▶ files

Display stays out: a `Listener` hears phases and run progress.  Files written to the
output folder: ``monolithic.record.json``, ``fitted.record.json`` (run records),
``plan.json``, ``profile.json``, ``report.html``, ``texts.jsonl`` (known and recognised
lines per page), ``summary.json`` (the figures printed), and ``*.gpu-samples.json`` where
NVML sampled GPUs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fitwork.demo import flops as flop_count
from fitwork.demo.config import ACCURACY_THRESHOLD, PRECISION, DemoConfig
from fitwork.demo.documents import Document, Score, make_documents, score
from fitwork.demo.gpu import GpuSamples, NvmlSampler, gpu_ready
from fitwork.demo.layouts import LAYOUTS, MONOLITHIC, Flops, flops_per_item, model_units
from fitwork.demo.layouts import monolithic as monolithic_pipeline
from fitwork.demo.ocr import GPU_ENV
from fitwork.demo.server import DocumentStore, serve
from fitwork.errors import FitworkError
from fitwork.fit.plan import Plan, fit
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.record import PipelineProfile
from fitwork.runner import run as run_pipeline
from fitwork.telemetry.record import Progress, RunRecord
from fitwork.telemetry.utilization import RunFigures, run_figures
from fitwork.workload import Pipeline

NEEDS = {"rapidocr_onnxruntime": "rapidocr-onnxruntime", "onnxruntime": "onnxruntime",
         "cv2": "opencv-python", "PIL": "pillow"}


class DemoError(FitworkError):
    """The demo cannot run here (a missing dependency, no layout that fits the host)."""


def missing_dependencies() -> list[str]:
    """What the demo needs and does not find, in words (empty when all is there)."""
    missing = [dist for module, dist in NEEDS.items() if importlib.util.find_spec(module) is None]
    if "opencv-python" not in missing:
        try:
            import cv2  # noqa: F401
        except ImportError as exc:
            missing.append(f"OpenCV's system libraries ({exc}; on Debian or Ubuntu: apt-get "
                           "install libgl1 libglib2.0-0, or replace opencv-python with "
                           "opencv-python-headless)")
    return missing


class Listener(Protocol):
    """Hears what the demo is doing (the CLI shows it; the default ignores it)."""

    def phase(self, text: str) -> None:
        """A step started."""

    def run_started(self, label: str, total: int) -> None:
        """A run of ``total`` pages started."""

    def run_progress(self, label: str, snapshot: Progress) -> None:
        """A run's progress."""

    def run_finished(self, label: str) -> None:
        """A run ended."""


class Quiet:
    """A `Listener` that ignores everything."""

    def phase(self, text: str) -> None:
        """Ignore."""

    def run_started(self, label: str, total: int) -> None:
        """Ignore."""

    def run_progress(self, label: str, snapshot: Progress) -> None:
        """Ignore."""

    def run_finished(self, label: str) -> None:
        """Ignore."""


@dataclass
class Candidate:
    """One layout considered for the fitted run, and what became of it."""

    layout: str
    units: list[str]
    predicted: float | None
    note: str


@dataclass
class Side:
    """One run (monolithic or fitted), its checks and its figures."""

    label: str
    replicas: dict[str, int]
    record: RunRecord
    figures: RunFigures
    predicted: float
    outputs: dict[str, list[str]]
    score: Score
    stored: bool
    host_cpu_share: float
    price_per_hour: float | None
    price_basis: str
    cost_per_million: float | None
    gpu: GpuSamples | None = None

    @property
    def realized_share(self) -> float:
        """Realized items/s over the plan's prediction."""
        return self.record.throughput / self.predicted if self.predicted > 0 else 0.0


@dataclass
class DemoResult:
    """Everything the demo measured, checked and wrote."""

    config: DemoConfig
    pages: int
    host_cores: float
    gpu_class: str | None
    flops: Flops
    flops_note: str
    layout: str
    candidates: list[Candidate]
    plan: Plan
    monolithic: Side
    fitted: Side
    mismatched: list[str]
    wall_s: float
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def same_text(self) -> bool:
        """Both runs gave the same lines for every page."""
        return not self.mismatched

    @property
    def busiest_class(self) -> str:
        """The device class the work leans on: the GPU class when models use one, else CPU."""
        return self.gpu_class or self.plan.fleet.node_types[0].cpu_class

    @property
    def failures(self) -> list[str]:
        """Each check that failed, in words (empty when the demo passed)."""
        found = []
        if not self.same_text:
            found.append(f"{len(self.mismatched)} pages read differently by the two runs "
                         f"(first: {', '.join(self.mismatched[:5])})")
        for side in (self.monolithic, self.fitted):
            if side.score.line_accuracy < ACCURACY_THRESHOLD:
                found.append(f"{side.label}: {side.score.line_accuracy:.1%} of lines exact, "
                             f"under the {ACCURACY_THRESHOLD:.0%} required")
            if side.record.failures or side.record.items_completed != self.pages:
                found.append(f"{side.label}: {side.record.items_completed} of {self.pages} "
                             f"pages done, {side.record.failures} failed")
            if not side.stored:
                found.append(f"{side.label}: the store does not hold every page's text")
        return found

    @property
    def ok(self) -> bool:
        """Every check passed."""
        return not self.failures


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    previous = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def fits_once(pipeline: Pipeline, fleet: Fleet) -> str | None:
    """Why one replica of every unit cannot share a node of ``fleet`` (``None``: it can)."""
    cores = sum(u.resources.cpu for u in pipeline.units)
    gpus = sum(u.resources.gpu for u in pipeline.units)
    for node in fleet.node_types:
        devices = sum(node.devices.values())
        if cores <= node.cores + 1e-9 and gpus <= devices + 1e-9:
            return None
    most = max(fleet.node_types, key=lambda n: n.cores)
    return (f"one replica of each unit needs {cores:g} cores"
            + (f" and {gpus:g} GPUs" if gpus else "")
            + f"; the host has {most.cores:g} cores"
            + (f" and {sum(most.devices.values())} GPUs" if gpus else ""))


def on_gpu(profile: PipelineProfile, gpu_class: str) -> PipelineProfile:
    """The profile with its GPU units marked as measured on ``gpu_class``.

    fitwork's profiler times accelerators through torch only; onnxruntime's CUDA provider
    runs synchronously, so a GPU unit's wall time is its time on the GPU class (host work
    around the model calls included).
    """
    units = [u.model_copy(update={"device_class": gpu_class, "accel_s": u.wall_s})
             if u.resources.get("gpu", 0.0) > 0 else u for u in profile.units]
    return profile.model_copy(update={"units": units})


def _plan_layouts(flops: Flops, gpu_class: str | None, fleet: Fleet, samples: list[Any],
                  listener: Listener) -> tuple[str, Plan, PipelineProfile, list[Candidate]]:
    """Profile and fit each layout that fits the host; the one predicting most items/s."""
    from fitwork.profiling import profile_pipeline

    best: tuple[str, Plan, PipelineProfile] | None = None
    candidates = []
    for name, build in LAYOUTS.items():
        pipeline = build(flops, gpu_class is not None)
        units = [u.name for u in pipeline.units]
        why = fits_once(pipeline, fleet)
        if why:
            candidates.append(Candidate(name, units, None, f"not profiled: {why}"))
            continue
        try:
            profile = profile_pipeline(
                pipeline, samples, samples=len(samples),
                progress=lambda unit, n=name: listener.phase(f"profiling {n} layout: {unit}"))
            if gpu_class:
                profile = on_gpu(profile, gpu_class)
            listener.phase(f"fitting the {name} layout to this host")
            plan = fit(profile, fleet, precision=PRECISION)
        except FitworkError as exc:
            candidates.append(Candidate(name, units, None, f"no plan: {exc}"))
            continue
        candidates.append(Candidate(name, units, plan.fitted.throughput,
                                    f"plan {plan.workers_for()}"))
        if best is None or plan.fitted.throughput > best[1].fitted.throughput:
            best = (name, plan, profile)
    if best is None:
        notes = "; ".join(f"{c.layout}: {c.note}" for c in candidates)
        raise DemoError(f"no layout of the OCR units fits this host ({notes})")
    return (*best, candidates)


def _run(pipeline: Pipeline, items: list[dict[str, str]], workers: Mapping[str, int],
         label: str, store: DocumentStore, listener: Listener, gpu: bool
         ) -> tuple[RunRecord, dict[str, list[str]], bool, GpuSamples | None]:
    store.clear_texts()
    listener.run_started(label, len(items))
    sampler = NvmlSampler() if gpu else contextlib.nullcontext()
    with sampler, run_pipeline(pipeline, items, workers=workers,
                               progress=lambda s: listener.run_progress(label, s)) as result:
        outputs = {o["id"]: list(o["lines"]) for o in result}
    listener.run_finished(label)
    stored = dict(store.texts) == outputs and len(outputs) == len(items)
    samples = sampler.result if isinstance(sampler, NvmlSampler) else None
    return result.record, outputs, stored, samples


def _side(label: str, record: RunRecord, outputs: dict[str, list[str]], stored: bool,
          gpu_samples: GpuSamples | None, predicted: float, pipeline: Pipeline,
          workers: Mapping[str, int], plan: Plan, documents: list[Document],
          gpu_class: str | None, host_cores: float) -> Side:
    from fitwork.report.html import cost_per_million, run_price

    classes = {name: gpu_class for name in model_units(pipeline)} if gpu_class else None
    figures = run_figures(record, plan, flops_per_item=flops_per_item(pipeline),
                          classes=classes, precision=PRECISION)
    price, basis = run_price(figures, plan)
    busy_cores = sum(u.cpu_s for u in record.units)
    return Side(
        label=label, replicas=dict(workers), record=record, figures=figures,
        predicted=predicted, outputs=outputs, score=score(documents, outputs), stored=stored,
        host_cpu_share=busy_cores / (host_cores * record.wall_s) if record.wall_s else 0.0,
        price_per_hour=price, price_basis=basis,
        cost_per_million=cost_per_million(price, record.throughput), gpu=gpu_samples)


def run_demo(config: DemoConfig | None = None, listener: Listener | None = None) -> DemoResult:
    """Run the demo end to end and write its files; checks are in ``.failures``."""
    from fitwork.hardware.discover import discover_local

    config = config or DemoConfig()
    listener = listener or Quiet()
    missing = missing_dependencies()
    if missing:
        raise DemoError(f"the demo needs {'; '.join(missing)}: install its extra with "
                        "pip install 'fitwork[demo]'")
    started = time.perf_counter()
    listener.phase(f"rendering {config.images} pages")
    documents = make_documents(config.images, config.seed)
    fleet = discover_local()
    host_cores = max(n.cores for n in fleet.node_types)
    gpu_class = gpu_ready(fleet)
    listener.phase("counting FLOPs in the ONNX graphs")
    try:
        flops = flop_count.count([d.png for d in documents])
        flops_note = (f"counted from the ONNX graphs (onnxruntime profiler, Conv/ConvTranspose/"
                      f"MatMul/Gemm) on {min(len(documents), flop_count.SAMPLE_PAGES)} pages")
    except RuntimeError as exc:
        flops, flops_note = Flops(), f"not counted ({exc}): no MFU"
    items = [{"id": d.id} for d in documents]
    count = min(config.samples, len(items))
    samples = [items[i * len(items) // count] for i in range(count)]  # spread over the pages
    with serve({d.id: d.png for d in documents}, config.latency_ms) as store, \
            _environment(GPU_ENV, "1" if gpu_class else None):
        layout, plan, profile, candidates = _plan_layouts(flops, gpu_class, fleet, samples,
                                                          listener)
        fitted = LAYOUTS[layout](flops, gpu_class is not None)
        fitted_workers = plan.workers_for()
        planned_mono = sum(p.replicas for p in plan.monolithic.result.replicas) or 1
        mono_count = config.workers or planned_mono
        mono = monolithic_pipeline(flops, gpu_class is not None)
        mono_workers = {MONOLITHIC: mono_count}
        predicted_mono = plan.monolithic.throughput * mono_count / planned_mono
        mono_run = _run(mono, items, mono_workers, "monolithic", store, listener,
                        gpu_class is not None)
        fitted_run = _run(fitted, items, fitted_workers, "fitted", store, listener,
                          gpu_class is not None)
    listener.phase("checking and writing")
    sides = [
        _side("monolithic", *mono_run, predicted_mono, mono, mono_workers, plan, documents,
              gpu_class, host_cores),
        _side("fitted", *fitted_run, plan.fitted.throughput, fitted, fitted_workers, plan,
              documents, gpu_class, host_cores),
    ]
    mismatched = [d.id for d in documents
                  if sides[0].outputs.get(d.id) != sides[1].outputs.get(d.id)]
    result = DemoResult(
        config=config, pages=len(documents), host_cores=host_cores, gpu_class=gpu_class,
        flops=flops, flops_note=flops_note, layout=layout, candidates=candidates, plan=plan,
        monolithic=sides[0], fitted=sides[1], mismatched=mismatched,
        wall_s=time.perf_counter() - started)
    result.files = write_files(result, profile, documents)
    result.wall_s = time.perf_counter() - started
    return result


def summary(result: DemoResult) -> dict[str, Any]:
    """The headline figures as plain JSON values (``summary.json``; the bench reads them)."""
    def side(s: Side) -> dict[str, Any]:
        busiest = next((c for c in s.figures.classes
                        if c.device_class == result.busiest_class), None)
        return {
            "replicas": s.replicas, "items_per_s": s.record.throughput,
            "predicted_items_per_s": s.predicted, "realized_share": s.realized_share,
            "wall_s": s.record.wall_s, "latency_p50_s": s.record.latency_p50_s,
            "fleet_utilization": {c.device_class: c.utilization for c in s.figures.classes},
            "allocated": {c.device_class: c.allocated for c in s.figures.classes},
            "mfu": {c.device_class: c.mfu for c in s.figures.classes if c.mfu is not None},
            "busiest_utilization": busiest.utilization if busiest else None,
            "host_cpu_share": s.host_cpu_share,
            "capacity_utilization": s.figures.capacity_utilization,
            "price_per_hour": s.price_per_hour, "price_basis": s.price_basis,
            "cost_per_million": s.cost_per_million,
            "line_accuracy": s.score.line_accuracy,
            "page_accuracy": s.score.document_accuracy, "stored": s.stored,
            "gpu_mean_busy": s.gpu.mean_busy if s.gpu else None,
        }

    return {
        "pages": result.pages, "latency_ms": result.config.latency_ms,
        "seed": result.config.seed, "host_cores": result.host_cores,
        "gpu_class": result.gpu_class, "busiest_class": result.busiest_class,
        "flops_per_page": {"detect": result.flops.detect, "recognise": result.flops.recognise},
        "flops_note": result.flops_note, "layout": result.layout,
        "candidates": [{"layout": c.layout, "units": c.units, "predicted": c.predicted,
                        "note": c.note} for c in result.candidates],
        "capacity_bound": result.fitted.figures.capacity_bound,
        "accuracy_threshold": ACCURACY_THRESHOLD, "same_text": result.same_text,
        "failures": result.failures, "wall_s": result.wall_s,
        "monolithic": side(result.monolithic), "fitted": side(result.fitted),
    }


def write_files(result: DemoResult, profile: PipelineProfile,
                documents: list[Document]) -> dict[str, Path]:
    """Write the records, plan, profile, texts, summary and HTML report; their paths."""
    from fitwork.report.html import render_report

    out = result.config.out
    out.mkdir(parents=True, exist_ok=True)
    files = {name: out / name for name in (
        "monolithic.record.json", "fitted.record.json", "plan.json", "profile.json",
        "texts.jsonl", "summary.json", "report.html")}
    sides = (result.monolithic, result.fitted)
    for side in sides:
        side.record.save(files[f"{side.label}.record.json"])
        if side.gpu is not None:
            path = out / f"{side.label}.gpu-samples.json"
            path.write_text(side.gpu.model_dump_json(indent=1))
            files[path.name] = path
    result.plan.save(files["plan.json"])
    profile.save(files["profile.json"])
    with files["texts.jsonl"].open("w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(json.dumps({
                "id": document.id, "known": list(document.lines),
                "monolithic": result.monolithic.outputs.get(document.id),
                "fitted": result.fitted.outputs.get(document.id)}) + "\n")
    files["summary.json"].write_text(json.dumps(summary(result), indent=1))
    page = render_report(
        [s.record for s in sides], [s.label for s in sides], result.plan,
        [s.figures for s in sides],
        title=f"fitwork demo: OCR of {result.pages} pages, monolithic vs fitted")
    files["report.html"].write_text(page, encoding="utf-8")
    return files
