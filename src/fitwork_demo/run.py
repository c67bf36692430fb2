"""The demo: OCR of the same pages in every layout on this host, swept, checked and compared.

::

    pages ──▶ store (loopback HTTP, latency per request) ◀──── GET page / PUT text ────┐
      │                                                                                  │
      ├─ FLOPs counted from the ONNX graphs (forked child)                              │
      └─ at each store latency:                                                         │
           profile the split units (fitwork.profile_pipeline; the model units once, ─▶   │
           fetch and store again at each latency)          fit(profile, fleet)           │
           layouts: monolith x 1..k processes, threaded monolith (fused, io=N),          │
                    hand layouts of the split units, the fitted plan as planned and ─────┤
                    the fitted plan re-fitted live (adapt=True), as separate contenders  │
           every layout run ``repeats`` times, in alternating order ─────────────────────┘
                 │
                 ▼
    checks (same text in every trial, accuracy, the store holds every page) ─▶ figures ─▶ files

Only the public API runs the work: `fitwork.profile_pipeline`, `fitwork.plan_for`,
`fitwork.run` (with the plan as placement, or replica counts), `fitwork.render_report`.
The best monolithic layout and the best hand layout at each latency are the ones with the
highest median pages per second over their trials, startup left out (see ``sweep``); the
fitted plan (plan only) is compared with both, and the adapted run (the same plan re-fitted
while it runs) with the best monolith, so plan quality and live re-fitting are told apart.
Each comparison is one `fitwork_demo.verdict.Verdict` (median of N trials, their spread,
"too noisy to call" where neither their spreads nor their paired rounds tell them apart),
printed the same on the console, in ``summary.json`` and in the HTML reports.  Display
stays out: a `Listener` hears phases and run progress.  Files written to the output folder
are listed in `fitwork_demo.files.write_files`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fitwork import (
    FitworkError,
    Fleet,
    Pipeline,
    PipelineProfile,
    Plan,
    Progress,
    plan_for,
)
from fitwork_demo import flops as flop_count
from fitwork_demo.config import ACCURACY_THRESHOLD, AIM_HAND, AIM_MONOLITH, PRECISION, DemoConfig
from fitwork_demo.documents import Document, Score, make_documents, score
from fitwork_demo.gpu import gpu_ready
from fitwork_demo.layouts import (
    MONOLITHIC,
    RECOGNISE_BATCH,
    THREADED,
    Flops,
    Layout,
    monolithic,
    split,
    threaded,
)
from fitwork_demo.ocr import GPU_ENV
from fitwork_demo.server import serve
from fitwork_demo.sweep import Trial, run_trial
from fitwork_demo.verdict import Verdict, median

NEEDS = {"rapidocr_onnxruntime": "rapidocr-onnxruntime", "onnxruntime": "onnxruntime",
         "cv2": "opencv-python", "PIL": "pillow"}


class DemoError(FitworkError):
    """The demo cannot run here (a missing dependency)."""


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

    def run_finished(self, label: str, outcome: str) -> None:
        """A run ended; ``outcome`` says how it went in a few words."""


class Quiet:
    """A `Listener` that ignores everything."""

    def phase(self, text: str) -> None:
        """Ignore."""

    def run_started(self, label: str, total: int) -> None:
        """Ignore."""

    def run_progress(self, label: str, snapshot: Progress) -> None:
        """Ignore."""

    def run_finished(self, label: str, outcome: str) -> None:
        """Ignore."""


@dataclass
class Contender:
    """One layout at one latency and its trials."""

    layout: Layout
    trials: list[Trial] = field(default_factory=list)

    @property
    def rates(self) -> tuple[float, ...]:
        """Each trial's pages/s, startup left out, in the order they ran."""
        return tuple(t.rate for t in sorted(self.trials, key=lambda t: t.repeat))

    @property
    def rate(self) -> float:
        """Median pages/s over the trials, startup left out (the figure layouts are ranked
        by and every verdict states)."""
        return median(self.rates)

    @property
    def items_per_s(self) -> float:
        """Median whole-run pages/s over the trials (the run records' throughput)."""
        return median([t.items_per_s for t in self.trials])

    @property
    def median_trial(self) -> Trial:
        """The trial whose rate is the median (of two middle ones, the slower): its record
        goes in the report."""
        ordered = sorted(self.trials, key=lambda t: (t.rate, t.repeat))
        return ordered[(len(ordered) - 1) // 2]

    @property
    def peak_rss(self) -> int:
        """The most summed worker RSS any trial reached."""
        return max((t.peak_rss for t in self.trials), default=0)

    @property
    def peak_pss(self) -> int | None:
        """The most summed worker PSS any trial reached (``None`` where unreadable)."""
        values = [t.peak_pss for t in self.trials]
        return None if not values or None in values else max(v for v in values if v)

    @property
    def cores_busy(self) -> float:
        """Mean cores kept busy by the workers over the trials."""
        return statistics.fmean(t.cores_busy for t in self.trials) if self.trials else 0.0

    @property
    def others_cores(self) -> float:
        """Mean cores the rest of the host kept busy during the trials."""
        return statistics.fmean(t.others_cores for t in self.trials) if self.trials else 0.0

    @property
    def cpu_per_page(self) -> float:
        """Worker CPU seconds per page, over all trials."""
        pages = sum(t.record.items_completed for t in self.trials)
        cpu = sum(u.cpu_s for t in self.trials for u in t.record.units)
        return cpu / pages if pages else 0.0

    @property
    def realized_share(self) -> float | None:
        """Whole-run pages/s over what the plan predicts for a run of the trial's pages
        (start-up included on both sides), where it made a prediction."""
        if not self.layout.predicted_run:
            return None
        return self.items_per_s / self.layout.predicted_run

    @property
    def last(self) -> Trial:
        """The latest trial (its record goes in the report)."""
        return max(self.trials, key=lambda t: t.repeat)


@dataclass
class Sweep:
    """Every layout at one store latency, the plan the fitted one ran, and the verdicts."""

    latency_ms: float
    profile: PipelineProfile
    plan: Plan
    contenders: list[Contender]

    def family(self, name: str) -> list[Contender]:
        """The contenders of one family (``monolith``, ``hand``, ``fitted``)."""
        return [c for c in self.contenders if c.layout.family == name]

    @property
    def best_monolith(self) -> Contender:
        """The monolithic layout with the most pages/s (startup left out)."""
        return max(self.family("monolith"), key=lambda c: c.rate)

    @property
    def best_hand(self) -> Contender | None:
        """The hand layout with the most pages/s (startup left out) (``None``: no hand layout)."""
        return max(self.family("hand"), key=lambda c: c.rate, default=None)

    @property
    def fitted(self) -> Contender:
        """The fitted layout as planned (no live re-fitting)."""
        return self.family("fitted")[0]

    @property
    def adapted(self) -> Contender | None:
        """The fitted layout re-fitted while it runs (adapt=True)."""
        return next(iter(self.family("adapted")), None)

    @property
    def verdict(self) -> Verdict:
        """Fitted (plan only) against the best monolith, held to the aim."""
        mono = self.best_monolith
        return Verdict("fitted", f"best monolith ({mono.layout.title})", self.fitted.rates,
                       mono.rates, AIM_MONOLITH)

    @property
    def adapted_verdict(self) -> Verdict | None:
        """The adapted run against the best monolith (``None``: no adapted run)."""
        adapted, mono = self.adapted, self.best_monolith
        if adapted is None:
            return None
        return Verdict("fitted + adapt", f"best monolith ({mono.layout.title})",
                       adapted.rates, mono.rates)

    @property
    def hand_verdict(self) -> Verdict | None:
        """Fitted (plan only) against the best hand layout, held to its aim."""
        hand = self.best_hand
        if hand is None:
            return None
        return Verdict("fitted", f"best hand ({hand.layout.title})", self.fitted.rates,
                       hand.rates, AIM_HAND)

    @property
    def over_monolith(self) -> float:
        """Fitted median pages/s (startup left out) over the best monolith's."""
        return self.verdict.ratio

    @property
    def over_hand(self) -> float | None:
        """Fitted median pages/s (startup left out) over the best hand layout's."""
        verdict = self.hand_verdict
        return None if verdict is None or verdict.base_value <= 0 else verdict.ratio

    @property
    def memory_ratio(self) -> float | None:
        """Fitted peak worker memory over the best monolith's: PSS where read, else RSS."""
        fitted, mono = self.fitted, self.best_monolith
        if fitted.peak_pss and mono.peak_pss:
            return fitted.peak_pss / mono.peak_pss
        return fitted.peak_rss / mono.peak_rss if mono.peak_rss else None

    @property
    def rss_ratio(self) -> float | None:
        """Fitted peak summed worker RSS over the best monolith's."""
        mono = self.best_monolith.peak_rss
        return self.fitted.peak_rss / mono if mono else None

    @property
    def profile_cpu_per_page(self) -> float:
        """CPU seconds per page the profile measured (every unit alone in its process), at
        the batch sizes the plan runs (one, where it runs the units fused)."""
        batch = {g.unit: g.batch_size for g in self.plan.placement().groups}
        m, total = 1.0, 0.0
        for u in self.profile.units:
            size = 1 if self.plan.fused else batch.get(u.name) or u.batch_size
            cpu = next((b.cpu_s for b in u.batches if b.batch_size == size), u.cpu_s)
            total += m * cpu
            m *= u.output_ratio
        return total

    @property
    def plan_in_hand_grid(self) -> Contender | None:
        """The hand layout with the plan's replicas and batch sizes, if the grid has it."""
        if self.plan.fused:
            return None
        groups = self.plan.placement().groups
        counts = {g.unit: sum(h.replicas for h in groups if h.unit == g.unit) for g in groups}
        batch = next((g.batch_size for g in groups if g.unit == "recognise"), None)
        for c in self.family("hand"):
            size = c.layout.pipeline.unit_named("recognise").batch_size
            if c.layout.workers == counts and size == (batch or size):
                return c
        return None

    @property
    def baseline(self) -> Contender | None:
        """The monolith with the plan's monolithic replica count (its prediction's test)."""
        return next((c for c in self.family("monolith") if c.layout.predicted), None)

    def aims(self) -> dict[str, bool | None]:
        """Whether each aim was met: speed over the best monolith and the best hand layout
        (a win outside the noise by the aim's ratio: see `Verdict.aim_met`), and peak memory
        no more than the best monolith's (PSS, and RSS as asked)."""
        pss, rss = self.memory_ratio, self.rss_ratio
        hand = self.hand_verdict
        return {"over_monolith": bool(self.verdict.aim_met),
                "over_hand": None if hand is None or self.over_hand is None
                else bool(hand.aim_met),
                "memory": None if pss is None else pss <= 1.0,
                "memory_rss": None if rss is None else rss <= 1.0}


@dataclass
class DemoResult:
    """Everything the demo measured, checked and wrote."""

    config: DemoConfig
    pages: int
    host_cores: float
    gpu_class: str | None
    flops: Flops
    flops_note: str
    sweeps: list[Sweep]
    documents: list[Document]
    mismatched: list[str]
    load_average: tuple[float, float]
    wall_s: float
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def trials(self) -> list[Trial]:
        """Every trial, in the order they ran."""
        return sorted((t for s in self.sweeps for c in s.contenders for t in c.trials),
                      key=lambda t: t.finished_at)

    @property
    def same_text(self) -> bool:
        """Every trial read the same lines off every page it read."""
        return not self.mismatched

    def score(self, trial: Trial) -> Score:
        """How much of the known text of the pages it read ``trial`` got exactly."""
        read = [d for d in self.documents if d.id in trial.outputs]
        return score(read, trial.outputs)

    @property
    def failures(self) -> list[str]:
        """Each check that failed, in words (empty when the demo passed)."""
        found = []
        if not self.same_text:
            found.append(f"{len(self.mismatched)} pages read differently by different "
                         f"layouts (first: {', '.join(self.mismatched[:5])})")
        for trial in self.trials:
            name = f"{trial.layout} at {trial.latency_ms:g} ms, trial {trial.repeat + 1}"
            record = trial.record
            accuracy = self.score(trial).line_accuracy
            if accuracy < ACCURACY_THRESHOLD:
                found.append(f"{name}: {accuracy:.1%} of lines exact, under the "
                             f"{ACCURACY_THRESHOLD:.0%} required")
            if record.failures or record.items_completed != record.items_in:
                found.append(f"{name}: {record.items_completed} of {record.items_in} pages "
                             f"done, {record.failures} failed")
            if not trial.stored:
                found.append(f"{name}: the store does not hold every page's text")
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


def plan_config(plan: Plan) -> str:
    """What the plan runs, in words: units, replicas, threads, batch sizes (or the fused
    unit)."""
    groups = plan.placement().groups
    parts = [f"{g.unit} x{g.replicas}" + (f" x {g.io} threads" if g.io and g.io > 1 else "")
             + (f" (batch {g.batch_size})" if g.batch_size else "") for g in groups]
    text = ", ".join(parts)
    return f"fused: {text} (the plan chose not to split)" if plan.fused else text


def monolith_replicas(plan: Plan) -> int:
    """Replicas of the plan's monolithic baseline."""
    return sum(p.replicas for p in plan.monolithic.result.replicas) or 1


def process_counts(plan: Plan, config: DemoConfig, cores: float) -> list[int]:
    """Monolith processes to sweep: powers of two up to k, k itself, and the plan's count."""
    planned = monolith_replicas(plan)
    k = config.max_processes or max(int(4 * cores), planned)
    counts = {k} | {2 ** i for i in range(k.bit_length()) if 2 ** i < k}
    if planned <= k:
        counts.add(planned)
    return sorted(counts)


def layouts(plan: Plan, config: DemoConfig, cores: float, flops: Flops,
            gpu: bool) -> list[Layout]:
    """Every layout swept at one latency: monoliths, threaded monoliths, hand, fitted."""
    planned = monolith_replicas(plan)
    pages = config.images
    # the plan's baseline is this layout only where it runs one page at a time a process
    alike = not any(p.threads for p in plan.monolithic.result.replicas)
    mono = monolithic(flops, gpu)
    found = [Layout(key=f"monolith-p{p}", family="monolith", title=f"monolith x{p}",
                    config=f"{MONOLITHIC}, {p} process{'es' if p > 1 else ''}",
                    pipeline=mono, workers={MONOLITHIC: p},
                    predicted=plan.monolithic.throughput if p == planned and alike else None,
                    predicted_run=(plan.run_rate(pages, "monolithic") if p == planned and alike
                                   else None),
                    note="the plan's monolithic baseline" if p == planned and alike else "")
             for p in process_counts(plan, config, cores)]
    per_core = max(1, round(cores))
    found += [Layout(key=f"threaded-{per_core}x{n}", family="monolith",
                     title=f"threaded monolith {per_core}x{n}",
                     config=f"{MONOLITHIC} fused with io={n}: {per_core} process"
                            f"{'es' if per_core > 1 else ''} x {n} threads",
                     pipeline=threaded(flops, n, gpu), workers={THREADED: per_core})
              for n in config.io_threads]
    for d, r, b in config.hand:
        batch = b or RECOGNISE_BATCH
        found.append(Layout(
            key=f"hand-d{d}-r{r}" + (f"-b{b}" if b else ""), family="hand",
            title=f"hand d{d} r{r}" + (f" b{b}" if b else ""),
            config=f"fetch x1, detect x{d}, recognise x{r} (batch {batch}), store x1",
            pipeline=split(flops, gpu, batch), workers={"fetch": 1, "detect": d,
                                                        "recognise": r, "store": 1}))
    pipeline = split(flops, gpu)
    found.append(Layout(key="fitted", family="fitted", title="fitted (plan only)",
                        config=plan_config(plan), pipeline=pipeline, placement=plan,
                        predicted=plan.fitted.throughput,
                        predicted_run=plan.run_rate(pages),
                        note="planned by fit(profile, discover_local()), run as planned"))
    found.append(Layout(key="fitted-adapt", family="adapted", title="fitted + adapt",
                        config=plan_config(plan), pipeline=pipeline, placement=plan,
                        adapt=True, predicted=plan.fitted.throughput,
                        predicted_run=plan.run_rate(pages),
                        note="the same plan, re-fitted while it runs (adapt=True)"))
    return found


def profile_split(latency_ms: float, documents: list[Document], samples: list[dict[str, str]],
                  pipeline: Pipeline, listener: Listener,
                  models: PipelineProfile | None = None) -> PipelineProfile:
    """The split units' profile at one store latency (the store serving).  The model units
    never touch the store, so where ``models`` (a profile at another latency) has them,
    only ``fetch`` and ``store`` are measured again, ``store`` on each sample's known lines
    (what recognition reads off it)."""
    from fitwork import profile_pipeline

    def progress(unit: str) -> None:
        listener.phase(f"{latency_ms:g} ms: profiling {unit}")

    if models is None:
        return profile_pipeline(pipeline, samples, samples=len(samples), progress=progress)
    lines = {d.id: list(d.lines) for d in documents}
    inputs = {"fetch": samples, "store": [{"id": s["id"], "lines": lines[s["id"]]}
                                          for s in samples]}
    units = []
    for measured in models.units:
        if measured.name in inputs:
            (unit,) = [u for u in pipeline.units if u.name == measured.name]
            measured = profile_pipeline(Pipeline(unit, name=measured.name),
                                        inputs[measured.name], samples=len(samples),
                                        progress=progress).units[0]
        units.append(measured)
    return models.model_copy(update={"units": units})


def sweep_latency(latency_ms: float, documents: list[Document], config: DemoConfig,
                  fleet: Fleet, flops: Flops, gpu_class: str | None,
                  listener: Listener, models: PipelineProfile | None = None) -> Sweep:
    """Profile (the model units only where ``models`` has them not, see `profile_split`)
    and fit at one store latency, then run every layout ``repeats`` times."""
    cores = max(n.cores for n in fleet.node_types)
    gpu = gpu_class is not None
    items = [{"id": d.id} for d in documents]
    count = min(config.samples, len(items))
    samples = [items[i * len(items) // count] for i in range(count)]
    with serve({d.id: d.png for d in documents}, latency_ms) as store:
        profile = profile_split(latency_ms, documents, samples, split(flops, gpu), listener,
                                models)
        listener.phase(f"{latency_ms:g} ms: fitting the split units to this host")
        plan = plan_for(profile, fleet, precision=PRECISION)
        contenders = [Contender(layout) for layout in layouts(plan, config, cores, flops, gpu)]
        for repeat in range(config.repeats):
            order = contenders if repeat % 2 == 0 else contenders[::-1]
            for contender in order:
                label = (f"{latency_ms:g} ms {contender.layout.title} "
                         f"[{repeat + 1}/{config.repeats}]")
                listener.run_started(label, len(items))
                trial = run_trial(contender.layout, items, store, latency_ms, repeat,
                                  cap_s=config.cap_s,
                                  progress=functools.partial(listener.run_progress, label))
                listener.run_finished(label, f"{trial.rate:.2f} items/s, "
                                             f"{trial.record.items_completed} pages, "
                                             f"{trial.peak_rss / 2**20:,.0f} MiB RSS")
                contender.trials.append(trial)
    return Sweep(latency_ms=latency_ms, profile=profile, plan=plan, contenders=contenders)


def mismatched_pages(sweeps: list[Sweep], documents: list[Document]) -> list[str]:
    """Pages that two trials read differently."""
    found = []
    trials = [t for s in sweeps for c in s.contenders for t in c.trials]
    for document in documents:
        seen = [t.outputs[document.id] for t in trials if document.id in t.outputs]
        if any(lines != seen[0] for lines in seen[1:]):
            found.append(document.id)
    return found


def run_demo(config: DemoConfig | None = None, listener: Listener | None = None) -> DemoResult:
    """Run the demo end to end and write its files; checks are in ``.failures``."""
    from fitwork import discover_local

    config = config or DemoConfig()
    listener = listener or Quiet()
    missing = missing_dependencies()
    if missing:
        raise DemoError(f"the demo needs {'; '.join(missing)}: install its extra with "
                        "pip install 'fitwork[demo]'")
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
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
    with _environment(GPU_ENV, "1" if gpu_class else None):
        sweeps: list[Sweep] = []
        for latency in config.latencies_ms:
            sweeps.append(sweep_latency(latency, documents, config, fleet, flops, gpu_class,
                                        listener, sweeps[0].profile if sweeps else None))
    listener.phase("checking and writing")
    result = DemoResult(
        config=config, pages=len(documents), host_cores=host_cores, gpu_class=gpu_class,
        flops=flops, flops_note=flops_note, sweeps=sweeps, documents=documents,
        mismatched=mismatched_pages(sweeps, documents),
        load_average=(load_start, os.getloadavg()[0]), wall_s=time.perf_counter() - started)
    from fitwork_demo.files import write_files

    result.files = write_files(result)
    result.wall_s = time.perf_counter() - started
    return result


__all__ = ["Contender", "DemoError", "DemoResult", "Listener", "Quiet", "Sweep", "run_demo"]
