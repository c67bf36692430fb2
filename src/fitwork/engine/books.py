"""The books every engine's driver keeps: source items, completions, order, latency, record."""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from fitwork.engine.base import RunOptions
from fitwork.engine.ledger import Ledger
from fitwork.telemetry.record import (
    Progress,
    QueueSeries,
    RunRecord,
    UnitRecord,
    WorkerRecord,
    latency_figures,
    resource_utilization,
    summarize_units,
)
from fitwork.workload.pipeline import Pipeline

ORDERED_WINDOW = 4096
LIVE_FIGURES = ("items_in", "items_out", "busy_s", "cpu_s")


def version() -> str:
    """The installed fitwork version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("fitwork")
    except PackageNotFoundError:
        return "0+unknown"


class RunBooks:
    """Counts and orders what a run did; an engine's driver extends it with its own I/O."""

    engine_name = "engine"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], options: RunOptions) -> None:
        self.pipeline, self.options, self.units = pipeline, options, pipeline.units
        self.names = [u.name for u in self.units]
        self.run_id = uuid.uuid4().hex[:12]
        self.ledger = Ledger(options)
        self.source: Iterator[Any] = iter(source)
        self.source_done = False
        self.source_error: BaseException | None = None
        self.abort: BaseException | None = None
        self.out: deque[Any] = deque()
        self.ready: dict[int, list[Any]] = {}
        self.next_src = self.next_emit = 0
        self.completed = self.outputs = self.retries = self.restarts = 0
        self.deaths_since_progress = 0
        self.latencies: list[float] = []
        self.samples: list[tuple[float, list[int]]] = []
        self.t0 = self.started_at = self.ended = 0.0
        self.last_progress = 0.0
        self.context: Any = None

    def enter_context(self) -> None:
        """Enter the pipeline's driver-side context; the run's clock starts after it."""
        self.context = self.pipeline.run_context()
        self.context.__enter__()
        self.t0 = time.monotonic()
        self.started_at = time.time()

    def exit_context(self) -> None:
        """Leave the pipeline's context if it was entered (once)."""
        if self.context is not None:
            context, self.context = self.context, None
            context.__exit__(None, None, None)

    def window_full(self) -> bool:
        """In ordered mode, whether the source has run too far ahead of the oldest item."""
        return self.options.ordered and self.next_src - self.next_emit >= ORDERED_WINDOW

    def take(self, count: int, make: Callable[[int, Any, float], Any]) -> list[Any]:
        """Up to ``count`` new source items, each made into a record by ``make``.

        Notes the source's end, or its error (raised once the items in flight are done).
        """
        records: list[Any] = []
        now = time.monotonic()
        while len(records) < count:
            try:
                item = next(self.source)
            except StopIteration:
                self.source_done = True
                break
            except Exception as exc:
                self.source_done, self.source_error = True, exc
                break
            records.append(make(self.next_src, item, now))
            self.next_src += 1
        return records

    def complete(self, src: int, fed_at: float, ordered_values: Sequence[Any] = ()) -> None:
        """A source item is finished; in ordered mode its outputs join the queue in turn."""
        self.completed += 1
        self.deaths_since_progress = 0
        self.latencies.append(time.monotonic() - fed_at)
        if self.options.ordered:
            self.ready[src] = list(ordered_values)
            while self.next_emit in self.ready:
                self.out.extend(self.ready.pop(self.next_emit))
                self.next_emit += 1

    def report_progress(self, figures: dict[str, dict[str, float]], force: bool = False) -> None:
        """Call the progress callback at most every ``progress_interval`` seconds."""
        callback = self.options.progress
        now = time.monotonic()
        if callback is None or (not force and now - self.last_progress
                                < self.options.progress_interval):
            return
        self.last_progress = now
        depths = self.samples[-1][1] if self.samples else [0] * len(self.units)
        callback(Progress(
            elapsed_s=now - self.t0, fed=self.next_src, completed=self.completed,
            outputs=self.outputs, failures=self.ledger.failures,
            depths=dict(zip(self.names, depths, strict=True)), units=figures))

    def live_figures(self, per_worker: Iterable[tuple[int, dict[str, float]]]
                     ) -> dict[str, dict[str, float]]:
        """Per unit, replicas and the sums of its workers' cumulative counters."""
        figures = {u.name: {"replicas": float(u.replicas), **dict.fromkeys(LIVE_FIGURES, 0.0)}
                   for u in self.units}
        for stage, counters in per_worker:
            unit = figures[self.names[stage]]
            for key in LIVE_FIGURES:
                unit[key] += counters.get(key, 0.0)
        return figures

    def assemble(self, workers: list[WorkerRecord]) -> RunRecord:
        """The run record, from the workers' reports and these books."""
        wall = max((self.ended or time.monotonic()) - self.t0, 1e-9)
        bases = [UnitRecord(name=u.name, kind=u.kind.value, replicas=u.replicas,
                            resources={k: float(v) for k, v in u.resources.as_dict().items()},
                            batch_size=u.batch_size,
                            failures=self.ledger.by_unit.get(u.name, 0))
                 for u in self.units]
        units = summarize_units(bases, workers, wall)
        p50, p95 = latency_figures(self.latencies)
        queue = QueueSeries(
            times_s=[t for t, _ in self.samples],
            depths={name: [d[i] for _, d in self.samples] for i, name in enumerate(self.names)})
        return RunRecord(
            fitwork_version=version(), run_id=self.run_id, pipeline=self.pipeline.name,
            engine=self.engine_name, started_at=self.started_at, wall_s=wall,
            items_in=self.next_src, items_completed=self.completed, outputs=self.outputs,
            failures=self.ledger.failures, poisoned=self.ledger.poisoned,
            retries=self.retries, worker_restarts=self.restarts,
            throughput=self.completed / wall, latency_p50_s=p50, latency_p95_s=p95,
            units=units, resources=resource_utilization(units, wall), workers=workers,
            queue=queue, failed_items=self.ledger.items,
            dead_letter=str(self.options.dead_letter) if self.options.dead_letter else None)
